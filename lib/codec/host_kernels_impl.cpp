// Hot loops of the host codecs. This file is compiled once per ISA variant with ADAPREC_ISA set to
// the variant's name (see host_kernels.hpp); loops are written so the compiler vectorizes them.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__BMI2__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#include <cmath>

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

// Software prefetch of the line kPrefetchAhead bytes beyond p, issued once per 64-byte step of a
// stream. On the development VM (AMD EPYC, AVX-512) the hardware prefetcher alone left the fp8s
// encoder at about half of memcpy's bandwidth; 8 KiB ahead measured best of 1-16 KiB. A prefetch never faults,
// so it may point past the end of the buffer (the address is formed as an integer for that reason).
inline constexpr std::size_t kPrefetchAhead = 8192;
inline void prefetchAhead(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + kPrefetchAhead));
}

// decodeAdd of the lossy formats adds with detail::saturatingAdd (a sum of two finite values that
// overflows is ±FLT_MAX, docs/formats.md); fp32 keeps plain IEEE addition (an overflowing sum is Inf,
// as in MPI). The vector forms below compute the same bits lane by lane.
#if defined(__AVX2__)
// ±Inf lanes of a + b whose operands are both finite get one subtracted from their bits: ±FLT_MAX.
// The operands are looked at only when some lane of the sum is ±Inf (rare; the branch predicts).
inline __m256 saturatingAdd8(__m256 a, __m256 b) {
  const __m256i abs = _mm256_set1_epi32(static_cast<int>(detail::kF32AbsMask));
  const __m256i inf = _mm256_set1_epi32(static_cast<int>(detail::kF32InfBits));
  const __m256i s = _mm256_castps_si256(_mm256_add_ps(a, b));
  const __m256i sumInf = _mm256_cmpeq_epi32(_mm256_and_si256(s, abs), inf);
  if (_mm256_testz_si256(sumInf, sumInf)) return _mm256_castsi256_ps(s);
  const __m256i larger = _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(a), abs),
                                          _mm256_and_si256(_mm256_castps_si256(b), abs));
  const __m256i bothFinite = _mm256_cmpgt_epi32(inf, larger);  // signed compare: both below 2^31
  return _mm256_castsi256_ps(_mm256_add_epi32(s, _mm256_and_si256(sumInf, bothFinite)));  // + (-1)
}
#endif
#if defined(__AVX512F__)
inline __m512 saturatingAdd16(__m512 a, __m512 b) {
  constexpr int kInfClass = 0x08 | 0x10;  // vfpclassps: +Inf | -Inf
  const __m512 s = _mm512_add_ps(a, b);
  const __mmask16 sumInf = _mm512_fpclass_ps_mask(s, kInfClass);
  if (sumInf == 0) return s;  // as saturatingAdd8: the operands only matter when the sum is ±Inf
  const __mmask16 operandInf = _mm512_mask_fpclass_ps_mask(sumInf, a, kInfClass) |
                               _mm512_mask_fpclass_ps_mask(sumInf, b, kInfClass);
  const __m512i bits = _mm512_castps_si512(s);
  return _mm512_castsi512_ps(_mm512_mask_sub_epi32(bits, _kandn_mask16(operandInf, sumInf), bits, _mm512_set1_epi32(1)));
}
#endif

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
  for (std::size_t i = 0; i < n; ++i) acc[i] = detail::saturatingAdd(acc[i], Math::decode(load<std::uint16_t>(src, i)));
}

#if defined(__F16C__) && defined(__AVX2__)
// fp16 with the F16C conversion instructions: the same results as Fp16Math (checked by the unit tests
// against it and against the generic build): the IEEE RNE conversion (a finite value rounding beyond
// 65504 becomes +-Inf, Fp16Math's overflow rule), NaN made canonical (sign | 0x7e00 / sign | 0x7fc00000).
void encodeF16Fast(const float* src, std::size_t n, std::uint8_t* dst) {
  static_assert(detail::Fp16Math::kOverflowMagnitude == detail::Fp16Math::kInf);
  const __m128i magMask = _mm_set1_epi16(0x7fff), signMask = _mm_set1_epi16(static_cast<short>(0x8000));
  const __m128i infHalf = _mm_set1_epi16(0x7c00), nanHalf = _mm_set1_epi16(0x7e00);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i isNan = _mm_cmpgt_epi16(_mm_and_si128(h, magMask), infHalf);
    const __m128i canonical = _mm_or_si128(_mm_and_si128(h, signMask), nanHalf);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm_blendv_epi8(h, canonical, isNan));
  }
  for (; i < n; ++i) store<std::uint16_t>(dst, i, static_cast<std::uint16_t>(detail::Fp16Math::encode(src[i])));
}

