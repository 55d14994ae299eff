// Scalar fp32 <-> bf16 / fp16 conversions (round to nearest even) for the native 16-bit allreduce,
// where MPI's user op adds two 16-bit values in fp32 and rounds the sum back to 16 bits.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace adaprec::detail {

inline std::uint16_t floatToBf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

inline float bf16ToFloat(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

inline std::uint16_t floatToFp16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits >= 0x7f800000u) return sign | (bits > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (bits >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (bits < 0x38800000u) {
    // Subnormal result: scaling by 2^24 is exact, nearbyint rounds half to even.
    const float scaled = std::fabs(value) * 16777216.0f;
    return sign | static_cast<std::uint16_t>(std::nearbyint(scaled));
  }
  bits += 0xfffu + ((bits >> 13) & 1u);
  bits -= 0x38000000u;  // exponent bias 127 -> 15
  return sign | static_cast<std::uint16_t>(bits >> 13);
}

inline float fp16ToFloat(std::uint16_t value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value & 0x8000u) << 16;
  const std::uint32_t exponent = (value >> 10) & 0x1fu;
  const std::uint32_t mantissa = value & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace adaprec::detail
