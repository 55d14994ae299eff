// Chunk header and layout (docs/formats.md, "Chunk layout"): writing and validating.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/codec.hpp"
#include "adaprec/format.hpp"

namespace adaprec::codec {

inline constexpr std::uint8_t kMagic0 = 0x41;  // 'A'
inline constexpr std::uint8_t kMagic1 = 0x50;  // 'P'
inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::uint32_t kFlagNonFinite = 1u;  // Table-N only
// Largest element count a chunk may hold (keeps every size computation far from overflow).
inline constexpr std::uint64_t kMaxChunkCount = std::uint64_t{1} << 56;

struct ChunkLayout {
  std::size_t paramsBytes;   // scales or table, padded to a multiple of 8
  std::size_t payloadBytes;  // the coded elements
  std::size_t totalBytes;    // kChunkHeaderBytes + paramsBytes + payloadBytes
};

ChunkLayout chunkLayout(Format format, std::size_t count);

// Number of per-block scale exponents of a block-scaled chunk.
inline std::size_t scaleBlockCount(std::size_t count) { return (count + kScaleBlock - 1) / kScaleBlock; }

void writeHeader(std::uint8_t* dst, Format format, std::size_t count, std::uint32_t flags);

// Validates the header and that srcBytes is exactly the size the header implies.
ChunkInfo readHeader(const std::uint8_t* src, std::size_t srcBytes);

}  // namespace adaprec::codec
