// Checking an allreduce result against the fp64 reference sum of every rank's input.
//
// #wrong is meant to catch bugs, not quantization noise (that is maxerr). An element is wrong when
//   - it differs bitwise from rank 0's result (every rank must end bit-identical), or
//   - it is not finite while the reference is, or
//   - |out - ref| > bound, bound = P * 2^-24 * S                      (fp32 summation)
//                                + k * (u_f * S + a_f)                (quantization)
//     with S = sum over ranks of |x_r|, k = P + 1 quantizations at most (x2 with error feedback),
//     u_f the format's relative step and a_f its absolute floor:
//       fp32 0 / 0; bf16 2^-8 / 0; fp16 2^-11 / 2^-25; fp8 2^-3 / 2^-17;
//       fp8s 2^-3 / 2^-3 * A; e4m3 2^-4 / 2^-4 * A (block scales are relative to the block max,
//       A = an upper bound of max_i S derived from the data generator); tableN 1 / A (a table can move a value anywhere
//       inside the data's range: only gross errors count).
// Each rank compares the reference on its own 1/P slice of the elements, and its whole result with
// rank 0's, so the work is spread and every element is checked once against the reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/format.hpp"
#include "bench_data.hpp"
#include "rank_collectives.hpp"

namespace adaprec::bench {

struct CheckResult {
  double maxError = 0;       // max |out - ref| / max |ref|, over all elements (agreed across ranks)
  std::uint64_t wrong = 0;   // summed over ranks
};

struct ErrorModel {
  double relative = 0;  // u_f
  double absolute = 0;  // a_f in units of 1 (absoluteOfRange == false) or of A (true)
  bool absoluteOfRange = false;
};

ErrorModel errorModel(Format format);

// Collective. `result` is this rank's output of an allreduce of BenchData(seed) over all ranks;
// `rootCopy` is scratch of `count` floats.
CheckResult checkResult(RankCollectives& ranks, const BenchData& data, const float* result, float* rootCopy,
                        std::size_t count, Format format, bool errorFeedback);

}  // namespace adaprec::bench