// Eight fp16 values (or fp8 codes, the top bytes of fp16 values) -> fp32, NaN made canonical.
inline __m256 halvesToFloats(__m128i halves) {
  const __m256 signMask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 quietNan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  const __m256 v = _mm256_cvtph_ps(halves);
  const __m256 canonical = _mm256_or_ps(_mm256_and_ps(v, signMask), quietNan);
  return _mm256_blendv_ps(v, canonical, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

template <bool kAdd>
void decodeF16Fast(const std::uint8_t* src, std::size_t n, float* out) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 y = halvesToFloats(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
    _mm256_storeu_ps(out + i, kAdd ? saturatingAdd8(_mm256_loadu_ps(out + i), y) : y);
  }
  for (; i < n; ++i) {
    const float v = detail::Fp16Math::decode(load<std::uint16_t>(src, i));
    out[i] = kAdd ? detail::saturatingAdd(out[i], v) : v;
  }
}

#endif

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
    acc[i] = detail::saturatingAdd(acc[i], bitsFloat(detail::select(nan, (b & detail::kF32SignMask) | detail::kF32QuietNanBits, b)));
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

// A block whose scale exponent is above Math::kSafeScaleExponent (amax above (largest finite value)
// * 2^kSafeScaleExponent, within a factor 2 of FLT_MAX) saturates at Math::maxMagnitudeForScale(e),
// below the format's largest finite code, whose values times 2^e are not finite in fp32. Such blocks
// are rare: every encoder converts them with this loop, so the hot loops keep their constant limit.
template <class Math>
void encodeSaturatedBlock(const float* src, std::size_t n, int e, std::uint8_t* dst) {
  const detail::ScaleFactors f = detail::encodeFactors(e);
  const std::uint32_t maxMagnitude = Math::maxMagnitudeForScale(e);
  for (std::size_t i = 0; i < n; ++i) {
    const float scaled = detail::mulRn(detail::mulRn(src[i], f.first), f.second);
    dst[i] = static_cast<std::uint8_t>(Math::encode(scaled, maxMagnitude));
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
    if (e > Math::kSafeScaleExponent) {
      encodeSaturatedBlock<Math>(src + b, len, e, dst + b);
    } else {
      encodeScaledBlock<Math>(src + b, len, detail::encodeFactors(e), dst + b);
    }
  }
}

// Value of an 8-bit code, in arithmetic the compiler vectorizes (measured faster than a 256-entry
// lookup, which needs a gather). fp8 (E5M2) is the top byte of an fp16, whose decoder is simpler.
template <class Math>
inline float byteValue(std::uint32_t code) {
  if constexpr (std::is_same_v<Math, detail::Fp8Math>) {
    return detail::Fp16Math::decode(code << 8);
  } else {
    return Math::decode(code);
  }
}

template <class Math, bool kAdd>
void decode8(const std::uint8_t* src, std::size_t n, const std::uint8_t* exps, float* out) {
  if (exps == nullptr) {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = byteValue<Math>(src[i]);
      out[i] = kAdd ? detail::saturatingAdd(out[i], v) : v;
    }
    return;
  }
  for (std::size_t b = 0, block = 0; b < n; b += kScaleBlock, ++block) {
    const std::size_t len = std::min(kScaleBlock, n - b);
    const detail::ScaleFactors f = detail::decodeFactors(load<std::int16_t>(exps, block));
    const std::uint8_t* s = src + b;
    float* o = out + b;
    for (std::size_t i = 0; i < len; ++i) {
      const float v = detail::mulRn(detail::mulRn(byteValue<Math>(s[i]), f.first), f.second);
      o[i] = kAdd ? detail::saturatingAdd(o[i], v) : v;
    }
  }
}

// The vector 8-bit float kernels (their scalar tails use byteValue, finiteAmax and encodeScaledBlock,
// their blocks above the safe scale exponent encodeSaturatedBlock).
#if defined(__F16C__) && defined(__AVX2__)
#include "codec/small_float_blocks.hpp"
#include "codec/small_float_avx2.hpp"
#endif
#if defined(__AVX512F__)
#include "codec/small_float_avx512.hpp"
#endif
// The widest 8-bit float runs this variant has (the kernel table below names them once).
#if defined(__AVX512F__)
#define ADAPREC_SMALL_FLOAT_VECTOR 1
template <class Math>
using NativeSmallFloatRuns = SmallFloatRuns16<Math>;
#elif defined(__F16C__) && defined(__AVX2__)
#define ADAPREC_SMALL_FLOAT_VECTOR 1
template <class Math>
using NativeSmallFloatRuns = SmallFloatRuns8<Math>;
#endif

