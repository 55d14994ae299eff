// Hot loops of the host codecs. This file is compiled once per ISA variant with ADAPREC_ISA set to
// the variant's name (see host_kernels.hpp); loops are written so the compiler vectorizes them.
#include <algorithm>
#include <cstring>

#include "adaprec/codec.hpp"
#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/detail/table_spec.hpp"
#include "codec/host_kernels.hpp"

#ifndef ADAPREC_ISA
#error "compile with -DADAPREC_ISA=<variant name>"
#endif

namespace adaprec::codec::ADAPREC_ISA {
namespace {

using detail::bitsFloat;
using detail::floatBits;

template <class T>
inline T load(const std::uint8_t* p, std::size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
inline void store(std::uint8_t* p, std::size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

void decodeAddF32(const std::uint8_t* src, std::size_t n, float* acc) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += load<float>(src, i);
}

template <class Math>
void encode16(const float* src, std::size_t n, std::uint8_t* dst) {
  for (std::size_t i = 0; i < n; ++i) store<std::uint16_t>(dst, i, static_cast<std::uint16_t>(Math::encode(src[i])));
}
template <class Math>
void decode16(const std::uint8_t* src, std::size_t n, float* dst) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Math::decode(load<std::uint16_t>(src, i));
}
template <class Math>
void decodeAdd16(const std::uint8_t* src, std::size_t n, float* acc) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += Math::decode(load<std::uint16_t>(src, i));
}

// bf16 is the top half of fp32: decoding is a shift (the generic decode handles NaN the same way).
void decodeBf16(const std::uint8_t* src, std::size_t n, float* dst) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = static_cast<std::uint32_t>(load<std::uint16_t>(src, i)) << 16;
    const bool nan = (b & detail::kF32AbsMask) > detail::kF32InfBits;
    dst[i] = bitsFloat(detail::select(nan, (b & detail::kF32SignMask) | detail::kF32QuietNanBits, b));
  }
}
void decodeAddBf16(const std::uint8_t* src, std::size_t n, float* acc) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = static_cast<std::uint32_t>(load<std::uint16_t>(src, i)) << 16;
    const bool nan = (b & detail::kF32AbsMask) > detail::kF32InfBits;
    acc[i] += bitsFloat(detail::select(nan, (b & detail::kF32SignMask) | detail::kF32QuietNanBits, b));
  }
}

// Largest finite magnitude in src[0..n) (0 when none): NaN and Inf do not choose the scale.
float finiteAmax(const float* src, std::size_t n) {
  std::uint32_t amax = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = floatBits(src[i]) & detail::kF32AbsMask;
    const std::uint32_t finite = detail::select(a < detail::kF32InfBits, a, 0u);
    amax = std::max(amax, finite);  // non-negative floats order like their bit patterns
  }
  return bitsFloat(amax);
}

template <class Math>
void encodeScaledBlock(const float* src, std::size_t n, detail::ScaleFactors f, std::uint8_t* dst) {
  for (std::size_t i = 0; i < n; ++i) {
    const float scaled = detail::mulRn(detail::mulRn(src[i], f.first), f.second);
    dst[i] = static_cast<std::uint8_t>(Math::encode(scaled));
  }
}

template <class Math>
void encode8(const float* src, std::size_t n, std::uint8_t* exps, std::uint8_t* dst) {
  if (exps == nullptr) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint8_t>(Math::encode(src[i]));
    return;
  }
  for (std::size_t b = 0, block = 0; b < n; b += kScaleBlock, ++block) {
    const std::size_t len = std::min(kScaleBlock, n - b);
    const int e = Math::scaleExponent(finiteAmax(src + b, len));
    store<std::int16_t>(exps, block, static_cast<std::int16_t>(e));
    encodeScaledBlock<Math>(src + b, len, detail::encodeFactors(e), dst + b);
  }
}

// Decoding 8-bit codes goes through a 256-entry table of their fp32 values.
template <class Math>
struct ByteTable {
  float value[256];
  ByteTable() {
    for (std::uint32_t c = 0; c < 256; ++c) value[c] = Math::decode(c);
  }
};

template <class Math, bool kAdd>
void decode8(const std::uint8_t* src, std::size_t n, const std::uint8_t* exps, float* out) {
  static const ByteTable<Math> table;
  if (exps == nullptr) {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = table.value[src[i]];
      out[i] = kAdd ? out[i] + v : v;
    }
    return;
  }
  for (std::size_t b = 0, block = 0; b < n; b += kScaleBlock, ++block) {
    const std::size_t len = std::min(kScaleBlock, n - b);
    const detail::ScaleFactors f = detail::decodeFactors(load<std::int16_t>(exps, block));
    const std::uint8_t* s = src + b;
    float* o = out + b;
    for (std::size_t i = 0; i < len; ++i) {
      const float v = detail::mulRn(detail::mulRn(table.value[s[i]], f.first), f.second);
      o[i] = kAdd ? o[i] + v : v;
    }
  }
}

// --- Table-N ---------------------------------------------------------------------------------------

constexpr std::size_t kCodeBatch = 512;  // codes computed per batch before packing (multiple of 8)

