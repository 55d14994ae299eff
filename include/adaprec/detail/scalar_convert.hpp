// Scalar conversion math shared by the host codecs (lib/codec) and the CUDA kernels (kernels/).
// It is the single definition of every rounding decision, so that CPU and GPU produce the same bytes.
// Everything here is branch-free integer/float arithmetic (vectorizable on the host), uses only
// correctly rounded fp32 add/multiply (no FMA: the project builds with -ffp-contract=off and nvcc
// --fmad=false) and needs IEEE subnormals (no flush-to-zero).
//
// Small float types are described by SmallFloat<kExpBits, kManBits, kHasInf>:
//   fp16  = SmallFloat<5, 10, true>,  bf16 = SmallFloat<8, 7, true>,
//   fp8   = SmallFloat<5, 2, true>    (1-5-2, the E5M2 layout: bias 15, max 57344),
//   e4m3  = SmallFloat<4, 3, false>   (OCP E4M3FN: bias 7, max 448, no Inf, NaN = S.1111.111).
// Encoding rounds to nearest, ties to even, directly from fp32 (no double rounding), keeps ±Inf (NaN
// where the type has no Inf), turns NaN into the type's canonical quiet NaN and always keeps the sign
// bit. A finite value that rounds beyond the largest finite value becomes ±Inf in fp16 and fp8 (as an
// IEEE cast does: their largest values are far below fp32's, and saturating would clamp a value or a
// sum by an unbounded amount, silently) and saturates in bf16 (beyond bf16's largest value lie only
// fp32 values within 2^-8 of it, inside the format's error bound) and in e4m3 (no Inf; it is only
// used block-scaled, where the scale keeps values in range).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ADAPREC_HD __host__ __device__ __forceinline__
#else
#define ADAPREC_HD inline
#endif

