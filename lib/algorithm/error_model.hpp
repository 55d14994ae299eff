// The one declaration of how inexact an allreduce is: how many times each algorithm quantizes a value
// (docs/algorithms.md, column Q) and how far one quantization moves a value in each wire format
// (docs/formats.md, "Error bound"). The loopback/MPI suites assert the combined bound and the
// benchmark's #wrong column is built from the same per-format model, so the docs, the tests and the
// benchmark cannot drift apart silently (tests/unit/test_error_model.cpp ties the counts to the docs).
#pragma once

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"

namespace adaprec::detail {

// How many times a value is encoded to `wire` on its way to the result of `algorithm` over `ranks`
// ranks in `nodes` nodes (only hierarchical looks at nodes). A lossless wire format loses nothing in
// those encodes. Defined in algorithm.cpp, next to the algorithm table and the auto rule, from the
// steps each algorithm's header comment describes. kAuto has no count: resolve it first.
int quantizationsPerValue(Algorithm algorithm, Format wire, int ranks, int nodes);

// What one quantization costs, as docs/formats.md states it per format.
enum class ErrorScale {
  kElement,   // |decode(encode(x)) - x| <= relative |x| + absoluteFloor
  kBlockMax,  // <= max(relative |x|, absoluteFloor amax) <= relative amax, amax = the block's largest
  kChunkMax,  // <= absoluteFloor cmax, cmax = the chunk's largest magnitude (no relative bound)
};

struct FormatErrorModel {
  double relative;       // 2^-(M+1), M = mantissa bits: half an ulp, relative
  double absoluteFloor;  // below the normal range: half the subnormal spacing (kElement), or in
                         // units of the block / chunk maximum (kBlockMax / kChunkMax)
  ErrorScale scale;
};

FormatErrorModel formatErrorModel(Format wire);

// The most one quantization moves a value of magnitude `magnitude` whose block or chunk maximum is at
// most `rangeMax` (the benchmark's per-quantization term, where only a bound of the maxima is known).
double quantizationErrorBound(Format wire, double magnitude, double rangeMax);

// The magnitudes the combined bound of element i is expressed in (docs/algorithms.md, "Error bounds").
struct ElementMagnitudes {
  double absSum;     // S_i = sum over ranks of |x_r[i]|
  double maxAbsSum;  // S = max_i S_i
  double sumOfMax;   // M = sum over ranks of max_i |x_r[i]|
};

// The bound on |result_i - exact_i| after `quantizations` quantizations over `ranks` ranks, the table
// of docs/algorithms.md "Error bounds", which the loopback and MPI suites assert.
double allreduceErrorBound(Format wire, int quantizations, int ranks, const ElementMagnitudes& m);

}  // namespace adaprec::detail
