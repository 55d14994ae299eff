// 8-bit floats (fp8 = E5M2, e4m3 = E4M3FN; raw or with per-block power-of-two scales) eight elements
// per register with AVX2 + F16C: the x86-64-v3 counterpart of small_float_avx512.hpp (the CPUs of
// many clusters, e.g. Broadwell, stop here). Same steps as detail::SmallFloat and the scalar
// decoders, in the same order with the same rounding, so the same bytes and values (ISA identity
// test). A fragment included inside the ISA namespace after host_kernels_impl.cpp's includes.

// Math::encode on eight floats: the codes in the low byte of each 32-bit lane.
template <class Math>
class SmallFloatEncoder8 {
 public:
  __m256i operator()(__m256 x) const {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i a = _mm256_and_si256(u, abs_);  // <= 0x7fffffff: signed compares order it
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, Math::kShift), one_);
    __m256i mag = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, roundHalf_), lsb), Math::kShift), rebias_);
    const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic_)), magicBits_);
    mag = _mm256_blendv_epi8(mag, sub, _mm256_cmpgt_epi32(minNormal_, a));
    mag = _mm256_min_epu32(mag, limit_);  // finite values: Math::encode's overflow rule
    mag = _mm256_blendv_epi8(mag, nan_, _mm256_cmpgt_epi32(a, belowInf_));
    if constexpr (Math::kHasInfinity) mag = _mm256_blendv_epi8(mag, infCode_, _mm256_cmpeq_epi32(a, inf_));
    return _mm256_or_si256(mag, _mm256_and_si256(_mm256_srli_epi32(u, 24), signBit_));
  }

 private:
  static __m256i set(std::uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  const __m256i abs_ = set(detail::kF32AbsMask), one_ = set(1);
  const __m256i roundHalf_ = set((1u << (Math::kShift - 1)) - 1), rebias_ = set(Math::kRebias);
  const __m256 magic_ = _mm256_set1_ps(detail::bitsFloat(Math::kSubnormalMagicF32));
  const __m256i magicBits_ = set(Math::kSubnormalMagicF32), minNormal_ = set(Math::kMinNormalF32);
  const __m256i limit_ = set(Math::kOverflowMagnitude), inf_ = set(detail::kF32InfBits), belowInf_ = set(detail::kF32InfBits - 1);
  const __m256i nan_ = set(Math::kNan), infCode_ = set(Math::kInf), signBit_ = set(0x80);
};

// Sixteen codes from two registers of eight, in element order.
inline __m128i narrowCodes16(__m256i low, __m256i high) {
  const __m256i words = _mm256_packus_epi32(low, high);  // per 128-bit lane: low 0-3, high 0-3, ...
  const __m256i bytes = _mm256_packus_epi16(words, words);
  return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
}

// Finite magnitudes folded into a running maximum as fp32 bits (see FiniteAmax16).
class FiniteAmax8 {
 public:
  void add(__m256 x) {
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(x), abs_);
    amax_ = _mm256_max_epu32(amax_, _mm256_and_si256(a, _mm256_cmpgt_epi32(inf_, a)));
  }
  std::uint32_t bits() const {
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), amax_);
    return *std::max_element(lanes, lanes + 8);
  }

 private:
  const __m256i abs_ = _mm256_set1_epi32(static_cast<int>(detail::kF32AbsMask));
  const __m256i inf_ = _mm256_set1_epi32(static_cast<int>(detail::kF32InfBits));
  __m256i amax_ = _mm256_setzero_si256();
};

