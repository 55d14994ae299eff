// Table-N: the parts of the specification (docs/formats.md) that any implementation, CPU or GPU, must
// compute identically: which elements the percentile sample reads, which order statistic each table
// entry is, the decision thresholds between neighbouring entries and the bit packing of codes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/detail/scalar_convert.hpp"

namespace adaprec::detail {

// A fixed 32-bit integer mix (xorshift-multiply rounds): spreads sample positions inside each stratum.
ADAPREC_HD std::uint32_t tableSampleHash(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

// Number of sampled positions for a chunk of n elements: all of them up to sampleCount.
ADAPREC_HD std::uint64_t tableSampleSize(std::uint64_t n, std::uint64_t sampleCount) {
  return n < sampleCount ? n : sampleCount;
}

// Position of sample j (0 <= j < tableSampleSize(n, S)). With n <= S every element is read once.
// Otherwise the chunk is cut into S strata [floor(j*n/S), floor((j+1)*n/S)) and sample j is the element
// at offset hash(j) mod (stratum length) inside stratum j: a stratified, deterministic sample.
ADAPREC_HD std::uint64_t tableSamplePosition(std::uint64_t j, std::uint64_t n, std::uint64_t sampleCount) {
  if (n <= sampleCount) return j;
  const std::uint64_t begin = j * n / sampleCount;
  const std::uint64_t end = (j + 1) * n / sampleCount;
  return begin + tableSampleHash(static_cast<std::uint32_t>(j)) % (end - begin);
}

// Entry k (1 <= k <= K) of the table is the 99*k/K-th percentile of the m finite sampled magnitudes,
// taken as the order statistic of rank floor(99*k*(m-1) / (100*K)) (0-based, ascending).
ADAPREC_HD std::uint64_t tablePercentileRank(std::uint64_t k, std::uint64_t tableSize, std::uint64_t m) {
  return (99u * k * (m - 1)) / (100u * tableSize);
}

// Threshold between entries k and k+1: the fp32 midpoint 0.5*t[k] + 0.5*t[k+1] (each operation
// rounded to nearest even). A magnitude a gets index #{k : a > mid[k]}; since the table is
// non-decreasing so are the midpoints, and ties go to the smaller entry.
ADAPREC_HD float tableMidpoint(float lower, float upper) {
  return addRn(mulRn(0.5f, lower), mulRn(0.5f, upper));
}

// Bytes of packed codes for n elements of N bits: codes form an LSB-first bit stream (code i occupies
// bits [i*N, i*N+N), bit b lives in byte b/8 at position b%8); every 8 codes fill exactly N bytes.
ADAPREC_HD std::uint64_t tablePayloadBytes(std::uint64_t n, unsigned bits) {
  return (n * bits + 7) / 8;
}

}  // namespace adaprec::detail
