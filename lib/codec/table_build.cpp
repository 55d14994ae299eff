#include "codec/table_build.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/detail/table_spec.hpp"

namespace adaprec::codec {
namespace {

// Table entries from m ascending magnitudes (fp32 bit patterns, which order like the values): for
// tableN entry k-1 is the 99k/K-th percentile (k = 1..K); for tableNz entry 0 is +0 and entry k the
// 99k/(K-1)-th percentile of the (non-zero) magnitudes (k = 1..K-1).
void pickPercentiles(const std::uint32_t* sorted, std::size_t m, Format format, float* table) {
  const std::size_t tableSize = std::size_t{1} << (tableBits(format) - 1);
  const std::size_t first = hasZeroCode(format) ? 1 : 0;
  const std::size_t ranked = tableSize - first;
  if (first == 1) table[0] = 0.0f;
  for (std::size_t k = 1; k <= ranked; ++k) {
    table[first + k - 1] = m == 0 ? 0.0f : detail::bitsFloat(sorted[detail::tablePercentileRank(k, ranked, m)]);
  }
}

// Whether a magnitude (fp32 bits, sign cleared) enters the percentiles: finite, and for tableNz
// non-zero (zeros have their own code).
bool ranks(std::uint32_t a, bool zeroCode) { return a < detail::kF32InfBits && (!zeroCode || a != 0); }

// LSD radix sort of up to kTableSampleCount 31-bit keys, 11 bits per pass: cheaper than std::sort
// at this size and allocation-free. The sorted keys are in `keys` on return.
void radixSort(std::uint32_t* keys, std::uint32_t* scratch, std::size_t m) {
  constexpr unsigned kRadixBits = 11;
  constexpr std::size_t kBuckets = std::size_t{1} << kRadixBits;
  std::array<std::uint32_t, kBuckets> counts;
  for (unsigned shift = 0; shift < 31; shift += kRadixBits) {
    counts.fill(0);
    for (std::size_t i = 0; i < m; ++i) ++counts[(keys[i] >> shift) & (kBuckets - 1)];
    std::uint32_t sum = 0;
    for (std::uint32_t& c : counts) {
      const std::uint32_t here = c;
      c = sum;
      sum += here;
    }
    for (std::size_t i = 0; i < m; ++i) scratch[counts[(keys[i] >> shift) & (kBuckets - 1)]++] = keys[i];
    std::swap(keys, scratch);
  }
  // Three passes (0, 11, 22) end in the buffer that started as `scratch`, now named `keys`.
  std::copy(keys, keys + m, scratch);
}

}  // namespace

void buildTable(Format format, const float* src, std::size_t count, float* table) {
  std::array<std::uint32_t, kTableSampleCount> sample;
  std::array<std::uint32_t, kTableSampleCount> scratch;
  const bool zeroCode = hasZeroCode(format);
  const std::uint64_t size = detail::tableSampleSize(count, kTableSampleCount);
  std::size_t m = 0;
  for (std::uint64_t j = 0; j < size; ++j) {
    const std::uint32_t a =
        detail::floatBits(src[detail::tableSamplePosition(j, count, kTableSampleCount)]) & detail::kF32AbsMask;
    if (ranks(a, zeroCode)) sample[m++] = a;
  }
  radixSort(sample.data(), scratch.data(), m);
  pickPercentiles(sample.data(), m, format, table);
}

void buildExactTable(Format format, const float* src, std::size_t count, float* table) {
  const bool zeroCode = hasZeroCode(format);
  std::vector<std::uint32_t> all;
  all.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t a = detail::floatBits(src[i]) & detail::kF32AbsMask;
    if (ranks(a, zeroCode)) all.push_back(a);
  }
  std::sort(all.begin(), all.end());
  pickPercentiles(all.data(), all.size(), format, table);
}

}  // namespace adaprec::codec