// --- Table-N ---------------------------------------------------------------------------------------
// Everything is instantiated per N so loop bounds, shifts and masks are compile-time constants and
// the compiler unrolls and vectorizes the index search.

constexpr std::size_t kCodeBatch = 512;  // codes computed per batch before packing (multiple of 8)

// Index of the nearest table entry: #{k : a > mids[k]}. Counted directly over all K-1 midpoints: the
// loop vectorizes across elements. The reference for the vector paths (the register search tree),
// the baseline ISA's loop, and the tail of every chunk.
template <unsigned kBits>
inline std::uint32_t tableIndex(float a, const float* mids) {
  constexpr std::uint32_t kSize = 1u << (kBits - 1);
  std::uint32_t idx = 0;
  for (std::uint32_t k = 0; k + 1 < kSize; ++k) idx += static_cast<std::uint32_t>(a > mids[k]);
  return idx;
}

// Eight one-byte codes (little-endian u64, byte j = code j) <-> their 8*kBits-bit packed form.
template <unsigned kBits>
inline std::uint64_t packEight(std::uint64_t codes) {
#if defined(__BMI2__)
  return _pext_u64(codes, 0x0101010101010101ull * ((1ull << kBits) - 1));
#else
  std::uint64_t word = 0;
  for (unsigned j = 0; j < 8; ++j) word |= ((codes >> (8 * j)) & ((1ull << kBits) - 1)) << (j * kBits);
  return word;
#endif
}

template <unsigned kBits>
inline std::uint64_t unpackEight(std::uint64_t word) {
#if defined(__BMI2__)
  return _pdep_u64(word, 0x0101010101010101ull * ((1ull << kBits) - 1));
#else
  std::uint64_t codes = 0;
  for (unsigned j = 0; j < 8; ++j) codes |= ((word >> (j * kBits)) & ((1ull << kBits) - 1)) << (8 * j);
  return codes;
#endif
}

#if defined(__AVX2__)
// table1: every code is just the sign bit, so eight elements are one movemask.
bool encodeSignsOnly(const float* src, std::size_t n, std::uint8_t* dst) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  const __m256i maxFinite = _mm256_set1_epi32(0x7f7fffff);
  __m256i nonFinite = _mm256_setzero_si256();
  const std::size_t groups = n / 8;
  for (std::size_t g = 0; g < groups; ++g) {
    const __m256 x = _mm256_loadu_ps(src + 8 * g);
    dst[g] = static_cast<std::uint8_t>(_mm256_movemask_ps(x));
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(x), absMask);
    nonFinite = _mm256_or_si256(nonFinite, _mm256_cmpgt_epi32(a, maxFinite));
  }
  bool anyNonFinite = !_mm256_testz_si256(nonFinite, nonFinite);
  if (const std::size_t rest = n % 8; rest != 0) {
    std::uint8_t byte = 0;
    for (std::size_t j = 0; j < rest; ++j) {
      const std::uint32_t u = floatBits(src[8 * groups + j]);
      byte = static_cast<std::uint8_t>(byte | ((u >> 31) << j));
      anyNonFinite |= (u & detail::kF32AbsMask) >= detail::kF32InfBits;
    }
    dst[groups] = byte;
  }
  return anyNonFinite;
}
#endif

// Large tables (K >= 32): counting all K-1 midpoints costs K compares per element. Instead the top
// bits of |x| (8 exponent + 5 mantissa bits, a bucket spans ~3%) look up how many midpoints lie below
// the bucket; only the few midpoints that can lie inside the bucket are compared. Same result as
// tableIndex (midpoints below the bucket are smaller than |x|, those above are larger).
constexpr unsigned kBucketShift = 18;                       // keep the top 13 of 31 magnitude bits
constexpr std::size_t kBucketCount = std::size_t{1} << 13;
constexpr std::uint32_t kMaxBucketSlack = 4;               // more midpoints per bucket: count them all

struct BucketedMids {
  std::uint32_t below[kBucketCount];       // #midpoints in lower buckets
  float padded[128 + kMaxBucketSlack];     // the midpoints, then +Inf
  std::uint32_t slack;                     // most midpoints in one bucket
};

