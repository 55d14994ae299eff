#include "result_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "adaprec/codec.hpp"

namespace adaprec::bench {

namespace {

// Elements whose reference is formed at once: bounds the scratch memory whatever the count.
constexpr std::size_t kReferenceBlockCount = std::size_t{1} << 20;

// A bound on |S_i| = |sum over ranks of z_i| for every element of segments first..last, from the data's
// construction (|z| <= 2*sqrt(3) times its segment's scale): known before the check pass, so the pass
// needs no second sweep.
double segmentSumBound(const BenchData& data, int ranks, std::size_t first, std::size_t last) {
  double maxScale = 0;
  for (std::size_t segment = first; segment <= last; ++segment) maxScale = std::max(maxScale, data.segmentScale(segment));
  return ranks * 2.0 * std::sqrt(3.0) * maxScale;
}

// A bound on max_i S_i over the whole buffer.
double absSumBound(const BenchData& data, int ranks, std::size_t count) {
  return count == 0 ? 0.0 : segmentSumBound(data, ranks, 0, (count - 1) / BenchData::kSegmentCount);
}

// A bound on the largest |partial sum| of any scale block (detail::kScaleBlock elements, wherever a
// piece starts) holding element i: such a block lies within the segments next to i's, since a segment
// is longer than a block. fp8s/e4m3 err relative to their block's maximum, and the data's segments
// differ in scale by up to 10^3: against the whole buffer's maximum a zeroed or halved result of a
// small-scale segment passed the check (a hostile pass).
double blockSumBound(const BenchData& data, int ranks, std::size_t i, std::size_t count) {
  static_assert(kScaleBlock <= BenchData::kSegmentCount, "a block must lie within three segments");
  const std::size_t segment = i / BenchData::kSegmentCount;
  const std::size_t last = (count - 1) / BenchData::kSegmentCount;
  return segmentSumBound(data, ranks, segment > 0 ? segment - 1 : 0, std::min(segment + 1, last));
}

}  // namespace

CheckResult checkResult(RankCollectives& ranks, const BenchData& data, const float* result, float* rootCopy,
                        std::size_t count, Format format, bool errorFeedback) {
  const int p = ranks.size();
  const int me = ranks.rank();
  std::uint64_t wrong = 0;

  // Bit-identity with rank 0, over the whole buffer.
  if (p > 1) {
    if (me == 0) std::memcpy(rootCopy, result, count * sizeof(float));
    ranks.broadcastFromRoot(rootCopy, count * sizeof(float));
    if (me != 0) {
      for (std::size_t i = 0; i < count; ++i) {
        if (std::memcmp(&rootCopy[i], &result[i], sizeof(float)) != 0) ++wrong;
      }
    }
  }

  // Reference on this rank's slice, a block at a time.
  const std::size_t begin = count * static_cast<std::size_t>(me) / static_cast<std::size_t>(p);
  const std::size_t end = count * static_cast<std::size_t>(me + 1) / static_cast<std::size_t>(p);
  const double k = static_cast<double>(p + 1) * (errorFeedback ? 2.0 : 1.0);
  const double rangeMax = absSumBound(data, p, count);  // bounds every chunk's maximum
  const bool blockScaled = detail::formatErrorModel(format).scale == detail::ErrorScale::kBlockMax;
  std::size_t rangeSegment = std::numeric_limits<std::size_t>::max();  // blockRange's segment
  double blockRange = 0;
  std::vector<float> values;
  std::vector<double> sum;
  std::vector<double> absSum;
  double maxRef = 0;
  double maxDiff = 0;
  for (std::size_t blockBegin = begin; blockBegin < end; blockBegin += kReferenceBlockCount) {
    const std::size_t blockEnd = std::min(end, blockBegin + kReferenceBlockCount);
    const std::size_t n = blockEnd - blockBegin;
    values.resize(n);
    sum.assign(n, 0.0);
    absSum.assign(n, 0.0);
    for (int r = 0; r < p; ++r) {
      data.fill(r, values.data(), blockBegin, blockEnd);
      for (std::size_t i = 0; i < n; ++i) {
        sum[i] += values[i];
        absSum[i] += std::fabs(static_cast<double>(values[i]));
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      maxRef = std::max(maxRef, std::fabs(sum[i]));
      const double out = result[blockBegin + i];
      if (!std::isfinite(out)) {
        ++wrong;
        maxDiff = std::numeric_limits<double>::infinity();
        continue;
      }
      const double diff = std::fabs(out - sum[i]);
      maxDiff = std::max(maxDiff, diff);
      if (blockScaled && (blockBegin + i) / BenchData::kSegmentCount != rangeSegment) {
        rangeSegment = (blockBegin + i) / BenchData::kSegmentCount;
        blockRange = blockSumBound(data, p, blockBegin + i, count);
      }
      const double range = blockScaled ? blockRange : rangeMax;
      const double bound = p * 0x1p-24 * absSum[i] + k * detail::quantizationErrorBound(format, absSum[i], range);
      if (diff > bound) ++wrong;
    }
  }
  maxRef = ranks.maxOverRanks(maxRef);
  CheckResult check;
  // maxOverRanks works on the bit patterns; +inf is the largest of them, as it should be.
  check.maxError = ranks.maxOverRanks(maxDiff) / (maxRef > 0 ? maxRef : 1.0);
  check.wrong = ranks.sumOverRanks(wrong);
  return check;
}

}  // namespace adaprec::bench
