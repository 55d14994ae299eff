// Exhaustive conversion tests for fp16, bf16, fp8 (1-5-2) and e4m3 against the independent reference
// in small_float_reference.hpp: every code decodes to its defined value, every value encodes back to
// its code, and RNE (ties, subnormals, saturation, NaN, Inf, ±0) agrees on targeted and swept fp32
// inputs. Checked both on the scalar math and through the public codec on whole chunks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/detail/scalar_convert.hpp"
#include "small_float_reference.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

std::uint32_t bitsOfFloat(float f) { return detail::floatBits(f); }

// Inputs that probe every rounding decision: each representable value, the exact midpoints between
// neighbours (ties) and one fp32 ulp either side of them, values around the saturation bound and
// below the smallest subnormal, specials, and a strided sweep over all fp32 bit patterns.
std::vector<float> probeInputs(const SmallFloatSpec& spec) {
  std::vector<float> in;
  std::vector<double> values;
  for (std::uint32_t c : positiveFiniteCodes(spec)) values.push_back(valueOf(spec, c));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float v = static_cast<float>(values[i]);
    in.push_back(v);
    if (i + 1 == values.size()) {  // the largest value: probe just beyond it (overflow or saturation)
      in.push_back(std::nextafter(v, INFINITY));
      continue;
    }
    const float mid = static_cast<float>((values[i] + values[i + 1]) / 2);  // exact: fits in fp32
    REQUIRE(static_cast<double>(mid) == (values[i] + values[i + 1]) / 2);
    in.push_back(mid);
    in.push_back(std::nextafter(mid, 0.0f));
    in.push_back(std::nextafter(mid, INFINITY));
  }
  const float specials[] = {0.0f, INFINITY, NAN, std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                            1e-30f, 1e30f, 65504.0f, 65519.0f, 65520.0f, 57344.0f, 61440.0f, 448.0f, 464.0f};
  for (float s : specials) in.push_back(s);
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 31); u += 2039) in.push_back(detail::bitsFloat(static_cast<std::uint32_t>(u)));
  const std::size_t positives = in.size();
  for (std::size_t i = 0; i < positives; ++i) in.push_back(-in[i]);
  return in;
}

template <class Math>
void checkFormat(const SmallFloatSpec& spec, Format format) {
  const std::uint32_t codeCount = 1u << bitsOf(spec);
  // 1. Every code decodes to its defined value; NaN codes to a NaN with the code's sign.
  for (std::uint32_t code = 0; code < codeCount; ++code) {
    const float got = Math::decode(code);
    const double want = valueOf(spec, code);
    if (std::isnan(want)) {
      INFO("code " << code);
      REQUIRE(std::isnan(got));
      REQUIRE(std::signbit(got) == std::signbit(want));
    } else {
      INFO("code " << code << " want " << want << " got " << got);
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE(std::signbit(got) == std::signbit(want));
      // 2. ... and encodes back to itself.
      REQUIRE(Math::encode(got) == code);
    }
  }
  // 3. RNE, saturation and specials against the reference on probe inputs.
  const ReferenceEncoder reference(spec);
  const std::vector<float> inputs = probeInputs(spec);
  std::size_t mismatches = 0;
  for (float x : inputs) {
    const std::uint32_t want = reference.encode(x), got = Math::encode(x);
    if (want != got && mismatches++ < 5) {
      UNSCOPED_INFO("input bits 0x" << std::hex << bitsOfFloat(x) << " want 0x" << want << " got 0x" << got);
    }
  }
  REQUIRE(mismatches == 0);
  // 4. The public codec produces the same codes in its payload and decodes them to the same values.
  const std::size_t n = inputs.size();
  std::vector<unsigned char> chunk(encodedBytes(format, n));
  encode(format, inputs.data(), n, chunk.data(), chunk.size());
  const std::size_t width = static_cast<std::size_t>(bitsOf(spec)) / 8;
  const unsigned char* payload = chunk.data() + chunk.size() - n * width;
  std::vector<float> decoded(n);
  decode(format, chunk.data(), chunk.size(), decoded.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t code = 0;
    std::memcpy(&code, payload + i * width, width);
    INFO("element " << i);
    REQUIRE(code == reference.encode(inputs[i]));
    REQUIRE(bitsOfFloat(decoded[i]) == bitsOfFloat(Math::decode(code)));
  }
}

}  // namespace