// Fills `bucketed` for tableSize-1 sorted midpoints; false if some bucket holds too many of them.
bool bucketMids(const float* mids, std::uint32_t tableSize, BucketedMids& bucketed) {
  const std::uint32_t count = tableSize - 1;
  std::uint32_t k = 0, slack = 0;
  for (std::uint32_t bucket = 0; bucket < kBucketCount; ++bucket) {
    bucketed.below[bucket] = k;
    const std::uint32_t first = k;
    while (k < count && (floatBits(mids[k]) >> kBucketShift) == bucket) ++k;
    slack = std::max(slack, k - first);
  }
  for (std::uint32_t i = 0; i < count; ++i) bucketed.padded[i] = mids[i];
  for (std::uint32_t i = count; i < count + kMaxBucketSlack; ++i) bucketed.padded[i] = INFINITY;
  bucketed.slack = slack;
  return slack <= kMaxBucketSlack;
}

template <std::uint32_t kSlack>
inline std::uint32_t bucketIndex(std::uint32_t a, const BucketedMids& m) {
  const std::uint32_t base = m.below[a >> kBucketShift];
  std::uint32_t idx = base;
  for (std::uint32_t j = 0; j < kSlack; ++j) idx += static_cast<std::uint32_t>(bitsFloat(a) > m.padded[base + j]);
  return detail::select(a > detail::kF32InfBits, 0u, idx);  // NaN: index 0, as #{k : NaN > mid} = 0
}

// Writes the codes of one batch: code = sign << (N-1) | index.
template <unsigned kBits, class Index>
inline std::uint32_t batchCodes(const float* src, std::size_t len, std::uint8_t* codes, Index index) {
  std::uint32_t nonFinite = 0;
  for (std::size_t i = 0; i < len; ++i) {
    const std::uint32_t u = floatBits(src[i]);
    const std::uint32_t a = u & detail::kF32AbsMask;
    nonFinite |= static_cast<std::uint32_t>(a >= detail::kF32InfBits);
    codes[i] = static_cast<std::uint8_t>(((u >> 31) << (kBits - 1)) | index(a));
  }
  return nonFinite;
}

#if defined(__AVX2__)
// Register table lookups: table[idx] for every lane, for tables of 2^kLog2 floats, by register
// permutes (8 or 16 entries per register) joined by blends on the higher index bits. Gathers do the
// same but are many times slower on CPUs with the Gather Data Sampling mitigation. The table must
// have at least one register of readable floats (8 for AVX2, 16 for AVX-512).
template <unsigned kLog2>
inline __m256 lookup8(const float* table, __m256i idx) {
  if constexpr (kLog2 <= 3) {
    return _mm256_permutevar8x32_ps(_mm256_loadu_ps(table), idx);  // uses idx bits 0-2
  } else {
    constexpr unsigned kHalf = 1u << (kLog2 - 1);
    const __m256 low = lookup8<kLog2 - 1>(table, idx);
    const __m256 high = lookup8<kLog2 - 1>(table + kHalf, idx);
    const __m256 useHigh = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 32 - kLog2));  // bit kLog2-1 -> sign
    return _mm256_blendv_ps(low, high, useHigh);
  }
}
#endif
#if defined(__AVX512F__)
template <unsigned kLog2>
inline __m512 lookup16(const float* table, __m512i idx) {
  if constexpr (kLog2 <= 4) {
    return _mm512_permutexvar_ps(idx, _mm512_loadu_ps(table));  // uses idx bits 0-3
  } else if constexpr (kLog2 == 5) {
    return _mm512_permutex2var_ps(_mm512_loadu_ps(table), idx, _mm512_loadu_ps(table + 16));  // bits 0-4
  } else {
    constexpr unsigned kHalf = 1u << (kLog2 - 1);
    const __m512 low = lookup16<kLog2 - 1>(table, idx);
    const __m512 high = lookup16<kLog2 - 1>(table + kHalf, idx);
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(kHalf)), low, high);
  }
}
#endif

#if defined(__AVX2__)
// Table index by binary search in registers: level l of the implicit search tree holds the 2^l
// midpoints mids[(2p+1) * 2^(L-1-l) - 1], p < 2^l, L = N-1 levels. Each level looks the lane's
// midpoint up by register permutes (lookup8/lookup16) and appends one bit (a > midpoint) to p. As
// a > mids[k] holds for a prefix of the sorted midpoints, p ends as #{k : a > mids[k]}: tableIndex's
// result, for NaN (never greater) too.
template <unsigned kBits>
struct SearchTree {
  static constexpr unsigned kLevels = kBits - 1;
  // Level l starts at offset(l); each level is padded to a whole AVX-512 register.
  static constexpr std::size_t offset(unsigned level) {
    std::size_t at = 0;
    for (unsigned l = 0; l < level; ++l) at += std::max<std::size_t>(16, std::size_t{1} << l);
    return at;
  }
  alignas(64) float levels[offset(kLevels) + 16] = {};

