// Checksum transport: a decorator that appends a CRC32C trailer to every message and checks it on
// arrival (makeChecksumTransport, declared in adaprec/transport.hpp). The CRC covers a 20-byte
// message header that is not sent, {sender, receiver, tag, sequence number of the message on its
// (sender, receiver, tag) channel}, then the payload; so a message with flipped bits, cut short,
// delivered to the wrong rank or tag, reordered, replayed or dropped-and-followed fails its check.
// Costs per message: one copy on each side (the trailer needs a staging buffer) and a CRC pass.
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "adaprec/error.hpp"
#include "adaprec/transport.hpp"
#include "transport/crc32c.hpp"

namespace adaprec {
namespace {

constexpr std::size_t kTrailerBytes = 4;

std::uint32_t messageCrc(int sender, int receiver, int tag, std::uint64_t sequence,
                         const std::byte* payload, std::size_t bytes) {
  unsigned char header[20];
  const std::uint32_t fields[3] = {static_cast<std::uint32_t>(sender),
                                   static_cast<std::uint32_t>(receiver),
                                   static_cast<std::uint32_t>(tag)};
  for (int f = 0; f < 3; ++f)
    for (int b = 0; b < 4; ++b) header[4 * f + b] = static_cast<unsigned char>(fields[f] >> (8 * b));
  for (int b = 0; b < 8; ++b) header[12 + b] = static_cast<unsigned char>(sequence >> (8 * b));
  return detail::crc32cExtend(detail::crc32c(header, sizeof header), payload, bytes);
}

void storeLe32(std::byte* p, std::uint32_t v) {
  for (int b = 0; b < 4; ++b) p[b] = static_cast<std::byte>(v >> (8 * b));
}

std::uint32_t loadLe32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int b = 0; b < 4; ++b) v |= static_cast<std::uint32_t>(p[b]) << (8 * b);
  return v;
}

class ChecksumSend final : public Request {
 public:
  ChecksumSend(std::vector<std::byte> staged, std::size_t payloadBytes)
      : staged_(std::move(staged)), payloadBytes_(payloadBytes) {}
  void start(RequestPtr inner) { inner_ = std::move(inner); }
  std::size_t wait() override {
    inner_->wait();
    return payloadBytes_;
  }
  bool done() const override { return inner_->done(); }
  std::byte* data() { return staged_.data(); }

 private:
  std::vector<std::byte> staged_;  // declared first: destroyed after the inner request
  std::size_t payloadBytes_;
  RequestPtr inner_;
};

class ChecksumRecv final : public Request {
 public:
  ChecksumRecv(void* data, std::size_t capacity, int sender, int receiver, int tag,
               std::uint64_t sequence)
      : staged_(capacity + kTrailerBytes), data_(data), sender_(sender), receiver_(receiver),
        tag_(tag), sequence_(sequence) {}
  void start(RequestPtr inner) { inner_ = std::move(inner); }
  std::byte* data() { return staged_.data(); }
  std::size_t capacity() const { return staged_.size(); }

  std::size_t wait() override {
    if (checked_) return payloadBytes_;
    const std::size_t got = inner_->wait();
    checked_ = true;
    ADAPREC_CHECK(got >= kTrailerBytes, ErrorCode::kTransport,
                  "checksum: message #" << sequence_ << " from rank " << sender_ << " (tag " << tag_
                                        << ") has " << got
                                        << " bytes, fewer than its 4-byte CRC32C trailer");
    const std::size_t payload = got - kTrailerBytes;
    const std::uint32_t sent = loadLe32(staged_.data() + payload);
    const std::uint32_t computed =
        messageCrc(sender_, receiver_, tag_, sequence_, staged_.data(), payload);
    ADAPREC_CHECK(sent == computed, ErrorCode::kTransport,
                  "checksum mismatch on message #" << sequence_ << " from rank " << sender_
                      << " to rank " << receiver_ << " (tag " << tag_ << ", " << payload
                      << " bytes): the bytes were damaged, cut, reordered or lost on the way");
    if (payload != 0) std::memcpy(data_, staged_.data(), payload);
    payloadBytes_ = payload;
    return payload;
  }
  bool done() const override { return checked_ || inner_->done(); }

 private:
  std::vector<std::byte> staged_;  // declared first: destroyed after the inner request
  void* data_;
  int sender_;
  int receiver_;
  int tag_;
  std::uint64_t sequence_;
  RequestPtr inner_;
  bool checked_ = false;
  std::size_t payloadBytes_ = 0;
};

class ChecksumTransport final : public Transport {
 public:
  explicit ChecksumTransport(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* kind() const override { return inner_->kind(); }
  int nodeId() const override { return inner_->nodeId(); }
  int jobRank() const override { return inner_->jobRank(); }
  std::size_t interNodeMessageBytes() const override { return inner_->interNodeMessageBytes(); }

  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override {
    std::vector<std::byte> staged(bytes + kTrailerBytes);
    if (bytes != 0) std::memcpy(staged.data(), data, bytes);
    const std::uint64_t sequence = sendSequence_[{peer, tag}];
    storeLe32(staged.data() + bytes, messageCrc(rank(), peer, tag, sequence, staged.data(), bytes));
    auto request = std::make_unique<ChecksumSend>(std::move(staged), bytes);
    request->start(inner_->isend(peer, request->data(), bytes + kTrailerBytes, tag));
    ++sendSequence_[{peer, tag}];  // only once the inner transport accepted the message
    return request;
  }

  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override {
    const std::uint64_t sequence = recvSequence_[{peer, tag}];
    auto request = std::make_unique<ChecksumRecv>(data, capacityBytes, peer, rank(), tag, sequence);
    request->start(inner_->irecv(peer, request->data(), request->capacity(), tag));
    ++recvSequence_[{peer, tag}];
    return request;
  }

  void allreduceMax(std::uint64_t* values, std::size_t count) override {
    inner_->allreduceMax(values, count);
  }
  void nativeAllreduce(void* recv, std::size_t count, NativeType type) override {
    inner_->nativeAllreduce(recv, count, type);
  }
  void nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                 NativeType type) override {
    inner_->nativeAllreduceOutOfPlace(send, recv, count, type);
  }

  std::unique_ptr<Transport> split(int color, int key) override {
    return std::make_unique<ChecksumTransport>(std::shared_ptr<Transport>(inner_->split(color, key)));
  }

  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }

 private:
  std::shared_ptr<Transport> inner_;
  std::map<std::pair<int, int>, std::uint64_t> sendSequence_;  // (peer, tag) -> next message number
  std::map<std::pair<int, int>, std::uint64_t> recvSequence_;
};

}  // namespace

std::shared_ptr<Transport> makeChecksumTransport(std::shared_ptr<Transport> inner) {
  ADAPREC_CHECK_ARG(inner != nullptr, "makeChecksumTransport needs a transport");
  return std::make_shared<ChecksumTransport>(std::move(inner));
}

}  // namespace adaprec
