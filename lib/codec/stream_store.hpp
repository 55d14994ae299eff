// Copies for large decode outputs: ordinary stores first read every destination cache line from
// memory (write-allocate), so a decode that writes 4 bytes per element moves 8; non-temporal stores
// write the lines without reading them, as glibc's memcpy does for large copies.
#pragma once

#include <cstddef>

#include "adaprec/codec.hpp"

namespace adaprec::codec {

// Outputs at least this large are decoded piece by piece into a cache-resident scratch buffer and
// streamed out (smaller ones are likely read again soon, and are better left in the cache).
inline constexpr std::size_t kStreamMinBytes = std::size_t{8} << 20;
// Elements per piece: a multiple of the scale block (4096) and of 8 (whole Table-N code bytes).
inline constexpr std::size_t kStreamPieceCount = 2 * kScaleBlock;
static_assert(kStreamPieceCount % 8 == 0);

// dst[0..n) = src[0..n) with non-temporal stores where the CPU has them; ends with a store fence.
void streamFloats(float* dst, const float* src, std::size_t n);

}  // namespace adaprec::codec