  explicit SearchTree(const float* mids) {
    for (unsigned l = 0; l < kLevels; ++l) {
      for (std::size_t p = 0; p < (std::size_t{1} << l); ++p)
        levels[offset(l) + p] = mids[(2 * p + 1) * (std::size_t{1} << (kLevels - 1 - l)) - 1];
    }
  }
};

template <unsigned kBits, unsigned kLevel = 0>
inline __m256i descend8(const SearchTree<kBits>& tree, __m256 a, __m256i p) {
  if constexpr (kLevel == SearchTree<kBits>::kLevels) {
    return p;
  } else {
    const __m256 mid = lookup8<kLevel>(tree.levels + SearchTree<kBits>::offset(kLevel), p);
    const __m256i greater = _mm256_castps_si256(_mm256_cmp_ps(a, mid, _CMP_GT_OQ));  // -1 or 0
    return descend8<kBits, kLevel + 1>(tree, a, _mm256_sub_epi32(_mm256_add_epi32(p, p), greater));
  }
}

#if defined(__AVX512F__)
template <unsigned kBits, unsigned kLevel = 0>
inline __m512i descend16(const SearchTree<kBits>& tree, __m512 a, __m512i p) {
  if constexpr (kLevel == SearchTree<kBits>::kLevels) {
    return p;
  } else {
    const __m512 mid = lookup16<kLevel>(tree.levels + SearchTree<kBits>::offset(kLevel), p);
    const __mmask16 greater = _mm512_cmp_ps_mask(a, mid, _CMP_GT_OQ);
    const __m512i doubled = _mm512_add_epi32(p, p);
    return descend16<kBits, kLevel + 1>(tree, a, _mm512_mask_add_epi32(doubled, greater, doubled, _mm512_set1_epi32(1)));
  }
}
#endif

// Codes of one batch (as batchCodes) by the register search; returns whether any element was NaN/Inf.
template <unsigned kBits>
std::uint32_t treeCodes(const float* src, std::size_t len, std::uint8_t* codes, const SearchTree<kBits>& tree,
                        const float* mids) {
  std::size_t i = 0;
  std::uint32_t nonFinite = 0;
#if defined(__AVX512F__)
  const __m512i abs16 = _mm512_set1_epi32(0x7fffffff), inf16 = _mm512_set1_epi32(static_cast<int>(detail::kF32InfBits));
  __mmask16 special16 = 0;
  for (; i + 16 <= len; i += 16) {
    prefetchAhead(src + i);
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    const __m512i a = _mm512_and_si512(u, abs16);
    special16 |= _mm512_cmpge_epu32_mask(a, inf16);
    const __m512i index = descend16<kBits>(tree, _mm512_castsi512_ps(a), _mm512_setzero_si512());
    const __m512i code = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(u, 31), kBits - 1), index);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(code));
  }
  nonFinite |= special16 != 0;
#endif
  const __m256i abs8 = _mm256_set1_epi32(0x7fffffff), maxFinite8 = _mm256_set1_epi32(0x7f7fffff);
  __m256i special8 = _mm256_setzero_si256();
  for (; i + 8 <= len; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
    const __m256i a = _mm256_and_si256(u, abs8);
    special8 = _mm256_or_si256(special8, _mm256_cmpgt_epi32(a, maxFinite8));
    const __m256i index = descend8<kBits>(tree, _mm256_castsi256_ps(a), _mm256_setzero_si256());
    const __m256i code = _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(u, 31), kBits - 1), index);
    // 32-bit lanes -> bytes: pack to 16 bits, then to 8 bits, then fix the lane order.
    const __m256i words = _mm256_packus_epi32(code, code);
    const __m256i bytes = _mm256_packus_epi16(words, words);
    const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm256_castsi256_si128(ordered));
  }
  nonFinite |= !_mm256_testz_si256(special8, special8);
  if (i < len) {
    nonFinite |= batchCodes<kBits>(src + i, len - i, codes + i,
                                   [&](std::uint32_t a) { return tableIndex<kBits>(bitsFloat(a), mids); });
  }
  return nonFinite;
}
#endif

#if defined(__AVX2__)
// Sixteen N-bit codes, one per byte of `bytes`, packed (eight at a time with pext) into 2N bytes at dst.
template <unsigned kBits>
inline void storeCodes16(__m128i bytes, std::uint8_t* dst) {
  static_assert(kBits <= 4, "2N bytes must fit one 64-bit word");
  const std::uint64_t low = packEight<kBits>(static_cast<std::uint64_t>(_mm_cvtsi128_si64(bytes)));
  const std::uint64_t high = packEight<kBits>(static_cast<std::uint64_t>(_mm_extract_epi64(bytes, 1)));
  const std::uint64_t word = low | high << (8 * kBits);
  std::memcpy(dst, &word, 2 * kBits);
}
#endif

