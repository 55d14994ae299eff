// Algorithm names, dispatch, error-feedback slots and the auto rule.
#include "algorithm/algorithm.hpp"

#include <array>

#include "adaprec/error.hpp"
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
  if (ranks <= 8) return Algorithm::kTwoShot;
  return Algorithm::kRabenseifner;
}

}  // namespace detail
}  // namespace adaprec
