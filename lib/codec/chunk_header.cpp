#include "codec/chunk_header.hpp"

#include <bit>
#include <cstring>

#include "adaprec/error.hpp"

static_assert(std::endian::native == std::endian::little, "AdaPrec's wire format is little-endian");

namespace adaprec::codec {
namespace {

std::size_t roundUp8(std::size_t bytes) { return (bytes + 7) / 8 * 8; }

}  // namespace

ChunkLayout chunkLayout(Format format, std::size_t count) {
  ADAPREC_CHECK_ARG(count <= kMaxChunkCount, "chunk of " << count << " elements exceeds the limit of "
                                                         << kMaxChunkCount);
  ChunkLayout layout{0, 0, 0};
  if (const unsigned bits = tableBits(format); bits != 0) {
    layout.paramsBytes = roundUp8(sizeof(float) * (std::size_t{1} << (bits - 1)));
    layout.payloadBytes = (count * bits + 7) / 8;
  } else {
    if (isBlockScaled(format)) layout.paramsBytes = roundUp8(sizeof(std::int16_t) * scaleBlockCount(count));
    layout.payloadBytes = count * (bitsPerElement(format) / 8);
  }
  layout.totalBytes = kChunkHeaderBytes + layout.paramsBytes + layout.payloadBytes;
  return layout;
}

void writeHeader(std::uint8_t* dst, Format format, std::size_t count, std::uint32_t flags) {
  dst[0] = kMagic0;
  dst[1] = kMagic1;
  dst[2] = kVersion;
  dst[3] = static_cast<std::uint8_t>(format);
  std::memcpy(dst + 4, &flags, sizeof flags);
  const std::uint64_t count64 = count;
  std::memcpy(dst + 8, &count64, sizeof count64);
}

ChunkInfo readHeader(const std::uint8_t* src, std::size_t srcBytes) {
  ADAPREC_CHECK(src != nullptr || srcBytes == 0, ErrorCode::kInvalidArgument, "null chunk pointer");
  ADAPREC_CHECK(srcBytes >= kChunkHeaderBytes, ErrorCode::kMalformedInput,
                "chunk of " << srcBytes << " bytes is shorter than its " << kChunkHeaderBytes << "-byte header");
  ADAPREC_CHECK(src[0] == kMagic0 && src[1] == kMagic1, ErrorCode::kMalformedInput,
                "not an AdaPrec chunk (bad magic bytes " << int{src[0]} << "," << int{src[1]} << ")");
  ADAPREC_CHECK(src[2] == kVersion, ErrorCode::kMalformedInput,
                "chunk format version " << int{src[2]} << " is not supported (expected " << int{kVersion} << ")");
  ADAPREC_CHECK(isFormatId(src[3]), ErrorCode::kMalformedInput, "unknown format id " << int{src[3]} << " in chunk");
  const auto format = static_cast<Format>(src[3]);
  std::uint32_t flags;
  std::memcpy(&flags, src + 4, sizeof flags);
  const std::uint32_t allowed = tableBits(format) != 0 ? kFlagNonFinite : 0u;
  ADAPREC_CHECK((flags & ~allowed) == 0, ErrorCode::kMalformedInput,
                "invalid flags 0x" << std::hex << flags << " in " << formatName(format) << " chunk");
  std::uint64_t count;
  std::memcpy(&count, src + 8, sizeof count);
  ADAPREC_CHECK(count <= kMaxChunkCount, ErrorCode::kMalformedInput, "chunk claims " << count << " elements");
  const ChunkLayout layout = chunkLayout(format, static_cast<std::size_t>(count));
  ADAPREC_CHECK(srcBytes == layout.totalBytes, ErrorCode::kMalformedInput,
                formatName(format) << " chunk of " << count << " elements must be " << layout.totalBytes
                                   << " bytes, got " << srcBytes << (srcBytes < layout.totalBytes ? " (truncated)" : " (oversized)"));
  return ChunkInfo{format, static_cast<std::size_t>(count), layout.totalBytes, (flags & kFlagNonFinite) != 0};
}

}  // namespace adaprec::codec
