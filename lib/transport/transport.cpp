// Transport's default collectives, built only on isend/irecv so every transport has them.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adaprec/error.hpp"
#include "config/environment_variables.hpp"
#include "adaprec/transport.hpp"
#include "codec/half_sum.hpp"
#include "transport/internal_tags.hpp"
#include "transport/timeout.hpp"

namespace adaprec {

std::size_t Transport::sendRecv(int sendPeer, const void* sendData, std::size_t sendBytes,
                                int recvPeer, void* recvData, std::size_t recvCapacityBytes,
                                int tag) {
  RequestPtr recv = irecv(recvPeer, recvData, recvCapacityBytes, tag);
  RequestPtr send = isend(sendPeer, sendData, sendBytes, tag);
  send->wait();
  return recv->wait();
}

// Dissemination: in round k every rank sends what it has to rank+2^k and merges what rank-2^k sent.
// After ceil(log2 p) rounds each rank has seen every value; max is idempotent, so duplicates are fine.
void Transport::allreduceMax(std::uint64_t* values, std::size_t count) {
  const int p = size();
  const int r = rank();
  if (p == 1 || count == 0) return;
  std::vector<std::uint64_t> outgoing(count);
  std::vector<std::uint64_t> incoming(count);
  for (int distance = 1; distance < p; distance *= 2) {
    std::copy(values, values + count, outgoing.begin());
    const std::size_t got =
        sendRecv((r + distance) % p, outgoing.data(), count * sizeof(std::uint64_t),
                 (r - distance + p) % p, incoming.data(), count * sizeof(std::uint64_t),
                 detail::kTagAllreduceMax);
    ADAPREC_CHECK(got == count * sizeof(std::uint64_t), ErrorCode::kMismatch,
                  "allreduceMax: peer sent " << got << " bytes, expected " << count * 8);
    for (std::size_t i = 0; i < count; ++i) values[i] = std::max(values[i], incoming[i]);
  }
}

namespace {

std::size_t nativeElementBytes(NativeType type) { return type == NativeType::kFp32 ? 4 : 2; }

// acc[i] = acc[i] + in[i] with the native type's rounding.
void nativeAdd(NativeType type, void* acc, const void* in, std::size_t count) {
  if (type == NativeType::kFp32) {
    float* a = static_cast<float*>(acc);
    const float* b = static_cast<const float*>(in);
    for (std::size_t i = 0; i < count; ++i) a[i] += b[i];
    return;
  }
  // 16-bit: the codec's arithmetic (codec/half_sum.hpp); the transport only moves the bytes.
  std::uint16_t* a = static_cast<std::uint16_t*>(acc);
  detail::addHalf(type == NativeType::kBf16 ? Format::kBf16 : Format::kFp16, a,
                  static_cast<const std::uint16_t*>(in), a, count);
}

}  // namespace

// Gather to rank 0, sum in rank order (one rounding per addition), broadcast: simple and
// bit-identical; transports with a real native collective override it. With a timeout set, a completion
// vote follows, so a lost broadcast fails every rank rather than only its receiver.
void Transport::nativeAllreduce(void* recv, std::size_t count, NativeType type) {
  const int p = size();
  if (p == 1 || count == 0) return;
  detail::runWithCompletionVote(*this, [&] { gatherSumBroadcast(recv, count, type); });
}

void Transport::gatherSumBroadcast(void* recv, std::size_t count, NativeType type) {
  const int p = size();
  const std::size_t bytes = count * nativeElementBytes(type);
  if (rank() == 0) {
    std::vector<std::byte> incoming(bytes);
    for (int peer = 1; peer < p; ++peer) {
      const std::size_t got =
          irecv(peer, incoming.data(), bytes, detail::kTagNativeGather)->wait();
      ADAPREC_CHECK(got == bytes, ErrorCode::kMismatch,
                    "native allreduce: rank " << peer << " sent " << got << " bytes, rank 0 expected "
                                              << bytes);
      nativeAdd(type, recv, incoming.data(), count);
    }
    std::vector<RequestPtr> sends;
    for (int peer = 1; peer < p; ++peer)
      sends.push_back(isend(peer, recv, bytes, detail::kTagNativeBcast));
    for (RequestPtr& s : sends) s->wait();
  } else {
    isend(0, recv, bytes, detail::kTagNativeGather)->wait();
    const std::size_t got = irecv(0, recv, bytes, detail::kTagNativeBcast)->wait();
    ADAPREC_CHECK(got == bytes, ErrorCode::kMismatch,
                  "native allreduce: rank 0 sent " << got << " bytes, expected " << bytes);
  }
}

void Transport::nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                          NativeType type) {
  if (send != recv && count != 0) std::memmove(recv, send, count * nativeElementBytes(type));
  nativeAllreduce(recv, count, type);
}

bool Transport::acceptsDeviceMemory(std::string_view) const { return false; }

std::size_t Transport::interNodeMessageBytes() const { return 0; }

void Transport::barrier() {
  std::uint64_t none = 0;
  allreduceMax(&none, 1);
}

namespace detail {

int ranksPerNodeOverride() {
  return static_cast<int>(readEnvironmentUnsigned(kEnvRanksPerNodeName).value_or(0));
}

}  // namespace detail
}  // namespace adaprec