#if defined(__AVX512F__)
// Small tables (N = 2..4), sixteen elements at a time: the index by the register search tree, the
// sign OR'ed in, the sixteen byte codes narrowed (vpmovdb) and packed eight at a time with pext,
// straight into the payload. At N = 4 the tree measured ~10 % faster than counting all seven
// midpoints (a compare and masked add each) and ~25 % faster than bit planes (compare masks -> pdep).
template <unsigned kBits>
std::uint32_t smallTableEncode(const float* src, std::size_t n, const SearchTree<kBits>& tree, std::uint8_t* dst) {
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(static_cast<int>(detail::kF32InfBits));
  const __m512i signAt = _mm512_set1_epi32(1 << (kBits - 1));
  __mmask16 special = 0;
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    prefetchAhead(src + i);
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    const __m512i a = _mm512_and_si512(u, absMask);
    special |= _mm512_cmpge_epu32_mask(a, inf);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 32 - kBits), signAt);
    const __m512i code = _mm512_or_si512(sign, descend16<kBits>(tree, _mm512_castsi512_ps(a), _mm512_setzero_si512()));
    storeCodes16<kBits>(_mm512_cvtepi32_epi8(code), dst + i / 8 * kBits);
  }
  return special != 0;
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// smallTableEncode for x86-64-v3: two registers of eight per step (~10 % faster than counting at N = 4).
template <unsigned kBits>
std::uint32_t smallTableEncode(const float* src, std::size_t n, const SearchTree<kBits>& tree, std::uint8_t* dst) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff), belowInf = _mm256_set1_epi32(static_cast<int>(detail::kF32InfBits - 1));
  const __m256i signAt = _mm256_set1_epi32(1 << (kBits - 1));
  __m256i special = _mm256_setzero_si256();
  auto codes = [&](const float* p) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(p));
    const __m256i a = _mm256_and_si256(u, absMask);
    special = _mm256_or_si256(special, _mm256_cmpgt_epi32(a, belowInf));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 32 - kBits), signAt);
    return _mm256_or_si256(sign, descend8<kBits>(tree, _mm256_castsi256_ps(a), _mm256_setzero_si256()));
  };
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    prefetchAhead(src + i);
    storeCodes16<kBits>(narrowCodes16(codes(src + i), codes(src + i + 8)), dst + i / 8 * kBits);
  }
  return !_mm256_testz_si256(special, special);
}
#endif

template <unsigned kBits>
bool encodeTableN(const float* src, std::size_t n, const float* mids, std::uint8_t* dst) {
#if defined(__AVX2__)
  if constexpr (kBits == 1) return encodeSignsOnly(src, n, dst);
#endif
  constexpr std::uint32_t kSize = 1u << (kBits - 1);
  std::uint32_t nonFinite = 0;
#if defined(__AVX2__)
  const SearchTree<kBits> tree(mids);  // at most 127 floats per chunk
  if constexpr (kBits >= 2 && kBits <= 4) {
    // Whole groups of 16 straight into the payload; the rest (< 16 elements, byte-aligned) below.
    const std::size_t head = n / 16 * 16;
    nonFinite |= smallTableEncode<kBits>(src, head, tree, dst);
    src += head;
    dst += head / 8 * kBits;
    n -= head;
  }
#endif
  // Bucketing pays off for large tables on chunks much longer than its set-up (8K entries).
  thread_local BucketedMids bucketed;
#if defined(__AVX2__)
  // From 16 entries on, the register search beats counting all midpoints and the bucket lookup
  // (whose table reads become gathers); the < 16 elements N = 2..4 leave above are counted.
  constexpr bool kUseTree = kSize >= 16;
#else
  constexpr bool kUseTree = false;
#endif
  const bool useBuckets = !kUseTree && kSize >= 32 && n >= 4 * kBucketCount && bucketMids(mids, kSize, bucketed);
  alignas(32) std::uint8_t codes[kCodeBatch];
  for (std::size_t b = 0; b < n; b += kCodeBatch) {
    const std::size_t len = std::min(kCodeBatch, n - b);
#if defined(__AVX2__)
    if constexpr (kUseTree) {
      nonFinite |= treeCodes<kBits>(src + b, len, codes, tree, mids);
    } else
#endif
    if (!useBuckets) {
      nonFinite |= batchCodes<kBits>(src + b, len, codes, [&](std::uint32_t a) { return tableIndex<kBits>(bitsFloat(a), mids); });
    } else if (bucketed.slack <= 1) {
      nonFinite |= batchCodes<kBits>(src + b, len, codes, [&](std::uint32_t a) { return bucketIndex<1>(a, bucketed); });
    } else if (bucketed.slack == 2) {
      nonFinite |= batchCodes<kBits>(src + b, len, codes, [&](std::uint32_t a) { return bucketIndex<2>(a, bucketed); });
    } else {
      nonFinite |= batchCodes<kBits>(src + b, len, codes, [&](std::uint32_t a) { return bucketIndex<kMaxBucketSlack>(a, bucketed); });
    }
    std::uint8_t* out = dst + b / 8 * kBits;
    const std::size_t groups = len / 8;
    for (std::size_t g = 0; g < groups; ++g) {
      const std::uint64_t word = packEight<kBits>(load<std::uint64_t>(codes, g));
      std::memcpy(out + g * kBits, &word, kBits);  // little-endian: the low kBits bytes
    }
    if (const std::size_t rest = len % 8; rest != 0) {
      std::uint64_t tail = 0;
      std::memcpy(&tail, codes + 8 * groups, rest);
      const std::uint64_t word = packEight<kBits>(tail);
      std::memcpy(out + groups * kBits, &word, (rest * kBits + 7) / 8);
    }
  }
  return nonFinite != 0;
}

