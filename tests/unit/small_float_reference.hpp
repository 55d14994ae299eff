// Independent reference for the small float formats, built by enumeration and exact comparisons
// (no bit tricks shared with the code under test): the value of every code from its definition,
// and round-to-nearest-even by exact midpoint comparison against the sorted list of finite values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace adaprec::test {

struct SmallFloatSpec {
  int expBits;
  int manBits;
  bool hasInf;  // false: E4M3FN (only S.1111.111 is NaN)
};

inline constexpr SmallFloatSpec kFp16Spec{5, 10, true};
inline constexpr SmallFloatSpec kBf16Spec{8, 7, true};
inline constexpr SmallFloatSpec kFp8Spec{5, 2, true};
inline constexpr SmallFloatSpec kE4m3Spec{4, 3, false};

inline int bitsOf(const SmallFloatSpec& s) { return 1 + s.expBits + s.manBits; }

enum class Kind { kFinite, kInf, kNan };

inline Kind kindOf(const SmallFloatSpec& s, std::uint32_t code) {
  const std::uint32_t expAll = (1u << s.expBits) - 1;
  const std::uint32_t exp = (code >> s.manBits) & expAll;
  const std::uint32_t man = code & ((1u << s.manBits) - 1);
  if (s.hasInf) {
    if (exp == expAll) return man == 0 ? Kind::kInf : Kind::kNan;
    return Kind::kFinite;
  }
  return (exp == expAll && man == (1u << s.manBits) - 1) ? Kind::kNan : Kind::kFinite;
}

// The value of a code by definition: (-1)^s 2^(e-bias) (1 + m/2^M), or 2^(1-bias) m/2^M when e = 0.
inline double valueOf(const SmallFloatSpec& s, std::uint32_t code) {
  const int bias = (1 << (s.expBits - 1)) - 1;
  const std::uint32_t exp = (code >> s.manBits) & ((1u << s.expBits) - 1);
  const std::uint32_t man = code & ((1u << s.manBits) - 1);
  const bool negative = (code >> (s.expBits + s.manBits)) & 1u;
  double v;
  switch (kindOf(s, code)) {
    case Kind::kInf: v = std::numeric_limits<double>::infinity(); break;
    case Kind::kNan: v = std::numeric_limits<double>::quiet_NaN(); break;
    default:
      v = exp == 0 ? std::ldexp(static_cast<double>(man), 1 - bias - s.manBits)
                   : std::ldexp(static_cast<double>((1u << s.manBits) + man), static_cast<int>(exp) - bias - s.manBits);
  }
  return negative ? -v : v;
}

// Non-negative finite codes in increasing value order (codes of a sign-magnitude format are ordered).
inline std::vector<std::uint32_t> positiveFiniteCodes(const SmallFloatSpec& s) {
  std::vector<std::uint32_t> codes;
  for (std::uint32_t c = 0; c < (1u << (s.expBits + s.manBits)); ++c) {
    if (kindOf(s, c) == Kind::kFinite) codes.push_back(c);
  }
  return codes;
}

// Reference encoder: nearest finite value, ties to the even code; beyond the largest finite value an
// IEEE overflow to Inf for the formats with Inf and a range narrower than fp32's (fp16, fp8: Inf is
// then the next value up, 2^(maxExp+1), with an even code), saturation otherwise (bf16, e4m3); Inf
// kept where the format has it (NaN otherwise); NaN -> the canonical quiet NaN; sign bit always kept.
class ReferenceEncoder {
 public:
  explicit ReferenceEncoder(const SmallFloatSpec& s) : spec_(s), codes_(positiveFiniteCodes(s)) {
    for (std::uint32_t c : codes_) values_.push_back(valueOf(s, c));
  }

  std::uint32_t encode(float x) const {
    const std::uint32_t signBit = std::signbit(x) ? 1u << (spec_.expBits + spec_.manBits) : 0u;
    const std::uint32_t expAll = (1u << spec_.expBits) - 1;
    if (std::isnan(x)) {
      return signBit | (spec_.hasInf ? (expAll << spec_.manBits) | (1u << (spec_.manBits - 1))
                                     : (expAll << spec_.manBits) | ((1u << spec_.manBits) - 1));
    }
    if (std::isinf(x)) {
      return signBit | (spec_.hasInf ? expAll << spec_.manBits : (expAll << spec_.manBits) | ((1u << spec_.manBits) - 1));
    }
    const double a = std::fabs(static_cast<double>(x));
    if (a >= values_.back()) {
      if (!(spec_.hasInf && spec_.expBits < 8)) return signBit | codes_.back();  // saturate
      // Overflow: halfway to 2^(maxExp+1) and beyond round to Inf (the tie to its even code).
      const double next = 2 * std::ldexp(1.0, static_cast<int>(std::floor(std::log2(values_.back()))));
      return signBit | (2 * a >= values_.back() + next ? expAll << spec_.manBits : codes_.back());
    }
    // values_[hi-1] <= a < values_[hi]
    const std::size_t hi = static_cast<std::size_t>(std::upper_bound(values_.begin(), values_.end(), a) - values_.begin());
    const std::size_t lo = hi - 1;
    // Compare 2a with lo+hi: both sides exact in double for these formats.
    const double twice = 2 * a, sum = values_[lo] + values_[hi];
    std::size_t pick;
    if (twice < sum) {
      pick = lo;
    } else if (twice > sum) {
      pick = hi;
    } else {
      pick = (codes_[lo] & 1u) == 0 ? lo : hi;
    }
    return signBit | codes_[pick];
  }

 private:
  SmallFloatSpec spec_;
  std::vector<std::uint32_t> codes_;
  std::vector<double> values_;
};

}  // namespace adaprec::test
