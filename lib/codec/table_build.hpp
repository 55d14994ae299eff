// Table-N encoder side: the per-chunk percentile table (docs/formats.md, "Table-N").
#pragma once

#include <cstddef>

namespace adaprec::codec {

// Fills table[0..K) (K = 2^(bits-1)) with the spec'd percentiles of |src| over the deterministic
// sample; all zeros when the sample holds no finite value.
void buildTable(const float* src, std::size_t count, unsigned bits, float* table);

// Exact percentiles over all finite elements (same ranks, no sampling): the yardstick the sampled
// table is measured against in tests and in adaprec-codec-bench.
void buildExactTable(const float* src, std::size_t count, unsigned bits, float* table);

}  // namespace adaprec::codec
