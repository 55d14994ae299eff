// Public host codec entry points: layout, header, validation, Table-N tables; the loops live in
// host_kernels_impl.cpp.
#include "adaprec/codec.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/detail/table_spec.hpp"
#include "adaprec/error.hpp"
#include "codec/chunk_header.hpp"
#include "codec/host_kernels.hpp"
#include "codec/table_build.hpp"

namespace adaprec {
namespace {

using codec::ChunkLayout;
using codec::hostKernels;

constexpr std::size_t kMaxTableSize = 128;  // table8

std::uint8_t* bytesOf(void* p) { return static_cast<std::uint8_t*>(p); }
const std::uint8_t* bytesOf(const void* p) { return static_cast<const std::uint8_t*>(p); }

void encodeTableChunk(Format format, const float* src, std::size_t count, const ChunkLayout& layout,
                      std::uint8_t* dst) {
  const unsigned bits = tableBits(format);
  const std::size_t tableSize = std::size_t{1} << (bits - 1);
  std::array<float, kMaxTableSize> table{};
  codec::buildTable(format, src, count, table.data());
  std::array<float, kMaxTableSize> mids{};
  for (std::size_t k = 0; k + 1 < tableSize; ++k) mids[k] = detail::tableMidpoint(table[k], table[k + 1]);
  // tableNz: index 0 only for |x| = 0 (|x| > 0 is above the first threshold), never for a small value.
  if (hasZeroCode(format)) mids[0] = 0.0f;

  std::uint8_t* params = dst + kChunkHeaderBytes;
  std::memset(params, 0, layout.paramsBytes);
  std::memcpy(params, table.data(), tableSize * sizeof(float));
  std::uint8_t* payload = params + layout.paramsBytes;
  if (layout.payloadBytes != 0) payload[layout.payloadBytes - 1] = 0;  // padding bits of a partial byte
  const bool nonFinite = hostKernels().encodeTable(src, count, bits, mids.data(), payload);
  codec::writeHeader(dst, format, count, nonFinite ? codec::kFlagNonFinite : 0u);
}

// fp8s/e4m3: every scale exponent in the range encoders produce for finite amax and, in blocks above
// the safe exponent (amax near FLT_MAX), no finite code above the block's largest representable value
// (it would decode to inf; no encoder writes it). Only such blocks have their codes read.
template <class Math>
void validateScaledBlocks(Format format, const std::uint8_t* exps, const std::uint8_t* payload, std::size_t count) {
  const std::size_t blocks = codec::scaleBlockCount(count);
  for (std::size_t b = 0; b < blocks; ++b) {
    std::int16_t e;
    std::memcpy(&e, exps + b * sizeof e, sizeof e);
    ADAPREC_CHECK(e >= Math::kMinScaleExponent && e <= Math::kMaxScaleExponent, ErrorCode::kMalformedInput,
                  formatName(format) << " chunk: scale exponent " << e << " of block " << b << " is outside ["
                                     << Math::kMinScaleExponent << ", " << Math::kMaxScaleExponent << "]");
    if (e <= Math::kSafeScaleExponent) continue;
    const std::uint32_t maxMagnitude = Math::maxMagnitudeForScale(e);
    const std::size_t end = std::min(count, (b + 1) * kScaleBlock);
    for (std::size_t i = b * kScaleBlock; i < end; ++i) {
      const std::uint32_t magnitude = payload[i] & (Math::kSignBit - 1);
      ADAPREC_CHECK(magnitude <= maxMagnitude || magnitude > Math::kMaxFinite, ErrorCode::kMalformedInput,
                    formatName(format) << " chunk: code 0x" << std::hex << unsigned{payload[i]} << std::dec
                                       << " of element " << i << " (block " << b
                                       << ") overflows fp32 under scale exponent " << e
                                       << " (largest finite magnitude code 0x" << std::hex << maxMagnitude << ")");
    }
  }
}

// Validated view of a chunk the caller expects to be (format, count).
struct ChunkView {
  ChunkInfo info;
  const std::uint8_t* params;
  const std::uint8_t* payload;
};

ChunkView validateChunk(Format format, const void* src, std::size_t srcBytes, std::size_t count) {
  const ChunkInfo info = codec::readHeader(bytesOf(src), srcBytes);
  ADAPREC_CHECK(info.format == format, ErrorCode::kMismatch,
                "chunk holds " << formatName(info.format) << " but " << formatName(format)
                               << " was expected (do all ranks use the same format?)");
  ADAPREC_CHECK(info.count == count, ErrorCode::kMismatch,
                "chunk holds " << info.count << " elements but " << count
                               << " were expected (do all ranks pass the same count?)");
  const ChunkLayout layout = codec::chunkLayout(format, count);
  const std::uint8_t* params = bytesOf(src) + kChunkHeaderBytes;
  const std::uint8_t* payload = params + layout.paramsBytes;
  std::size_t usedParamBytes = 0;
  if (isBlockScaled(format)) {
    usedParamBytes = codec::scaleBlockCount(count) * sizeof(std::int16_t);
    if (format == Format::kFp8s) {
      validateScaledBlocks<detail::Fp8Math>(format, params, payload, count);
    } else {
      ADAPREC_CHECK(format == Format::kE4m3, ErrorCode::kInternal, "no scale rules for " << formatName(format));
      validateScaledBlocks<detail::E4m3Math>(format, params, payload, count);
    }
  } else if (const unsigned bits = tableBits(format); bits != 0) {
    const std::size_t tableSize = std::size_t{1} << (bits - 1);
    usedParamBytes = tableSize * sizeof(float);
    std::uint32_t previous = 0;
    for (std::size_t k = 0; k < tableSize; ++k) {
      std::uint32_t t;
      std::memcpy(&t, params + k * sizeof t, sizeof t);
      ADAPREC_CHECK(t < detail::kF32InfBits && t >= previous, ErrorCode::kMalformedInput,
                    formatName(format) << " chunk: table entry " << k << " (bits 0x" << std::hex << t
                                       << ") is not a finite non-negative value >= the previous entry");
      previous = t;
    }
    if (hasZeroCode(format)) {
      std::uint32_t zero;
      std::memcpy(&zero, params, sizeof zero);
      ADAPREC_CHECK(zero == 0, ErrorCode::kMalformedInput,
                    formatName(format) << " chunk: table entry 0 (the zero code) is not +0");
    }
    const std::size_t usedBits = count * bits;
    if (usedBits % 8 != 0) {
      const std::uint8_t padding = static_cast<std::uint8_t>(payload[layout.payloadBytes - 1] >> (usedBits % 8));
      ADAPREC_CHECK(padding == 0, ErrorCode::kMalformedInput,
                    formatName(format) << " chunk: padding bits after the last code are not zero");
    }
  }
  for (std::size_t i = usedParamBytes; i < layout.paramsBytes; ++i) {
    ADAPREC_CHECK(params[i] == 0, ErrorCode::kMalformedInput,
                  formatName(format) << " chunk: padding byte " << i << " of the parameter section is not zero");
  }
  return ChunkView{info, params, payload};
}

// Values of all 2K Table-N codes: index in the low bits, sign on top.
std::array<float, 2 * kMaxTableSize> signedTableOf(const ChunkView& view, unsigned bits) {
  const std::size_t tableSize = std::size_t{1} << (bits - 1);
  std::array<float, 2 * kMaxTableSize> values{};
  std::memcpy(values.data(), view.params, tableSize * sizeof(float));
  for (std::size_t k = 0; k < tableSize; ++k) values[tableSize + k] = -values[k];
  return values;
}

template <bool kAdd>
void decodeInto(Format format, const void* src, std::size_t srcBytes, float* out, std::size_t count) {
  ADAPREC_CHECK_ARG(out != nullptr || count == 0, "null output buffer for " << count << " elements");
  const ChunkView view = validateChunk(format, src, srcBytes, count);
  const codec::HostKernels& k = hostKernels();
  const std::uint8_t* p = view.payload;
  switch (format) {
    case Format::kFp32:
      if (kAdd) {
        k.decodeAddF32(p, count, out);
      } else if (count != 0) {
        std::memcpy(out, p, count * sizeof(float));
      }
      return;
    case Format::kBf16: return kAdd ? k.decodeAddBf16(p, count, out) : k.decodeBf16(p, count, out);
    case Format::kFp16: return kAdd ? k.decodeAddF16(p, count, out) : k.decodeF16(p, count, out);
    case Format::kFp8: return kAdd ? k.decodeAddFp8(p, count, nullptr, out) : k.decodeFp8(p, count, nullptr, out);
    case Format::kFp8s:
      return kAdd ? k.decodeAddFp8(p, count, view.params, out) : k.decodeFp8(p, count, view.params, out);
    case Format::kE4m3:
      return kAdd ? k.decodeAddE4m3(p, count, view.params, out) : k.decodeE4m3(p, count, view.params, out);
    default: break;
  }
  const unsigned bits = tableBits(format);
  ADAPREC_CHECK(bits != 0, ErrorCode::kInternal, "no decoder for format " << formatName(format));
  if (view.info.nonFinite) {
    // The chunk held NaN or Inf, which Table-N cannot carry: poison every value so it is not hidden.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (std::size_t i = 0; i < count; ++i) out[i] = kAdd ? out[i] + nan : nan;
    return;
  }
  const auto values = signedTableOf(view, bits);
  if (kAdd) {
    k.decodeAddTable(p, count, bits, values.data(), out);
  } else {
    k.decodeTable(p, count, bits, values.data(), out);
  }
}

}  // namespace

std::size_t encodedBytes(Format format, std::size_t count) { return codec::chunkLayout(format, count).totalBytes; }

void encode(Format format, const float* src, std::size_t count, void* dst, std::size_t dstBytes) {
  const ChunkLayout layout = codec::chunkLayout(format, count);
  ADAPREC_CHECK_ARG(src != nullptr || count == 0, "null source buffer for " << count << " elements");
  ADAPREC_CHECK_ARG(dst != nullptr, "null destination buffer");
  ADAPREC_CHECK_ARG(dstBytes >= layout.totalBytes, "destination of " << dstBytes << " bytes is too small for "
                                                                     << formatName(format) << " chunk of " << count
                                                                     << " elements (" << layout.totalBytes << " bytes)");
  std::uint8_t* out = bytesOf(dst);
  std::uint8_t* params = out + kChunkHeaderBytes;
  std::uint8_t* payload = params + layout.paramsBytes;
  const codec::HostKernels& k = hostKernels();
  if (tableBits(format) != 0) {
    encodeTableChunk(format, src, count, layout, out);
    return;
  }
  codec::writeHeader(out, format, count, 0);
  std::memset(params, 0, layout.paramsBytes);
  switch (format) {
    case Format::kFp32:
      if (count != 0) std::memcpy(payload, src, count * sizeof(float));
      return;
    case Format::kBf16: return k.encodeBf16(src, count, payload);
    case Format::kFp16: return k.encodeF16(src, count, payload);
    case Format::kFp8: return k.encodeFp8(src, count, nullptr, payload);
    case Format::kFp8s: return k.encodeFp8(src, count, params, payload);
    case Format::kE4m3: return k.encodeE4m3(src, count, params, payload);
    default: ADAPREC_FAIL(ErrorCode::kInternal, "no encoder for format " << formatName(format));
  }
}

void decode(Format format, const void* src, std::size_t srcBytes, float* dst, std::size_t count) {
  decodeInto<false>(format, src, srcBytes, dst, count);
}

void decodeAdd(Format format, const void* src, std::size_t srcBytes, float* acc, std::size_t count) {
  decodeInto<true>(format, src, srcBytes, acc, count);
}

ChunkInfo inspectChunk(const void* src, std::size_t srcBytes) { return codec::readHeader(bytesOf(src), srcBytes); }

}  // namespace adaprec
