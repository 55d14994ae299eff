// The 16-bit arithmetic of the native bf16/fp16 allreduce (ChainerMN's fp16 allreduce): values are
// rounded to 16 bits once, then every addition is done in fp32 (saturatingAdd, as the lossy formats'
// decodeAdd: a finite overflowing sum is ±FLT_MAX) and rounded back to 16 bits. The rounding rules are
// the codec's own (Bf16Math / Fp16Math in adaprec/detail/scalar_convert.hpp: RNE, saturating, NaN/Inf
// kept), so the native path rounds exactly like the bf16/fp16 wire formats. The transports only move
// bytes: their 16-bit sums (MPI user op, the default gather-sum) call addHalf and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/format.hpp"

namespace adaprec::detail {

// Whether `format` is one of the two 16-bit formats these functions take (bf16, fp16).
bool isHalfFormat(Format format);
// dst[i] = src[i] rounded to `format` (bf16 or fp16), as 16-bit codes.
void roundToHalf(Format format, const float* src, std::uint16_t* dst, std::size_t n);
// dst[i] = the fp32 value of the 16-bit code src[i] (exact).
void widenHalf(Format format, const std::uint16_t* src, float* dst, std::size_t n);
// out[i] = round(saturatingAdd(widen(a[i]), widen(b[i]))): one addition of the native 16-bit sum.
// out may be a or b.
void addHalf(Format format, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out,
             std::size_t n);

}  // namespace adaprec::detail
