// Table-N encoder side: the per-chunk percentile table (docs/formats.md, "Table-N").
#pragma once

#include <cstddef>

#include "adaprec/format.hpp"

namespace adaprec::codec {

// Fills table[0..K) (K = 2^(N-1), N = tableBits(format)) with the spec'd percentiles of |src| over
// the deterministic sample: for tableN of the finite magnitudes, for tableNz entry 0 is +0 and
// entries 1..K-1 are percentiles of the finite non-zero magnitudes. Entries with no magnitude to
// take (an empty sample) are +0.
void buildTable(Format format, const float* src, std::size_t count, float* table);

// Exact percentiles over all elements (same ranks, no sampling): the yardstick the sampled table is
// measured against in tests and in adaprec-codec-bench.
void buildExactTable(Format format, const float* src, std::size_t count, float* table);

}  // namespace adaprec::codec
