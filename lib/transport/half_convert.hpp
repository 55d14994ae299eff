// fp32 <-> bf16 / fp16 for the native 16-bit allreduce, where MPI's user op adds two 16-bit values in
// fp32 (saturatingAdd: a finite overflowing sum is ±FLT_MAX) and rounds the sum back to 16 bits: the
// codec's own conversions (docs/formats.md: RNE, saturating, NaN/Inf kept), so the native path rounds
// exactly like the bf16/fp16 wire formats.
#pragma once

#include <cstdint>

#include "adaprec/detail/scalar_convert.hpp"

namespace adaprec::detail {

inline std::uint16_t floatToBf16(float value) { return static_cast<std::uint16_t>(Bf16Math::encode(value)); }
inline float bf16ToFloat(std::uint16_t value) { return Bf16Math::decode(value); }
inline std::uint16_t floatToFp16(float value) { return static_cast<std::uint16_t>(Fp16Math::encode(value)); }
inline float fp16ToFloat(std::uint16_t value) { return Fp16Math::decode(value); }

}  // namespace adaprec::detail
