// 8-bit floats (fp8 = E5M2, e4m3 = E4M3FN; raw or with per-block power-of-two scales) sixteen
// elements at a time with AVX-512. Included by host_kernels_impl.cpp inside its ISA namespace when
// the variant has AVX-512 (x86-64-v4). Every step is the one detail::SmallFloat / the scalar decoders
// take, in the same order with the same rounding, so the codes and values are the same bit for bit
// (the ISA identity test compares this path with the generic one).
// A fragment, not a stand-alone header: it is included inside the ISA namespace after the includes
// of host_kernels_impl.cpp (immintrin.h, scalar_convert.hpp, codec.hpp), so it includes nothing itself.

// Lanes [0, len) of a 16-lane operation (len <= 16).
inline __mmask16 laneMask(std::size_t len) {
  return static_cast<__mmask16>(len >= 16 ? 0xffffu : (1u << len) - 1u);
}

// Math::encode on sixteen floats: the codes in the low byte of each 32-bit lane.
template <class Math>
class SmallFloatEncoder16 {
 public:
  __m512i operator()(__m512 x) const {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i a = _mm512_and_si512(u, abs_);
    // Normal target: integer round-to-nearest-even of the mantissa, then rebias.
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, Math::kShift), one_);
    __m512i mag = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, roundHalf_), lsb), Math::kShift), rebias_);
    // Subnormal target: the fp32 adder rounds a + magic to the subnormal spacing.
    const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), magic_)), magicBits_);
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmplt_epu32_mask(a, minNormal_), sub);
    mag = _mm512_min_epu32(mag, limit_);  // finite values: Math::encode's overflow rule
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmpge_epu32_mask(a, inf_), nan_);
    if constexpr (Math::kHasInfinity) mag = _mm512_mask_mov_epi32(mag, _mm512_cmpeq_epi32_mask(a, inf_), infCode_);
    // sign bit 31 -> bit 7: (u >> 24) & 0x80, OR'ed into mag in one ternary-logic op (mag | (s & m)).
    return _mm512_ternarylogic_epi32(mag, _mm512_srli_epi32(u, 24), signBit_, 0xf8);
  }

 private:
  static __m512i set(std::uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  const __m512i abs_ = set(detail::kF32AbsMask), one_ = set(1);
  const __m512i roundHalf_ = set((1u << (Math::kShift - 1)) - 1), rebias_ = set(Math::kRebias);
  const __m512 magic_ = _mm512_set1_ps(detail::bitsFloat(Math::kSubnormalMagicF32));
  const __m512i magicBits_ = set(Math::kSubnormalMagicF32), minNormal_ = set(Math::kMinNormalF32);
  const __m512i limit_ = set(Math::kOverflowMagnitude), inf_ = set(detail::kF32InfBits);
  const __m512i nan_ = set(Math::kNan), infCode_ = set(Math::kInf), signBit_ = set(0x80);
};

// Finite magnitudes (NaN and Inf do not choose the scale) folded into a running maximum as fp32
// bits: non-negative floats order like their bit patterns.
class FiniteAmax16 {
 public:
  void add(__m512 x) {
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(x), abs_);
    amax_ = _mm512_mask_max_epu32(amax_, _mm512_cmplt_epu32_mask(a, inf_), amax_, a);
  }
  std::uint32_t bits() const { return _mm512_reduce_max_epu32(amax_); }

 private:
  const __m512i abs_ = _mm512_set1_epi32(static_cast<int>(detail::kF32AbsMask));
  const __m512i inf_ = _mm512_set1_epi32(static_cast<int>(detail::kF32InfBits));
  __m512i amax_ = _mm512_setzero_si512();
};