#if defined(__AVX2__)
// Values of eight codes (one per byte of `codes`) from the 2K-entry signed table.
template <unsigned kBits>
inline __m256 tableValues(std::uint64_t codes, const float* signedTable) {
  const __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(codes)));
  if constexpr (kBits <= 6) {
    return lookup8<kBits>(signedTable, idx);
  } else {
    return _mm256_i32gather_ps(signedTable, idx, 4);  // measured faster than 16-32 permutes
  }
}
#endif

template <unsigned kBits, bool kAdd>
void decodeTableN(const std::uint8_t* src, std::size_t n, const float* signedTable, float* out) {
  auto emit = [&](std::uint64_t codes, float* o, std::size_t count) {
    for (std::size_t j = 0; j < count; ++j) {
      const float v = signedTable[(codes >> (8 * j)) & 0xff];
      o[j] = kAdd ? detail::saturatingAdd(o[j], v) : v;
    }
  };
  const std::size_t groups = n / 8;
  const std::size_t payloadBytes = (n * kBits + 7) / 8;
  constexpr std::uint64_t kGroupMask = kBits == 8 ? ~0ull : (1ull << (8 * kBits)) - 1;
  std::size_t g = 0;
#if defined(__AVX512F__)
  // Sixteen codes per step while two whole 8-byte loads fit in the payload (N >= 5: for smaller
  // tables the eight-wide permute below measured as fast or faster).
  for (; kBits >= 5 && g + 2 <= groups && (g + 1) * kBits + 8 <= payloadBytes; g += 2) {
    const std::uint64_t low = unpackEight<kBits>(load<std::uint64_t>(src + g * kBits, 0) & kGroupMask);
    const std::uint64_t high = unpackEight<kBits>(load<std::uint64_t>(src + (g + 1) * kBits, 0) & kGroupMask);
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_set_epi64x(static_cast<long long>(high), static_cast<long long>(low)));
    __m512 v;
    if constexpr (kBits >= 6) {
      // The second half of the table is the negated first: look the magnitude up among K entries
      // (lookup16 reads only the low N-1 index bits) and flip the sign with the code's sign bit;
      // half the permutes of a 2K-entry lookup (table8 decode measured ~1.3x).
      const __m512i signBit = _mm512_slli_epi32(idx, 32 - kBits);
      v = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(lookup16<kBits - 1>(signedTable, idx)), signBit,
                                                        _mm512_set1_epi32(static_cast<int>(detail::kF32SignMask)), 0x78));
    } else {
      v = lookup16<kBits>(signedTable, idx);  // measured 2x a 16-lane gather at N = 8
    }
    float* o = out + 8 * g;
    _mm512_storeu_ps(o, kAdd ? saturatingAdd16(_mm512_loadu_ps(o), v) : v);
  }
#endif
  for (; g < groups; ++g) {
    // One 8-byte load where the buffer allows (an odd-sized memcpy costs a store-forwarding stall).
    std::uint64_t word = 0;
    if (g * kBits + 8 <= payloadBytes) {
      word = load<std::uint64_t>(src + g * kBits, 0) & kGroupMask;
    } else {
      std::memcpy(&word, src + g * kBits, kBits);
    }
#if defined(__AVX2__)
    const __m256 v = tableValues<kBits>(unpackEight<kBits>(word), signedTable);
    float* o = out + 8 * g;
    _mm256_storeu_ps(o, kAdd ? saturatingAdd8(_mm256_loadu_ps(o), v) : v);
#else
    emit(unpackEight<kBits>(word), out + 8 * g, 8);
#endif
  }
  if (const std::size_t rest = n % 8; rest != 0) {
    std::uint64_t word = 0;
    std::memcpy(&word, src + groups * kBits, (rest * kBits + 7) / 8);
    emit(unpackEight<kBits>(word), out + 8 * groups, rest);
  }
}

