// Checking an allreduce result against the fp64 reference sum of every rank's input.
//
// #wrong is meant to catch bugs, not quantization noise (that is maxerr). An element is wrong when
//   - it differs bitwise from rank 0's result (every rank must end bit-identical), or
//   - it is not finite while the reference is, or
//   - |out - ref| > bound, bound = P * 2^-24 * S                      (fp32 summation)
//                                + k * e_f(S, A)                      (quantization)
//     with S = sum over ranks of |x_r|, k = P + 1 quantizations (no fewer than any algorithm makes,
//     tests/unit/test_error_model.cpp: the check needs no algorithm; x2 with error feedback) and e_f the most one quantization in
//     format f moves a value (detail::quantizationErrorBound, lib/algorithm/error_model.hpp, the
//     model the test suites assert): u_f S + a_f for fp32/bf16/fp16/fp8, u_f A for fp8s/e4m3
//     (relative to the block maximum), A for tableN (anywhere inside the chunk's range: only
//     gross errors count), A = an upper bound of max_i S derived from the data generator.
// Each rank compares the reference on its own 1/P slice of the elements, and its whole result with
// rank 0's, so the work is spread and every element is checked once against the reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/format.hpp"
#include "algorithm/error_model.hpp"
#include "bench_data.hpp"
#include "rank_collectives.hpp"

namespace adaprec::bench {

struct CheckResult {
  double maxError = 0;       // max |out - ref| / max |ref|, over all elements (agreed across ranks)
  std::uint64_t wrong = 0;   // summed over ranks
};

// Collective. `result` is this rank's output of an allreduce of BenchData(seed) over all ranks;
// `rootCopy` is scratch of `count` floats.
CheckResult checkResult(RankCollectives& ranks, const BenchData& data, const float* result, float* rootCopy,
                        std::size_t count, Format format, bool errorFeedback);

}  // namespace adaprec::bench