// Encodes src[0..n) scaled by f (x * f.first * f.second, each product rounded as the scalar path
// rounds it; kTwoFactors = false when f.second == 1, whose product is exact) and returns the finite
// amax bits of next[0..nextCount), the following scale block: scanning it in the same loop keeps
// memory streaming it in while this block, already in L1 from its own scan, is converted (two
// passes per block leave memory idle during the conversion). kScaled = false: raw codes, no next.
template <class Math, bool kScaled, bool kTwoFactors>
std::uint32_t encodeRunScanNext(const float* src, std::size_t n, detail::ScaleFactors f, std::uint8_t* dst,
                                const float* next, std::size_t nextCount) {
  const SmallFloatEncoder16<Math> encode;
  const __m512 f1 = _mm512_set1_ps(f.first), f2 = _mm512_set1_ps(f.second);
  auto codes = [&](__m512 x) {
    if constexpr (kScaled) x = _mm512_mul_ps(x, f1);
    if constexpr (kTwoFactors) x = _mm512_mul_ps(x, f2);
    return encode(x);
  };
  auto convert = [&](std::size_t i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm512_cvtepi32_epi8(codes(_mm512_loadu_ps(src + i))));
  };
  FiniteAmax16 amax;
  const std::size_t both = std::min(n, nextCount) / 16 * 16;
  std::size_t i = 0;
  for (; i < both; i += 16) {
    prefetchAhead(next + i);
    amax.add(_mm512_loadu_ps(next + i));
    convert(i);
  }
  // What only one of the two has; masked operations only for the last partial vector (masked byte
  // stores are slow on some CPUs).
  std::size_t j = i;
  for (; j + 16 <= n; j += 16) {
    prefetchAhead(src + j);  // raw fp8 (or a last block): src streams in from memory here
    convert(j);
  }
  if (j < n) {
    const __mmask16 m = laneMask(n - j);
    _mm512_mask_cvtepi32_storeu_epi8(dst + j, m, codes(_mm512_maskz_loadu_ps(m, src + j)));
  }
  for (j = i; j + 16 <= nextCount; j += 16) amax.add(_mm512_loadu_ps(next + j));
  if (j < nextCount) amax.add(_mm512_maskz_loadu_ps(laneMask(nextCount - j), next + j));
  return amax.bits();
}

// Sixteen codes (low bytes of the lanes) -> fp32: through the fp16 with the same bits (fp8 is the top
// byte of an fp16; an e4m3 magnitude shifted into fp16's fields is its value * 2^-8, restored by an
// exact multiplication), NaN made canonical (sign | quiet NaN).
template <class Math>
inline __m512 smallFloatValues16(__m128i codes) {
  const __m256i c = _mm256_cvtepu8_epi16(codes);
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(detail::kF32SignMask)));
  const __m512 quietNan = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(detail::kF32QuietNanBits)));
  __m512 v;
  __mmask16 nan;
  if constexpr (std::is_same_v<Math, detail::Fp8Math>) {
    v = _mm512_cvtph_ps(_mm256_slli_epi16(c, 8));
    nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  } else {
    static_assert(std::is_same_v<Math, detail::E4m3Math>);
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi16(0x7f));
    const __m256i half = _mm256_or_si256(_mm256_slli_epi16(_mm256_xor_si256(c, mag), 8), _mm256_slli_epi16(mag, 7));
    v = _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.0f));
    nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7f));
  }
  // NaN lanes: (v & sign) | quietNan
  return _mm512_castsi512_ps(_mm512_mask_ternarylogic_epi32(_mm512_castps_si512(v), nan, _mm512_castps_si512(sign),
                                                            _mm512_castps_si512(quietNan), 0xea));
}

// out[0..n) = the values of src's codes times g (x * g.first * g.second, as the scalar decoder
// rounds them); kAdd: saturatingAdd16 onto out.
template <class Math, bool kAdd, bool kScaled>
void decodeSmallFloatRun(const std::uint8_t* src, std::size_t n, detail::ScaleFactors g, float* out) {
  const __m512 g1 = _mm512_set1_ps(g.first), g2 = _mm512_set1_ps(g.second);
  auto finish = [&](__m512 y, __m512 acc) {
    if constexpr (kScaled) y = _mm512_mul_ps(_mm512_mul_ps(y, g1), g2);
    return kAdd ? saturatingAdd16(acc, y) : y;
  };
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 y = smallFloatValues16<Math>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm512_storeu_ps(out + i, finish(y, kAdd ? _mm512_loadu_ps(out + i) : y));
  }
  if (i < n) {
    const __mmask16 m = laneMask(n - i);
    const __m512 y = smallFloatValues16<Math>(_mm_maskz_loadu_epi8(m, src + i));
    _mm512_mask_storeu_ps(out + i, m, finish(y, kAdd ? _mm512_maskz_loadu_ps(m, out + i) : y));
  }
}

// The kernels of this width for small_float_blocks.hpp.
template <class M>
struct SmallFloatRuns16 {
  using Math = M;
  template <bool kScaled, bool kTwoFactors>
  static std::uint32_t encode(const float* src, std::size_t n, detail::ScaleFactors f, std::uint8_t* dst,
                              const float* next, std::size_t nextCount) {
    return encodeRunScanNext<Math, kScaled, kTwoFactors>(src, n, f, dst, next, nextCount);
  }
  template <bool kAdd, bool kScaled>
  static void decode(const std::uint8_t* src, std::size_t n, detail::ScaleFactors g, float* out) {
    decodeSmallFloatRun<Math, kAdd, kScaled>(src, n, g, out);
  }
};