// Index of the nearest table entry: #{k : a > mids[k]} by branch-free binary search (mids sorted).
inline std::uint32_t tableIndex(float a, const float* mids, std::uint32_t tableSize) {
  std::uint32_t idx = 0;
  for (std::uint32_t step = tableSize >> 1; step > 0; step >>= 1) {
    idx += a > mids[idx + step - 1] ? step : 0u;
  }
  return idx;
}

// Packs `count` codes (count a multiple of 8, or the chunk's tail) into the LSB-first bit stream.
void packCodes(const std::uint8_t* codes, std::size_t count, unsigned bits, std::uint8_t* dst) {
  const std::size_t groups = count / 8;
  for (std::size_t g = 0; g < groups; ++g) {
    std::uint64_t word = 0;
    for (unsigned j = 0; j < 8; ++j) word |= static_cast<std::uint64_t>(codes[8 * g + j]) << (j * bits);
    std::memcpy(dst + g * bits, &word, bits);  // little-endian: the low `bits` bytes
  }
  const std::size_t rest = count % 8;
  if (rest != 0) {
    std::uint64_t word = 0;
    for (std::size_t j = 0; j < rest; ++j) word |= static_cast<std::uint64_t>(codes[8 * groups + j]) << (j * bits);
    std::memcpy(dst + groups * bits, &word, (rest * bits + 7) / 8);
  }
}

bool encodeTable(const float* src, std::size_t n, unsigned bits, const float* mids, std::uint8_t* dst) {
  const std::uint32_t tableSize = 1u << (bits - 1);
  std::uint8_t codes[kCodeBatch];
  std::uint32_t nonFinite = 0;
  for (std::size_t b = 0; b < n; b += kCodeBatch) {
    const std::size_t len = std::min(kCodeBatch, n - b);
    for (std::size_t i = 0; i < len; ++i) {
      const std::uint32_t u = floatBits(src[b + i]);
      const std::uint32_t a = u & detail::kF32AbsMask;
      nonFinite |= a >= detail::kF32InfBits ? 1u : 0u;
      const std::uint32_t idx = tableSize == 1 ? 0u : tableIndex(bitsFloat(a), mids, tableSize);
      codes[i] = static_cast<std::uint8_t>(((u >> 31) << (bits - 1)) | idx);
    }
    packCodes(codes, len, bits, dst + b / 8 * bits);
  }
  return nonFinite != 0;
}

template <bool kAdd>
void decodeTableImpl(const std::uint8_t* src, std::size_t n, unsigned bits, const float* signedTable,
                     float* out) {
  const std::uint64_t mask = (1u << bits) - 1;
  const std::size_t groups = n / 8;
  for (std::size_t g = 0; g < groups; ++g) {
    std::uint64_t word = 0;
    std::memcpy(&word, src + g * bits, bits);
    float* o = out + 8 * g;
    for (unsigned j = 0; j < 8; ++j) {
      const float v = signedTable[(word >> (j * bits)) & mask];
      o[j] = kAdd ? o[j] + v : v;
    }
  }
  const std::size_t rest = n % 8;
  if (rest != 0) {
    std::uint64_t word = 0;
    std::memcpy(&word, src + groups * bits, (rest * bits + 7) / 8);
    float* o = out + 8 * groups;
    for (std::size_t j = 0; j < rest; ++j) {
      const float v = signedTable[(word >> (j * bits)) & mask];
      o[j] = kAdd ? o[j] + v : v;
    }
  }
}

void decodeTable(const std::uint8_t* src, std::size_t n, unsigned bits, const float* signedTable, float* dst) {
  decodeTableImpl<false>(src, n, bits, signedTable, dst);
}
void decodeAddTable(const std::uint8_t* src, std::size_t n, unsigned bits, const float* signedTable,
                    float* acc) {
  decodeTableImpl<true>(src, n, bits, signedTable, acc);
}

}  // namespace

extern const HostKernels kKernels;
const HostKernels kKernels = {
    .isa = ADAPREC_ISA_NAME,
    .decodeAddF32 = decodeAddF32,
    .encodeF16 = encode16<detail::Fp16Math>,
    .decodeF16 = decode16<detail::Fp16Math>,
    .decodeAddF16 = decodeAdd16<detail::Fp16Math>,
    .encodeBf16 = encode16<detail::Bf16Math>,
    .decodeBf16 = decodeBf16,
    .decodeAddBf16 = decodeAddBf16,
    .encodeFp8 = encode8<detail::Fp8Math>,
    .encodeE4m3 = encode8<detail::E4m3Math>,
    .decodeFp8 = decode8<detail::Fp8Math, false>,
    .decodeE4m3 = decode8<detail::E4m3Math, false>,
    .decodeAddFp8 = decode8<detail::Fp8Math, true>,
    .decodeAddE4m3 = decode8<detail::E4m3Math, true>,
    .encodeTable = encodeTable,
    .decodeTable = decodeTable,
    .decodeAddTable = decodeAddTable,
};

}  // namespace adaprec::codec::ADAPREC_ISA