// Run-time N -> the instantiation for it.
template <template <unsigned> class Op, class... Args>
auto dispatchBits(unsigned bits, Args... args) {
  switch (bits) {
    case 1: return Op<1>::run(args...);
    case 2: return Op<2>::run(args...);
    case 3: return Op<3>::run(args...);
    case 4: return Op<4>::run(args...);
    case 5: return Op<5>::run(args...);
    case 6: return Op<6>::run(args...);
    case 7: return Op<7>::run(args...);
    default: return Op<8>::run(args...);
  }
}

template <unsigned kBits>
struct EncodeTableOp {
  static bool run(const float* src, std::size_t n, const float* mids, std::uint8_t* dst) {
    return encodeTableN<kBits>(src, n, mids, dst);
  }
};
template <unsigned kBits>
struct DecodeTableOp {
  static void run(const std::uint8_t* src, std::size_t n, const float* table, float* out) {
    decodeTableN<kBits, false>(src, n, table, out);
  }
};
template <unsigned kBits>
struct DecodeAddTableOp {
  static void run(const std::uint8_t* src, std::size_t n, const float* table, float* out) {
    decodeTableN<kBits, true>(src, n, table, out);
  }
};

bool encodeTable(const float* src, std::size_t n, unsigned bits, const float* mids, std::uint8_t* dst) {
  return dispatchBits<EncodeTableOp>(bits, src, n, mids, dst);
}
void decodeTable(const std::uint8_t* src, std::size_t n, unsigned bits, const float* signedTable, float* dst) {
  dispatchBits<DecodeTableOp>(bits, src, n, signedTable, dst);
}
void decodeAddTable(const std::uint8_t* src, std::size_t n, unsigned bits, const float* signedTable,
                    float* acc) {
  dispatchBits<DecodeAddTableOp>(bits, src, n, signedTable, acc);
}

}  // namespace

extern const HostKernels kKernels;
const HostKernels kKernels = {
    .isa = ADAPREC_ISA_NAME,
    .decodeAddF32 = decodeAddF32,
#if defined(__F16C__) && defined(__AVX2__)
    .encodeF16 = encodeF16Fast,
    .decodeF16 = decodeF16Fast<false>,
    .decodeAddF16 = decodeF16Fast<true>,
#else
    .encodeF16 = encode16<detail::Fp16Math>,
    .decodeF16 = decode16<detail::Fp16Math>,
    .decodeAddF16 = decodeAdd16<detail::Fp16Math>,
#endif
    .encodeBf16 = encode16<detail::Bf16Math>,
    .decodeBf16 = decodeBf16,
    .decodeAddBf16 = decodeAddBf16,
#if defined(ADAPREC_SMALL_FLOAT_VECTOR)
    .encodeFp8 = encodeSmallFloatBlocks<NativeSmallFloatRuns<detail::Fp8Math>>,
    .encodeE4m3 = encodeSmallFloatBlocks<NativeSmallFloatRuns<detail::E4m3Math>>,
    .decodeFp8 = decodeSmallFloatBlocks<NativeSmallFloatRuns<detail::Fp8Math>, false>,
    .decodeE4m3 = decodeSmallFloatBlocks<NativeSmallFloatRuns<detail::E4m3Math>, false>,
    .decodeAddFp8 = decodeSmallFloatBlocks<NativeSmallFloatRuns<detail::Fp8Math>, true>,
    .decodeAddE4m3 = decodeSmallFloatBlocks<NativeSmallFloatRuns<detail::E4m3Math>, true>,
#else
    .encodeFp8 = encode8<detail::Fp8Math>,
    .encodeE4m3 = encode8<detail::E4m3Math>,
    .decodeFp8 = decode8<detail::Fp8Math, false>,
    .decodeE4m3 = decode8<detail::E4m3Math, false>,
    .decodeAddFp8 = decode8<detail::Fp8Math, true>,
    .decodeAddE4m3 = decode8<detail::E4m3Math, true>,
#endif
    .encodeTable = encodeTable,
    .decodeTable = decodeTable,
    .decodeAddTable = decodeAddTable,
};

}  // namespace adaprec::codec::ADAPREC_ISA
