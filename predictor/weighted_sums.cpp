// weightedSums: 8 rows x 4 columns of accumulators at a time, so eight independent add chains hide the
// adds' latency, and each step's 4 column values are loaded once for the 8 rows. GCC's vector
// extension gives one 256-bit operation per 4 doubles in the x86-64-v3 clone and two 128-bit ones in
// the baseline; the same adds in the same order either way. Eigen's lazyProduct here (one short dot
// product per output, two doubles wide in a baseline build) was 28 % of a schedule-aware fit.
#include "weighted_sums.hpp"

// No fused multiply-adds, whatever the target: GCC does not contract in ISO C++ mode (-std=c++20),
// clang would by default.
#ifdef __clang__
#pragma clang fp contract(off)
#endif

namespace adaprec::predictor::detail {
namespace {

typedef double Lanes __attribute__((vector_size(kWeightedSumsLanes * sizeof(double))));

// Always inlined, so each clone of weightedSums compiles it for its own CPU variant.
template <std::size_t kRows>
__attribute__((always_inline)) inline void block(const double* weights, std::size_t steps, const double* columns,
                                                 std::size_t paddedColumns, std::size_t column, double* out) {
  Lanes sum[kRows] = {};
  for (std::size_t s = 0; s < steps; ++s) {
    Lanes c;  // memcpy: the padded rows need no 32-byte alignment (and no vector is passed by value)
    __builtin_memcpy(&c, columns + s * paddedColumns + column, sizeof c);
    for (std::size_t r = 0; r < kRows; ++r) sum[r] += weights[r * steps + s] * c;
  }
  for (std::size_t r = 0; r < kRows; ++r)
    __builtin_memcpy(out + r * paddedColumns + column, &sum[r], sizeof sum[r]);
}

}  // namespace

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void weightedSums(const double* weights, std::size_t rows, std::size_t steps, const double* columns,
                  std::size_t paddedColumns, double* out) {
  constexpr std::size_t kBlock = 8;
  std::size_t r = 0;
  for (; r + kBlock <= rows; r += kBlock)
    for (std::size_t c = 0; c < paddedColumns; c += kWeightedSumsLanes)
      block<kBlock>(weights + r * steps, steps, columns, paddedColumns, c, out + r * paddedColumns);
  for (; r < rows; ++r)
    for (std::size_t c = 0; c < paddedColumns; c += kWeightedSumsLanes)
      block<1>(weights + r * steps, steps, columns, paddedColumns, c, out + r * paddedColumns);
}

}  // namespace adaprec::predictor::detail
