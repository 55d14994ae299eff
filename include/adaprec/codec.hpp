// Host codecs: fp32 <-> wire format chunks. These are the reference implementation; the CUDA kernels
// must produce the same bytes. Byte layouts are specified in docs/formats.md.
//
// A chunk is self-describing: a 16-byte header (magic, version, format, flags, element count), a
// parameter section (per-block scales or the Table-N table) and the payload. Its size is a pure
// function of (format, count): encodedBytes(). Decoders validate everything before touching the
// output and never read or write out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/format.hpp"

namespace adaprec {

inline constexpr std::size_t kChunkHeaderBytes = 16;
// fp8s/e4m3: elements per power-of-two scale (one int16 exponent each).
inline constexpr std::size_t kScaleBlock = 4096;
// Table-N: how many elements of a chunk the percentile table is computed from (all, when fewer).
inline constexpr std::size_t kTableSampleCount = 2048;

// Exact size in bytes of the chunk encoding `count` elements in `format`.
std::size_t encodedBytes(Format format, std::size_t count);

// Encodes src[0..count) into dst; dstBytes must be at least encodedBytes(format, count), of which
// exactly encodedBytes() bytes are written.
void encode(Format format, const float* src, std::size_t count, void* dst, std::size_t dstBytes);

// Decodes a chunk that must be `format` with `count` elements and exactly encodedBytes() long.
// Throws Error(kMismatch) if format/count/size differ from what the caller expects and
// Error(kMalformedInput) for an invalid header, scale, table or padding; dst is untouched then.
void decode(Format format, const void* src, std::size_t srcBytes, float* dst, std::size_t count);

// acc[i] += decode(chunk)[i], in fp32, fused (the step of every reduce-scatter hop). Same checks.
void decodeAdd(Format format, const void* src, std::size_t srcBytes, float* acc, std::size_t count);

// What a chunk header says, after validating the header and the buffer size against it.
struct ChunkInfo {
  Format format;
  std::size_t count;
  std::size_t bytes;
  bool nonFinite;  // Table-N: the chunk held NaN/Inf and decodes to NaN everywhere
};
ChunkInfo inspectChunk(const void* src, std::size_t srcBytes);

}  // namespace adaprec
