#include "rank_collectives.hpp"

#include <algorithm>
#include <bit>
#include <set>

#include "adaprec/error.hpp"

namespace adaprec::bench {

namespace {
constexpr int kBroadcastTag = kMaxAlgorithmTag - 1;
// Pieces of a broadcast, so one message stays far below MPI's int count limit.
constexpr std::size_t kBroadcastPieceBytes = std::size_t{64} << 20;
}  // namespace

void RankCollectives::barrier() {
  std::uint64_t zero = 0;
  transport_.allreduceMax(&zero, 1);
}

// Non-negative IEEE doubles order like their bit patterns, so a max of the patterns is the max.
void RankCollectives::maxOverRanks(std::vector<double>& values) {
  std::vector<std::uint64_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    ADAPREC_CHECK(values[i] >= 0.0, ErrorCode::kInternal, "maxOverRanks needs values >= 0, got " << values[i]);
    bits[i] = std::bit_cast<std::uint64_t>(values[i]);
  }
  transport_.allreduceMax(bits.data(), bits.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::bit_cast<double>(bits[i]);
}

double RankCollectives::maxOverRanks(double value) {
  std::vector<double> values{value};
  maxOverRanks(values);
  return values[0];
}

// Each rank fills its own slot of a size()-long vector; the max then holds every rank's value.
std::uint64_t RankCollectives::sumOverRanks(std::uint64_t value) {
  std::vector<std::uint64_t> slots(static_cast<std::size_t>(size()), 0);
  slots[static_cast<std::size_t>(rank())] = value;
  transport_.allreduceMax(slots.data(), slots.size());
  std::uint64_t sum = 0;
  for (auto v : slots) sum += v;
  return sum;
}

bool RankCollectives::anyRank(bool flag) {
  std::uint64_t value = flag ? 1 : 0;
  transport_.allreduceMax(&value, 1);
  return value != 0;
}

void RankCollectives::broadcastFromRoot(void* data, std::size_t bytes) {
  auto* base = static_cast<char*>(data);
  for (std::size_t offset = 0; offset < bytes; offset += kBroadcastPieceBytes) {
    const std::size_t piece = std::min(kBroadcastPieceBytes, bytes - offset);
    if (rank() == 0) {
      std::vector<RequestPtr> sends;
      for (int peer = 1; peer < size(); ++peer) sends.push_back(transport_.isend(peer, base + offset, piece, kBroadcastTag));
      for (auto& request : sends) request->wait();
    } else {
      const std::size_t got = transport_.irecv(0, base + offset, piece, kBroadcastTag)->wait();
      ADAPREC_CHECK(got == piece, ErrorCode::kMismatch, "broadcast piece of " << got << " bytes, expected " << piece);
    }
  }
}

std::vector<int> RankCollectives::nodeIds() {
  std::vector<std::uint64_t> slots(static_cast<std::size_t>(size()), 0);
  const int id = transport_.nodeId();
  ADAPREC_CHECK(id >= 0, ErrorCode::kInternal, "negative nodeId " << id);
  slots[static_cast<std::size_t>(rank())] = static_cast<std::uint64_t>(id);
  transport_.allreduceMax(slots.data(), slots.size());
  return {slots.begin(), slots.end()};
}

int RankCollectives::nodeCount() {
  const std::vector<int> ids = nodeIds();
  return static_cast<int>(std::set<int>(ids.begin(), ids.end()).size());
}

}  // namespace adaprec::bench