TEST_CASE("fp16: exhaustive codes and RNE against the reference", "[conversion]") {
  checkFormat<detail::Fp16Math>(kFp16Spec, Format::kFp16);
}

TEST_CASE("bf16: exhaustive codes and RNE against the reference", "[conversion]") {
  checkFormat<detail::Bf16Math>(kBf16Spec, Format::kBf16);
}

TEST_CASE("fp8 (1-5-2): exhaustive codes and RNE against the reference", "[conversion]") {
  checkFormat<detail::Fp8Math>(kFp8Spec, Format::kFp8);
}

TEST_CASE("e4m3 scalar math: exhaustive codes and RNE against the reference", "[conversion]") {
  // e4m3 chunks are always block-scaled; the scalar conversion is checked here, scaling in test_codec.
  const std::uint32_t codeCount = 256;
  const ReferenceEncoder reference(kE4m3Spec);
  for (std::uint32_t code = 0; code < codeCount; ++code) {
    const double want = valueOf(kE4m3Spec, code);
    const float got = detail::E4m3Math::decode(code);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE(detail::E4m3Math::encode(got) == code);
    }
  }
  std::size_t mismatches = 0;
  for (float x : probeInputs(kE4m3Spec)) mismatches += reference.encode(x) != detail::E4m3Math::encode(x);
  REQUIRE(mismatches == 0);
}

TEST_CASE("named corner cases", "[conversion]") {
  using detail::Fp16Math;
  using detail::Fp8Math;
  using detail::E4m3Math;
  using detail::Bf16Math;
  CHECK(Fp16Math::encode(65504.0f) == 0x7bff);
  CHECK(Fp16Math::encode(65519.0f) == 0x7bff);             // below halfway to 65536: the largest value
  CHECK(Fp16Math::encode(65520.0f) == 0x7c00);             // halfway: the tie goes to Inf's even code
  CHECK(Fp16Math::encode(1e9f) == 0x7c00);                 // overflows to Inf, as an IEEE cast
  CHECK(Fp16Math::encode(-1e9f) == 0xfc00);
  CHECK(Fp16Math::encode(INFINITY) == 0x7c00);             // Inf stays Inf
  CHECK(Fp16Math::encode(-INFINITY) == 0xfc00);
  CHECK(Fp16Math::encode(-0.0f) == 0x8000);                // sign of zero kept
  CHECK(Fp16Math::encode(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and min subnormal -> even
  CHECK(Fp16Math::encode(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(Fp16Math::encode(-std::ldexp(1.0f, -30)) == 0x8000);  // underflow keeps the sign
  CHECK(Fp8Math::encode(57344.0f) == 0x7b);
  CHECK(Fp8Math::encode(61439.0f) == 0x7b);               // below halfway to 65536
  CHECK(Fp8Math::encode(61440.0f) == 0x7c);                // halfway: Inf
  CHECK(Fp8Math::encode(1e6f) == 0x7c);
  CHECK(Fp8Math::encode(-1e6f) == 0xfc);
  CHECK(Fp8Math::encode(INFINITY) == 0x7c);
  CHECK(Fp8Math::encode(std::ldexp(1.0f, -16)) == 0x01);   // smallest subnormal
  CHECK(Fp8Math::encode(7e-6f) == 0x00);                   // below half of 2^-16: the flush fp8s avoids
  CHECK(Fp8Math::encode(1e-5f) == 0x01);
  CHECK(Fp8Math::encode(1.125f) == 0x3c);                  // tie 1.0 / 1.25 -> even (1.0)
  CHECK(Fp8Math::encode(1.375f) == 0x3e);                  // tie 1.25 / 1.5 -> even (1.5)
  CHECK(E4m3Math::encode(448.0f) == 0x7e);
  CHECK(E4m3Math::encode(1e6f) == 0x7e);
  CHECK(E4m3Math::encode(INFINITY) == 0x7f);               // no Inf in E4M3FN: NaN
  CHECK(Bf16Math::encode(std::numeric_limits<float>::max()) == 0x7f7f);
  CHECK(Bf16Math::encode(1.00390625f) == 0x3f80);          // tie -> even
  CHECK(Bf16Math::encode(1.01171875f) == 0x3f82);          // tie -> even (up)
  CHECK(std::isnan(Fp8Math::decode(Fp8Math::encode(NAN))));
  CHECK(std::signbit(Fp16Math::decode(Fp16Math::encode(-NAN))));
}
