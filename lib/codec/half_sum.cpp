#include "codec/half_sum.hpp"

#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/error.hpp"

namespace adaprec::detail {
namespace {

template <class Math>
void roundAll(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<std::uint16_t>(Math::encode(src[i]));
}

template <class Math>
void widenAll(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Math::decode(src[i]);
}

template <class Math>
void addAll(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<std::uint16_t>(Math::encode(saturatingAdd(Math::decode(a[i]), Math::decode(b[i]))));
}

void checkHalf(Format format) {
  ADAPREC_CHECK(isHalfFormat(format), ErrorCode::kInternal,
                "16-bit native arithmetic needs bf16 or fp16, not " << formatName(format));
}

}  // namespace

bool isHalfFormat(Format format) { return format == Format::kBf16 || format == Format::kFp16; }

void roundToHalf(Format format, const float* src, std::uint16_t* dst, std::size_t n) {
  checkHalf(format);
  format == Format::kBf16 ? roundAll<Bf16Math>(src, dst, n) : roundAll<Fp16Math>(src, dst, n);
}

void widenHalf(Format format, const std::uint16_t* src, float* dst, std::size_t n) {
  checkHalf(format);
  format == Format::kBf16 ? widenAll<Bf16Math>(src, dst, n) : widenAll<Fp16Math>(src, dst, n);
}

void addHalf(Format format, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out,
             std::size_t n) {
  checkHalf(format);
  format == Format::kBf16 ? addAll<Bf16Math>(a, b, out, n) : addAll<Fp16Math>(a, b, out, n);
}

}  // namespace adaprec::detail
