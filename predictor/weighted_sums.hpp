// The quadrature's per-theta products: every noise node's weighted sums of the basis columns,
// out = weights x columns, as one small dense kernel (fast_posterior.cpp, ThetaProducts).
#pragma once

#include <cstddef>

namespace adaprec::predictor::detail {

// Columns are padded to a multiple of this: the kernel works on whole vectors of 4 doubles.
inline constexpr std::size_t kWeightedSumsLanes = 4;

// out[r][c] = sum_s weights[r][s] * columns[s][c] for r < rows, c < paddedColumns; all row-major,
// paddedColumns a multiple of kWeightedSumsLanes (pad with zero columns). Each sum runs over s in
// order, so the result does not depend on the CPU variant that runs it (x86-64-v3 where the CPU has
// it, else the baseline; no fused multiply-add in either).
void weightedSums(const double* weights, std::size_t rows, std::size_t steps, const double* columns,
                  std::size_t paddedColumns, double* out);

}  // namespace adaprec::predictor::detail