namespace adaprec::detail {

ADAPREC_HD std::uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ADAPREC_HD float bitsFloat(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Correctly rounded fp32 operations, spelled out so the device never fuses them.
ADAPREC_HD float addRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

ADAPREC_HD float mulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// cond ? a : b as bit masks. GCC 12 does not vectorize loops whose selects stay conditional
// expressions, so every select on the hot path is spelled this way.
ADAPREC_HD std::uint32_t select(bool cond, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

inline constexpr std::uint32_t kF32SignMask = 0x80000000u;
inline constexpr std::uint32_t kF32AbsMask = 0x7fffffffu;
inline constexpr std::uint32_t kF32InfBits = 0x7f800000u;
inline constexpr std::uint32_t kF32QuietNanBits = 0x7fc00000u;
inline constexpr std::uint32_t kF32MaxFiniteBits = 0x7f7fffffu;  // FLT_MAX

// The addition of every lossy format's decodeAdd (and of every other place that adds decoded values):
// a + b rounded to nearest, except that when a and b are both finite and their sum overflows, the
// result is FLT_MAX with the sum's sign instead of Inf. An Inf or NaN operand keeps IEEE behaviour
// (Inf + finite = Inf, Inf - Inf = NaN, NaN stays NaN). Branch-free: ±Inf's bits minus one are
// ±FLT_MAX's, so the correction subtracts the overflow flag. The vector kernels in lib/codec spell
// the same three tests with intrinsics.
ADAPREC_HD float saturatingAdd(float a, float b) {
  const std::uint32_t s = floatBits(addRn(a, b));
  // Each test as 0/1 in an integer: & of the three stays branch-free (&& would be a branch).
  const std::uint32_t overflow = static_cast<std::uint32_t>((s & kF32AbsMask) == kF32InfBits) &
                                 static_cast<std::uint32_t>((floatBits(a) & kF32AbsMask) < kF32InfBits) &
                                 static_cast<std::uint32_t>((floatBits(b) & kF32AbsMask) < kF32InfBits);
  return bitsFloat(s - overflow);
}

// Error feedback's new residual: the quantization error r = withResidual - decoded, correctly rounded,
// except
// - 0 where r is not finite (a non-finite input, a value the format overflowed to ±Inf, a Table-N
//   chunk decoded as NaN): carried on, such a residual (Inf - Inf = NaN, 80000 - Inf = -Inf) would
//   make that element non-finite in every later call on the same tensor;
// - where the value was sent as non-zero: at most half the value where it was sent short (r has its
//   sign: clipped to a Table-N table's top entry), at most half the sent magnitude where it was sent
//   too large (r has the other sign). Feedback converges for compressors whose error is a fraction of
//   the value; the element-wise formats are, and never exceed these limits (rounding to nearest errs by
//   at most half a spacing, which is at most half of either magnitude), while Table-N's percentile
//   table is not: values
//   above its top entry (the 99th percentile) are clipped, and table1 sends that percentile for every
//   value. Uncapped, their residuals grew without bound (reducing the same data 192 times: 4271 for
//   table1+ef, 155-768 for table2/table4+ef, on values of at most 1.75): clipped values grew by their
//   excess every call, and table1's overshoot fed its own next percentile. A value sent as 0 (below a
//   format's range) keeps its whole residual, to accumulate until it can be sent.
ADAPREC_HD float feedbackResidual(float withResidual, float decoded) {
  const float r = addRn(withResidual, -decoded);
  if (!((floatBits(r) & kF32AbsMask) < kF32InfBits)) return 0.0f;
  if ((floatBits(decoded) & kF32AbsMask) == 0) return r;
  const bool sentShort = ((floatBits(r) ^ floatBits(withResidual)) & ~kF32AbsMask) == 0;
  const float limit = mulRn(0.5f, bitsFloat(floatBits(sentShort ? withResidual : decoded) & kF32AbsMask));
  return bitsFloat(floatBits(r) & kF32AbsMask) > limit ? bitsFloat((floatBits(r) & ~kF32AbsMask) | floatBits(limit)) : r;
}

// A residual after its allreduce: 0 where the call's result at that position is not finite (an
// overflowed sum: fp16/fp8 values of the ranks finite alone but not together, a Table-N chunk decoded
// as NaN), else unchanged. The rank whose own value overflowed has a residual of 0 already
// (feedbackResidual); the others' encodes were finite and kept their error, which then entered the
// next call as an error from a sum nobody used: with a loss scale of 40000, fp8+ef made the next
// step's gradient 1280 where it was 1.25 (a GradScaler skips the overflowed step and lowers its
// scale, so the residual was also in the old scale's units). The results are bit-identical on every
// rank, so every rank forgets the same positions.
ADAPREC_HD float residualAfterSum(float result, float residual) {
  return (floatBits(result) & kF32AbsMask) < kF32InfBits ? residual : 0.0f;
}

// Any NaN (either sign, any payload) as the default quiet NaN 0x7fc00000; other values unchanged.
// Which NaN an addition of two NaNs returns depends on the operand order (x86 keeps the first):
// algorithms whose ranks add in different orders make them canonical to stay bit-identical.
ADAPREC_HD float canonicalNan(float x) {
  const std::uint32_t bits = floatBits(x);
  return bitsFloat(select((bits & kF32AbsMask) > kF32InfBits, kF32QuietNanBits, bits));
}

// 2^e as a float for -149 <= e <= 127 (exact; subnormal below -126).
ADAPREC_HD float exp2Int(int e) {
  return e >= -126 ? bitsFloat(static_cast<std::uint32_t>(e + 127) << 23)
                   : bitsFloat(1u << (e + 149));
}

template <int kExpBits, int kManBits, bool kHasInf>
struct SmallFloat {
  static constexpr int kBits = 1 + kExpBits + kManBits;
  static constexpr bool kHasInfinity = kHasInf;
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr std::uint32_t kSignBit = 1u << (kBits - 1);
  static constexpr std::uint32_t kExpMask = ((1u << kExpBits) - 1) << kManBits;
  static constexpr std::uint32_t kManMask = (1u << kManBits) - 1;
  // Largest finite magnitude code: with Inf, the exponent below all-ones and a full mantissa;
  // without (E4M3FN), all ones except the last mantissa bit (all ones is NaN).
  static constexpr std::uint32_t kMaxFinite = kHasInf ? (kExpMask - (1u << kManBits)) | kManMask
                                                      : (kExpMask | kManMask) - 1;
  static constexpr std::uint32_t kInf = kExpMask;  // meaningful only when kHasInf
  // Where encode(x) stops a finite value's magnitude code: Inf for the types with Inf whose range is
  // narrower than fp32's (fp16, fp8), the largest finite code otherwise (bf16, e4m3). The overflow rule
  // of the header comment.
  static constexpr std::uint32_t kOverflowMagnitude = kHasInf && kExpBits < 8 ? kInf : kMaxFinite;
  static constexpr std::uint32_t kNan = kHasInf ? kExpMask | (1u << (kManBits - 1)) : kExpMask | kManMask;
  // Unbiased exponent of the largest finite value (E5M2: 15, E4M3FN: 8).
  static constexpr int kMaxExp = static_cast<int>(kMaxFinite >> kManBits) - kBias;
  // fp32 bits of the smallest normal magnitude 2^(1-bias).
  static constexpr std::uint32_t kMinNormalF32 = static_cast<std::uint32_t>(127 - kBias + 1) << 23;
  // Adding this power of two to a magnitude below the smallest normal makes the fp32 adder round it
  // (RNE) to a multiple of the subnormal spacing 2^(1-bias-man), which lands in the low mantissa bits.
  static constexpr std::uint32_t kSubnormalMagicF32 =
      static_cast<std::uint32_t>(127 + 1 - kBias - kManBits + 23) << 23;
  static constexpr int kShift = 23 - kManBits;
  static constexpr std::uint32_t kRebias = static_cast<std::uint32_t>(127 - kBias) << kManBits;

  // fp32 -> code. Branch-free. Overflow: kOverflowMagnitude.
  static ADAPREC_HD std::uint32_t encode(float x) { return encode(x, kOverflowMagnitude); }

  // The same with finite values stopping at the magnitude code maxMagnitude (<= kMaxFinite: they
  // saturate there; kInf: they overflow to Inf) instead: round to nearest, ties to even, then take the
  // smaller magnitude code. A block-scaled encoder passes maxMagnitudeForScale(e).
  static ADAPREC_HD std::uint32_t encode(float x, std::uint32_t maxMagnitude) {
    const std::uint32_t u = floatBits(x);
    const std::uint32_t sign = (u >> 31) << (kBits - 1);
    const std::uint32_t a = u & kF32AbsMask;
    // Normal target: round the mantissa in the integer domain (ties to even), then rebias. (For a
    // below the smallest normal this wraps around; the subnormal result replaces it.)
    std::uint32_t mag = ((a + ((1u << (kShift - 1)) - 1) + ((a >> kShift) & 1u)) >> kShift) - kRebias;
    if constexpr (kExpBits < 8) {
      // Subnormal target: let the fp32 adder do the rounding. (bf16 shares fp32's exponent range,
      // so the integer rounding above is already right for fp32 subnormals.)
      const float magic = bitsFloat(kSubnormalMagicF32);
      const std::uint32_t sub = floatBits(addRn(bitsFloat(a), magic)) - kSubnormalMagicF32;
      mag = select(a < kMinNormalF32, sub, mag);
    }
    mag = mag < maxMagnitude ? mag : maxMagnitude;  // saturate or overflow finite values (an unsigned min)
    const std::uint32_t special = kHasInf ? select(a == kF32InfBits, kInf, kNan) : kNan;
    mag = select(a >= kF32InfBits, special, mag);
    return sign | mag;
  }

  // code -> fp32 (exact: every small-float value is an fp32 value).
  static ADAPREC_HD float decode(std::uint32_t code) {
    const std::uint32_t sign = ((code >> (kBits - 1)) & 1u) << 31;
    const std::uint32_t mag = code & (kSignBit - 1);
    const std::uint32_t exp = mag >> kManBits;
    const std::uint32_t normalBits = (mag << kShift) + (static_cast<std::uint32_t>(127 - kBias) << 23);
    const float subnormal = mulRn(static_cast<float>(static_cast<std::int32_t>(mag & kManMask)),
                                  exp2Int(1 - kBias - kManBits));
    std::uint32_t bits = select(exp == 0, floatBits(subnormal), normalBits);
    const bool isNan = kHasInf ? ((exp == (kExpMask >> kManBits)) & ((mag & kManMask) != 0))
                               : (mag == (kExpMask | kManMask));
    if constexpr (kHasInf) bits = select(mag == kExpMask, kF32InfBits, bits);
    bits = select(isNan, kF32QuietNanBits, bits);
    return bitsFloat(bits | sign);
  }

  // Scale exponents scaleExponent produces for finite amax (it is non-decreasing in amax, so the
  // ends are those of amax = 2^-149 and amax = FLT_MAX), the only ones a valid chunk may carry:
  // fp8: [-164, 113], e4m3: [-157, 120]. 2^-149 scales to 2^kMaxExp, the first value of the top
  // binade; FLT_MAX = (2 - 2^-23) * 2^127 has a larger fraction than kMaxFinite, so one more.
  static constexpr int kMinScaleExponent = -149 - kMaxExp;
  static constexpr int kMaxScaleExponent = 128 - kMaxExp;
  // The largest e with (largest finite value) * 2^e <= FLT_MAX (fp8: 112, e4m3: 119): kMaxFinite's
  // value is below 2^(kMaxExp+1). Only e = kMaxScaleExponent = kSafeScaleExponent + 1 is above it.
  static constexpr int kSafeScaleExponent = 127 - kMaxExp;
  // Code of 2^kMaxExp, the first of the top binade.
  static constexpr std::uint32_t kTopBinadeCode = static_cast<std::uint32_t>(kMaxExp + kBias) << kManBits;

  // The largest magnitude code whose value * 2^e is finite in fp32: the block's largest representable
  // value, where its finite inputs saturate. kMaxFinite up to kSafeScaleExponent; at e =
  // kMaxScaleExponent the top binade would scale to [2^128, ...) = inf, so the code just below it
  // ((2 - 2^-M) * 2^(kMaxExp-1), times 2^e: (2 - 2^-M) * 2^127; fp8: 0x77, e4m3: 0x77).
  static constexpr ADAPREC_HD std::uint32_t maxMagnitudeForScale(int e) {
    return e <= kSafeScaleExponent ? kMaxFinite : kTopBinadeCode - 1;
  }

  // Power-of-two block scale: the smallest e such that amax * 2^-e <= the largest finite value, so
  // the block's largest magnitude uses the top binade. amax must be finite and >= 0; 0 gives e = 0.
  static ADAPREC_HD int scaleExponent(float amax) {
    const std::uint32_t a = floatBits(amax) & kF32AbsMask;
    if (a == 0) return 0;
    int e2;           // floor(log2(amax))
    std::uint32_t f;  // the 23 fraction bits of amax normalised to [1, 2)
    if (a >= 0x00800000u) {
      e2 = static_cast<int>(a >> 23) - 127;
      f = a & 0x007fffffu;
    } else {
      int top = 31;
      while (((a >> top) & 1u) == 0) --top;  // a != 0, at most 23 iterations, subnormal amax only
      e2 = top - 149;
      f = (a << (23 - top)) & 0x007fffffu;
    }
    const std::uint32_t maxFraction = (kMaxFinite & kManMask) << kShift;  // 1.75 -> 0x600000
    return f <= maxFraction ? e2 - kMaxExp : e2 - kMaxExp + 1;
  }
};

using Fp16Math = SmallFloat<5, 10, true>;
using Bf16Math = SmallFloat<8, 7, true>;
using Fp8Math = SmallFloat<5, 2, true>;
using E4m3Math = SmallFloat<4, 3, false>;

static_assert(Fp8Math::kMinScaleExponent == -164 && Fp8Math::kMaxScaleExponent == 113);
static_assert(E4m3Math::kMinScaleExponent == -157 && E4m3Math::kMaxScaleExponent == 120);
static_assert(Fp8Math::kSafeScaleExponent == 112 && E4m3Math::kSafeScaleExponent == 119);
static_assert(Fp8Math::maxMagnitudeForScale(113) == 0x77 && E4m3Math::maxMagnitudeForScale(120) == 0x77);
static_assert(Fp16Math::kOverflowMagnitude == 0x7c00 && Fp8Math::kOverflowMagnitude == 0x7c &&
              Bf16Math::kOverflowMagnitude == 0x7f7f && E4m3Math::kOverflowMagnitude == 0x7e);

// x * 2^-e as two exact multiplications (2^-e alone may not be a float): the factors for encoding.
struct ScaleFactors {
  float first;
  float second;
};
ADAPREC_HD ScaleFactors encodeFactors(int e) {
  const int s = -e;  // in [-120, 164] (the scale exponent ranges above)
  return s > 127 ? ScaleFactors{exp2Int(127), exp2Int(s - 127)} : ScaleFactors{exp2Int(s), 1.0f};
}
// value * 2^e for decoding: the first multiplication is exact (it never lands below 2^-142 for the
// values fp8/e4m3 codes decode to), so the product is rounded once.
ADAPREC_HD ScaleFactors decodeFactors(int e) {
  return e < -126 ? ScaleFactors{exp2Int(-126), exp2Int(e + 126)} : ScaleFactors{exp2Int(e), 1.0f};
}

}  // namespace adaprec::detail
