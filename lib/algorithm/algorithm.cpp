// Algorithm names, dispatch, error-feedback slots, the auto rule and each algorithm's number of
// quantizations per value (declared in error_model.hpp).
#include "algorithm/algorithm.hpp"

#include <array>

#include "adaprec/error.hpp"
#include "algorithm/error_model.hpp"
#include "transport/timeout.hpp"

namespace adaprec {
namespace {

struct AlgorithmRow {
  Algorithm algorithm;
  std::string_view name;
};

constexpr std::array<AlgorithmRow, 7> kAlgorithms = {{
    {Algorithm::kAuto, "auto"},
    {Algorithm::kNative, "native"},
    {Algorithm::kRing, "ring"},
    {Algorithm::kTwoShot, "twoshot"},
    {Algorithm::kRabenseifner, "rabenseifner"},
    {Algorithm::kRecursiveDoubling, "recursive_doubling"},
    {Algorithm::kHierarchical, "hierarchical"},
}};

constexpr std::array<Algorithm, kAlgorithms.size()> kAlgorithmList = {
    Algorithm::kAuto,         Algorithm::kNative,            Algorithm::kRing,
    Algorithm::kTwoShot,      Algorithm::kRabenseifner,      Algorithm::kRecursiveDoubling,
    Algorithm::kHierarchical};

}  // namespace

std::span<const Algorithm> allAlgorithms() { return kAlgorithmList; }

std::string_view algorithmName(Algorithm algorithm) {
  for (const AlgorithmRow& row : kAlgorithms) {
    if (row.algorithm == algorithm) return row.name;
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument,
               "unknown algorithm id " << static_cast<int>(static_cast<std::uint8_t>(algorithm)));
}

std::optional<Algorithm> tryParseAlgorithm(std::string_view name) {
  for (const AlgorithmRow& row : kAlgorithms) {
    if (row.name == name) return row.algorithm;
  }
  return std::nullopt;
}

std::string validAlgorithmNames() {
  std::string names;
  for (const AlgorithmRow& row : kAlgorithms) {
    if (!names.empty()) names += ", ";
    names += row.name;
  }
  return names;
}

Algorithm parseAlgorithm(std::string_view name) {
  const std::optional<Algorithm> algorithm = tryParseAlgorithm(name);
  ADAPREC_CHECK_ARG(algorithm.has_value(),
                    "unknown algorithm '" << name << "'; valid algorithms: " << validAlgorithmNames());
  return *algorithm;
}

namespace detail {

float* Residuals::slot(std::size_t index, std::size_t count) {
  if (slots_.size() <= index) slots_.resize(index + 1);
  std::vector<float>& s = slots_[index];
  if (s.size() != count) s.assign(count, 0.0f);
  return s.data();
}

std::span<std::byte> Workspace::bytes(std::size_t slot, std::size_t size) {
  ADAPREC_CHECK(slot < kSlots, ErrorCode::kInternal, "workspace slot " << slot);
  if (capacity_[slot] < size) {
    buffers_[slot].reset();  // release first: the old and new buffer need not coexist
    buffers_[slot] = std::make_unique_for_overwrite<std::byte[]>(size);
    capacity_[slot] = size;
  }
  return {buffers_[slot].get(), size};
}

std::span<float> Workspace::floats(std::size_t slot, std::size_t count) {
  const std::span<std::byte> raw = bytes(slot, count * sizeof(float));
  return {reinterpret_cast<float*>(raw.data()), count};
}

void runAlgorithm(Algorithm algorithm, AlgorithmContext& ctx, float* buf, std::size_t count) {
  runWithCompletionVote(ctx.transport, [&] { runAlgorithmUnconfirmed(algorithm, ctx, buf, count); });
}

void runAlgorithmUnconfirmed(Algorithm algorithm, AlgorithmContext& ctx, float* buf,
                             std::size_t count) {
  switch (algorithm) {
    case Algorithm::kNative: return nativeAllreduce(ctx, buf, count);
    case Algorithm::kRing: return ringAllreduce(ctx, buf, count);
    case Algorithm::kTwoShot: return twoShotAllreduce(ctx, buf, count);
    case Algorithm::kRabenseifner: return rabenseifnerAllreduce(ctx, buf, count);
    case Algorithm::kRecursiveDoubling: return recursiveDoublingAllreduce(ctx, buf, count);
    case Algorithm::kHierarchical: return hierarchicalAllreduce(ctx, buf, count);
    case Algorithm::kAuto: break;
  }
  ADAPREC_FAIL(ErrorCode::kInternal, "runAlgorithm needs a concrete algorithm, got "
                                         << algorithmName(algorithm));
}

// The auto rule; docs/algorithms.md explains the reasons.
Algorithm chooseAlgorithm(Format format, std::size_t count, int ranks, int nodes,
                          int maxRanksPerNode) {
  if (ranks == 1 || format == Format::kFp32) return Algorithm::kNative;
  if (count * sizeof(float) < kAutoCompressMinBytes) return Algorithm::kNative;
  // One shared-memory domain: moving a byte costs about what encoding it does, so compression only
  // pays for very large messages (measured: docs/algorithms.md, "Measured").
  if (nodes == 1 && count * sizeof(float) < kAutoCompressSharedMinBytes) return Algorithm::kNative;
  if (nodes > 1 && maxRanksPerNode > 1) return Algorithm::kHierarchical;
  if (ranks <= kTwoShotMaxRanks) return Algorithm::kTwoShot;
  return Algorithm::kRabenseifner;
}

Algorithm hierarchicalInnerAlgorithm(Format format, int nodes) {
  if (format == Format::kFp32) return Algorithm::kNative;
  return nodes <= kTwoShotMaxRanks ? Algorithm::kTwoShot : Algorithm::kRabenseifner;
}

namespace {

int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

}  // namespace

// Q of docs/algorithms.md, from the steps in each algorithm's header comment; q = largest power of two
// <= p, and p != q adds the pre/post step of rabenseifner and recursive_doubling.
int quantizationsPerValue(Algorithm algorithm, Format wire, int ranks, int nodes) {
  if (ranks <= 1) return 0;
  const int log2q = floorLog2(ranks);
  const bool prePostStep = (1 << log2q) != ranks;
  switch (algorithm) {
    // MPI sums fp32 as is; bf16/fp16 round once up front and after each of up to p-1 additions.
    case Algorithm::kNative: return wire == Format::kFp32 ? 0 : ranks;
    // p-1 re-encodes of partial sums in the reduce-scatter + 1 by the owner.
    case Algorithm::kRing: return ranks;
    // The contributor's encode + the owner's encode.
    case Algorithm::kTwoShot: return 2;
    // One encode per halving round + the owner's; the pre-step's encode of the even ranks' vectors.
    case Algorithm::kRabenseifner: return log2q + 1 + (prePostStep ? 1 : 0);
    // One encode per round; pre-step and post-step encodes.
    case Algorithm::kRecursiveDoubling: return log2q + (prePostStep ? 2 : 0);
    // fp32 inside a node; only each share's inner allreduce among the nodes quantizes.
    case Algorithm::kHierarchical:
      return quantizationsPerValue(hierarchicalInnerAlgorithm(wire, nodes), wire, nodes, nodes);
    case Algorithm::kAuto: break;
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument,
               "quantizationsPerValue needs a concrete algorithm, got " << algorithmName(algorithm));
}

}  // namespace detail
}  // namespace adaprec