// As encodeRunScanNext of the AVX-512 file: encodes src[0..n) scaled by f and returns the finite
// amax bits of next[0..nextCount), scanned in the same loop. Sixteen elements per step.
template <class Math, bool kScaled, bool kTwoFactors>
std::uint32_t encodeRunScanNext8(const float* src, std::size_t n, detail::ScaleFactors f, std::uint8_t* dst,
                                 const float* next, std::size_t nextCount) {
  const SmallFloatEncoder8<Math> encode;
  const __m256 f1 = _mm256_set1_ps(f.first), f2 = _mm256_set1_ps(f.second);
  auto codes = [&](const float* p) {
    __m256 x = _mm256_loadu_ps(p);
    if constexpr (kScaled) x = _mm256_mul_ps(x, f1);
    if constexpr (kTwoFactors) x = _mm256_mul_ps(x, f2);
    return encode(x);
  };
  auto convert = [&](std::size_t i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), narrowCodes16(codes(src + i), codes(src + i + 8)));
  };
  FiniteAmax8 amax;
  const std::size_t both = std::min(n, nextCount) / 16 * 16;
  std::size_t i = 0;
  for (; i < both; i += 16) {
    prefetchAhead(next + i);
    amax.add(_mm256_loadu_ps(next + i));
    amax.add(_mm256_loadu_ps(next + i + 8));
    convert(i);
  }
  std::size_t j = i;
  for (; j + 16 <= n; j += 16) {
    prefetchAhead(src + j);
    convert(j);
  }
  // The last n % 16 by the scalar encoder (x * 1 is exact, so raw codes may pass factors of 1).
  if (j < n) encodeScaledBlock<Math>(src + j, n - j, kScaled ? f : detail::ScaleFactors{1.0f, 1.0f}, dst + j);
  for (j = i; j + 8 <= nextCount; j += 8) amax.add(_mm256_loadu_ps(next + j));
  return std::max(amax.bits(), detail::floatBits(finiteAmax(next + j, nextCount - j)));
}

// Eight codes (the low 8 bytes) -> fp32 through the fp16 with the same bits, as smallFloatValues16.
template <class Math>
inline __m256 smallFloatValues8(__m128i codes) {
  const __m128i c = _mm_cvtepu8_epi16(codes);
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(detail::kF32SignMask)));
  const __m256 quietNan = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(detail::kF32QuietNanBits)));
  __m256 v, nan;
  if constexpr (std::is_same_v<Math, detail::Fp8Math>) {
    v = _mm256_cvtph_ps(_mm_slli_epi16(c, 8));
    nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  } else {
    static_assert(std::is_same_v<Math, detail::E4m3Math>);
    const __m128i mag = _mm_and_si128(c, _mm_set1_epi16(0x7f));
    const __m128i half = _mm_or_si128(_mm_slli_epi16(_mm_xor_si128(c, mag), 8), _mm_slli_epi16(mag, 7));
    v = _mm256_mul_ps(_mm256_cvtph_ps(half), _mm256_set1_ps(256.0f));
    nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f))));
  }
  return _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), quietNan), nan);
}

// out[0..n) = the values of src's codes times g (kAdd: saturatingAdd8 onto out), as decodeSmallFloatRun of the AVX-512 file.
template <class Math, bool kAdd, bool kScaled>
void decodeSmallFloatRun8(const std::uint8_t* src, std::size_t n, detail::ScaleFactors g, float* out) {
  const __m256 g1 = _mm256_set1_ps(g.first), g2 = _mm256_set1_ps(g.second);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = smallFloatValues8<Math>(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i)));
    if constexpr (kScaled) y = _mm256_mul_ps(_mm256_mul_ps(y, g1), g2);
    _mm256_storeu_ps(out + i, kAdd ? saturatingAdd8(_mm256_loadu_ps(out + i), y) : y);
  }
  for (; i < n; ++i) {
    float v = byteValue<Math>(src[i]);
    if constexpr (kScaled) v = detail::mulRn(detail::mulRn(v, g.first), g.second);
    out[i] = kAdd ? detail::saturatingAdd(out[i], v) : v;
  }
}

// The kernels of this width for small_float_blocks.hpp.
template <class M>
struct SmallFloatRuns8 {
  using Math = M;
  template <bool kScaled, bool kTwoFactors>
  static std::uint32_t encode(const float* src, std::size_t n, detail::ScaleFactors f, std::uint8_t* dst,
                              const float* next, std::size_t nextCount) {
    return encodeRunScanNext8<Math, kScaled, kTwoFactors>(src, n, f, dst, next, nextCount);
  }
  template <bool kAdd, bool kScaled>
  static void decode(const std::uint8_t* src, std::size_t n, detail::ScaleFactors g, float* out) {
    decodeSmallFloatRun8<Math, kAdd, kScaled>(src, n, g, out);
  }
};
