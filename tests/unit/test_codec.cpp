// Chunk-level properties of every format: sizes, documented error bounds, block scales, signs,
// specials, decodeAdd == acc + decode, and bit-identical output of the generic and AVX2 loops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/error.hpp"
#include "codec/host_kernels.hpp"
#include "small_float_reference.hpp"

using namespace adaprec;

namespace {

std::vector<float> gradientLike(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> logScale(-7.0, 1.0);
  std::vector<float> x(n);
  float scale = 1.0f;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 3000 == 0) scale = static_cast<float>(std::pow(10.0, logScale(rng)));
    x[i] = normal(rng) * scale;
  }
  return x;
}

std::vector<float> roundTrip(Format f, const std::vector<float>& x) {
  std::vector<unsigned char> chunk(encodedBytes(f, x.size()));
  encode(f, x.data(), x.size(), chunk.data(), chunk.size());
  std::vector<float> y(x.size());
  decode(f, chunk.data(), chunk.size(), y.data(), y.size());
  return y;
}

}  // namespace

TEST_CASE("encodedBytes is header + parameters + payload", "[codec]") {
  CHECK(encodedBytes(Format::kFp32, 0) == 16);
  CHECK(encodedBytes(Format::kFp32, 5) == 16 + 20);
  CHECK(encodedBytes(Format::kFp16, 3) == 16 + 6);
  CHECK(encodedBytes(Format::kFp8, 3) == 16 + 3);
  CHECK(encodedBytes(Format::kFp8s, 0) == 16);
  CHECK(encodedBytes(Format::kFp8s, 1) == 16 + 8 + 1);          // one int16 scale, padded to 8
  CHECK(encodedBytes(Format::kE4m3, 4 * 4096 + 1) == 16 + 16 + 4 * 4096 + 1);
  CHECK(encodedBytes(Format::kTable1, 9) == 16 + 8 + 2);
  CHECK(encodedBytes(Format::kTable8, 1) == 16 + 512 + 1);
  CHECK(encodedBytes(Format::kTable3, 1000) == 16 + 16 + 375);
}

TEST_CASE("fp32 is lossless bit for bit, specials included", "[codec]") {
  std::vector<float> x = gradientLike(1001, 1);
  x[3] = NAN, x[4] = -INFINITY, x[5] = -0.0f, x[6] = std::numeric_limits<float>::denorm_min();
  const std::vector<float> y = roundTrip(Format::kFp32, x);
  CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

TEST_CASE("elementwise formats stay within their documented relative error", "[codec]") {
  // Half an ulp of the target: 2^-(mantissa bits + 1) relative, for values in the normal range.
  struct Case {
    Format format;
    double relBound;
    double minNormal;
  };
  const Case cases[] = {{Format::kBf16, std::ldexp(1.0, -8), std::ldexp(1.0, -126)},
                        {Format::kFp16, std::ldexp(1.0, -11), std::ldexp(1.0, -14)},
                        {Format::kFp8, std::ldexp(1.0, -3), std::ldexp(1.0, -14)}};
  const std::vector<float> x = gradientLike(100000, 2);
  for (const Case& c : cases) {
    const std::vector<float> y = roundTrip(c.format, x);
    std::size_t checked = 0, bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double a = std::fabs(double(x[i]));
      if (a < c.minNormal || a > 57344) continue;
      ++checked;
      bad += std::fabs(double(y[i]) - x[i]) > c.relBound * a;
    }
    INFO(formatName(c.format));
    CHECK(checked > 50000);
    CHECK(bad == 0);
  }
}

TEST_CASE("block-scaled formats: scale puts the block max in the top binade; error bound holds", "[codec]") {
  const std::vector<float> x = gradientLike(3 * kScaleBlock + 123, 3);
  for (Format f : {Format::kFp8s, Format::kE4m3}) {
    INFO(formatName(f));
    const int manBits = f == Format::kFp8s ? 2 : 3;
    const int bias = f == Format::kFp8s ? 15 : 7;
    const double maxFinite = f == Format::kFp8s ? 57344.0 : 448.0;
    std::vector<unsigned char> chunk(encodedBytes(f, x.size()));
    encode(f, x.data(), x.size(), chunk.data(), chunk.size());
    std::vector<float> y(x.size());
    decode(f, chunk.data(), chunk.size(), y.data(), y.size());
    for (std::size_t b = 0; b * kScaleBlock < x.size(); ++b) {
      std::int16_t e;
      std::memcpy(&e, chunk.data() + kChunkHeaderBytes + 2 * b, 2);
      double amax = 0;
      const std::size_t end = std::min(x.size(), (b + 1) * kScaleBlock);
      for (std::size_t i = b * kScaleBlock; i < end; ++i) amax = std::max(amax, std::fabs(double(x[i])));
      const double scaled = std::ldexp(amax, -e);
      CHECK(scaled <= maxFinite);
      CHECK(scaled > maxFinite / 2);
      // |error| <= half an ulp relative, or half the smallest subnormal step (scaled) absolute.
      const double absFloor = std::ldexp(1.0, e + 1 - bias - manBits - 1);
      std::size_t bad = 0;
      for (std::size_t i = b * kScaleBlock; i < end; ++i) {
        const double err = std::fabs(double(y[i]) - x[i]);
        bad += err > std::max(std::ldexp(std::fabs(double(x[i])), -(manBits + 1)), absFloor);
      }
      CHECK(bad == 0);
    }
  }
}

namespace {

// The block-scaled formats near FLT_MAX, described independently of the code under test.
struct ScaledSpec {
  Format format;
  test::SmallFloatSpec spec;
  int bias;
  double maxFinite;
};
const ScaledSpec kScaledSpecs[] = {{Format::kFp8s, test::kFp8Spec, 15, 57344.0},
                                   {Format::kE4m3, test::kE4m3Spec, 7, 448.0}};

// The smallest e with amax * 2^-e <= the largest finite value (docs/formats.md), in double.
int expectedScale(const ScaledSpec& s, double amax) {
  int e = -200;
  while (std::ldexp(amax, -e) > s.maxFinite) ++e;
  return e;
}

// The block's largest representable value under scale exponent e: the largest code value v with
// v * 2^e finite in fp32 (its magnitude code).
std::uint32_t largestRepresentable(const ScaledSpec& s, int e) {
  std::uint32_t limit = 0;
  for (std::uint32_t c : test::positiveFiniteCodes(s.spec)) {
    if (std::ldexp(test::valueOf(s.spec, c), e) <= std::numeric_limits<float>::max()) limit = c;
  }
  return limit;
}

// The documented encoding of x in a block with scale exponent e: the nearest code value (ties to the
// even code) of x * 2^-e, saturating at the block's largest representable value (magnitude code
// limit). Returns the decoded value v * 2^e with x's sign.
float expectedRoundTrip(const ScaledSpec& s, const test::ReferenceEncoder& reference, float x, int e,
                        std::uint32_t limit) {
  const std::uint32_t signBit = 1u << (s.spec.expBits + s.spec.manBits);
  const std::uint32_t code = reference.encode(static_cast<float>(std::ldexp(double(x), -e)));
  const std::uint32_t magnitude = std::min(code & (signBit - 1), limit);
  const double v = std::ldexp(test::valueOf(s.spec, magnitude), e);
  return static_cast<float>(std::signbit(x) ? -v : v);
}

}  // namespace

TEST_CASE("block-scaled formats saturate near FLT_MAX: a finite value never decodes to inf", "[codec]") {
  // The tester's values: 30720 * 2^113 (the midpoint of fp8s's 28672 and 32768 at the top exponent
  // 113, a tie to the even code 32768 -> 2^128) and 248 * 2^120 (e4m3: 240 | 256 at exponent 120).
  // The block's largest representable value is 1.75 * 2^127 (fp8s), 1.875 * 2^127 (e4m3).
  const float flt = std::numeric_limits<float>::max();
  const float fp8sTop = std::ldexp(1.75f, 127), e4m3Top = std::ldexp(1.875f, 127);
  struct Case {
    Format format;
    float x;
    float want;
  };
  const Case cases[] = {{Format::kFp8s, std::ldexp(30720.0f, 113), fp8sTop},
                        {Format::kFp8s, std::ldexp(30719.0f, 113), fp8sTop},
                        {Format::kFp8s, flt, fp8sTop},
                        {Format::kFp8s, std::nextafter(fp8sTop, INFINITY), fp8sTop},
                        {Format::kFp8s, 3.2e38f, fp8sTop},
                        {Format::kE4m3, std::ldexp(248.0f, 120), e4m3Top},
                        {Format::kE4m3, flt, e4m3Top},
                        {Format::kE4m3, std::nextafter(e4m3Top, INFINITY), e4m3Top},
                        {Format::kE4m3, 3.3e38f, e4m3Top}};
  for (const Case& c : cases) {
    for (float sign : {1.0f, -1.0f}) {
      INFO(formatName(c.format) << " x = " << sign * c.x);
      // Alone, and as the block maximum among smaller values.
      const std::vector<float> one = roundTrip(c.format, {sign * c.x});
      CHECK(one[0] == sign * c.want);
      std::vector<float> block = gradientLike(5000, 11);
      for (float& v : block) v *= 1e36f;
      block[4000] = sign * c.x;
      const std::vector<float> y = roundTrip(c.format, block);
      CHECK(y[4000] == sign * c.want);
      std::size_t nonFinite = 0;
      for (float v : y) nonFinite += !std::isfinite(v);
      CHECK(nonFinite == 0);
    }
  }
}

TEST_CASE("block scales near FLT_MAX: every ISA matches the documented saturation and bound", "[codec][isa]") {
  // Blocks whose amax sweeps the top fp32 binades (e = 110..113 for fp8s, 117..120 for e4m3) plus the
  // edges; each block holds its amax, every code value near and beyond the block's limit times 2^e
  // with the midpoints to the next code and their float neighbours, and fp32 values densely below
  // amax; signs alternate. A last short block has amax = FLT_MAX.
  const float flt = std::numeric_limits<float>::max();
  std::vector<float> amaxes;
  for (std::uint32_t bits = 0x7e000000u; bits <= 0x7f7fffffu - 0xffffu; bits += 0x10000u)
    amaxes.push_back(detail::bitsFloat(bits + (bits >> 16 & 0xfffu)));
  for (float v : {std::ldexp(30720.0f, 113), std::ldexp(248.0f, 120), std::ldexp(1.75f, 127), std::ldexp(1.75f, 126),
                  std::ldexp(1.875f, 127), std::ldexp(1.75f, 125), flt}) {
    amaxes.insert(amaxes.end(), {std::nextafter(v, 0.0f), v, std::nextafter(v, INFINITY)});
  }
  amaxes.erase(std::remove_if(amaxes.begin(), amaxes.end(), [](float a) { return !std::isfinite(a); }), amaxes.end());
  amaxes.push_back(flt);  // the last, short block
  const std::size_t lastBlock = 77;
  std::vector<const codec::HostKernels*> isas = {&codec::genericHostKernels()};
  for (const codec::HostKernels* k : {codec::avx2HostKernels(), codec::avx512HostKernels()})
    if (k != nullptr) isas.push_back(k);

  for (const ScaledSpec& s : kScaledSpecs) {
    INFO(formatName(s.format));
    const test::ReferenceEncoder reference(s.spec);
    const std::vector<std::uint32_t> codes = test::positiveFiniteCodes(s.spec);
    std::vector<float> x;
    std::vector<int> scales;
    for (std::size_t b = 0; b < amaxes.size(); ++b) {
      const float amax = amaxes[b];
      const int e = expectedScale(s, amax);
      scales.push_back(e);
      const std::size_t len = b + 1 == amaxes.size() ? lastBlock : kScaleBlock;
      std::vector<float> block = {amax};
      for (std::size_t k = 0; k + 1 < codes.size(); ++k) {
        const double v = std::ldexp(test::valueOf(s.spec, codes[k]), e);
        const double mid = std::ldexp(0.5 * (test::valueOf(s.spec, codes[k]) + test::valueOf(s.spec, codes[k + 1])), e);
        for (double t : {v, mid}) {
          if (t > amax) continue;
          const float f = static_cast<float>(t);
          block.insert(block.end(), {std::nextafter(f, 0.0f), f, std::nextafter(f, INFINITY)});
        }
      }
      for (std::uint32_t k = 1; block.size() < kScaleBlock; ++k) block.push_back(detail::bitsFloat(detail::floatBits(amax) - 2048 * k));
      block.resize(len);
      for (std::size_t i = 0; i < len; ++i) {
        block[i] = std::min(block[i], amax);
        if ((i + b) % 2 == 1) block[i] = -block[i];
      }
      x.insert(x.end(), block.begin(), block.end());
    }
    const std::size_t n = x.size();
    std::vector<float> expected(n);
    for (std::size_t b = 0, i = 0; b < scales.size(); ++b) {
      const std::uint32_t limit = largestRepresentable(s, scales[b]);
      for (; i < std::min(n, (b + 1) * kScaleBlock); ++i) expected[i] = expectedRoundTrip(s, reference, x[i], scales[b], limit);
    }
    std::vector<unsigned char> genericCodes, genericExps;
    for (const codec::HostKernels* k : isas) {
      INFO("variant " << k->isa);
      const bool fp8 = s.format == Format::kFp8s;
      std::vector<unsigned char> exps(2 * amaxes.size()), payload(n);
      (fp8 ? k->encodeFp8 : k->encodeE4m3)(x.data(), n, exps.data(), payload.data());
      std::vector<float> y(n);
      (fp8 ? k->decodeFp8 : k->decodeE4m3)(payload.data(), n, exps.data(), y.data());
      std::size_t wrongScale = 0, nonFinite = 0, notDocumented = 0, outOfBound = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t b = i / kScaleBlock;
        std::int16_t e;
        std::memcpy(&e, exps.data() + 2 * b, 2);
        wrongScale += e != scales[b];
        nonFinite += !std::isfinite(y[i]);
        const float want = expected[i];
        if (detail::floatBits(y[i]) != detail::floatBits(want) && notDocumented++ == 0)
          UNSCOPED_INFO("element " << i << ": x = " << x[i] << " gives " << y[i] << ", documented " << want);
        const double bound = std::max(std::ldexp(std::fabs(double(x[i])), -(s.spec.manBits + 1)),
                                      std::ldexp(1.0, scales[b] - s.bias - s.spec.manBits));
        outOfBound += !(std::fabs(double(y[i]) - x[i]) <= bound);
      }
      CHECK(wrongScale == 0);
      CHECK(nonFinite == 0);
      CHECK(notDocumented == 0);
      CHECK(outOfBound == 0);
      if (k == isas.front()) {
        genericCodes = payload, genericExps = exps;
      } else {
        const bool sameCodes = payload == genericCodes, sameExps = exps == genericExps;
        CHECK(sameCodes);
        CHECK(sameExps);
      }
    }
  }
}

TEST_CASE("scale exponent ranges and limits are those of finite amax", "[codec]") {
  using detail::E4m3Math;
  using detail::Fp8Math;
  const float tiny = std::numeric_limits<float>::denorm_min(), flt = std::numeric_limits<float>::max();
  CHECK(Fp8Math::scaleExponent(tiny) == Fp8Math::kMinScaleExponent);
  CHECK(Fp8Math::scaleExponent(flt) == Fp8Math::kMaxScaleExponent);
  CHECK(E4m3Math::scaleExponent(tiny) == E4m3Math::kMinScaleExponent);
  CHECK(E4m3Math::scaleExponent(flt) == E4m3Math::kMaxScaleExponent);
  for (const ScaledSpec& s : kScaledSpecs) {
    INFO(formatName(s.format));
    const bool fp8 = s.format == Format::kFp8s;
    const int safe = fp8 ? Fp8Math::kSafeScaleExponent : E4m3Math::kSafeScaleExponent;
    const int top = fp8 ? Fp8Math::kMaxScaleExponent : E4m3Math::kMaxScaleExponent;
    CHECK(expectedScale(s, tiny) == (fp8 ? Fp8Math::kMinScaleExponent : E4m3Math::kMinScaleExponent));
    CHECK(expectedScale(s, flt) == top);
    // safe: the largest e with maxFinite * 2^e <= FLT_MAX.
    CHECK(std::ldexp(s.maxFinite, safe) <= flt);
    CHECK(std::ldexp(s.maxFinite, safe + 1) > flt);
    for (int e = safe - 2; e <= top; ++e) {
      const std::uint32_t limit = fp8 ? Fp8Math::maxMagnitudeForScale(e) : E4m3Math::maxMagnitudeForScale(e);
      INFO("e " << e);
      CHECK(std::ldexp(test::valueOf(s.spec, limit), e) <= flt);
      const std::vector<std::uint32_t> codes = test::positiveFiniteCodes(s.spec);
      const auto next = std::upper_bound(codes.begin(), codes.end(), limit);
      if (next != codes.end()) CHECK(std::ldexp(test::valueOf(s.spec, *next), e) > flt);
    }
  }
}

TEST_CASE("fp8 flushes tiny gradients that fp8s keeps", "[codec]") {
  std::vector<float> x(4096);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2e-6f * (1.0f + static_cast<float>(i % 7));
  const std::vector<float> raw = roundTrip(Format::kFp8, x);
  const std::vector<float> scaled = roundTrip(Format::kFp8s, x);
  std::size_t rawZero = 0, scaledZero = 0;
  for (std::size_t i = 0; i < x.size(); ++i) rawZero += raw[i] == 0.0f, scaledZero += scaled[i] == 0.0f;
  std::size_t tiny = 0;  // below half of fp8's smallest subnormal 2^-16: 2e-6, 4e-6 and 6e-6
  for (std::size_t i = 0; i < x.size(); ++i) tiny += i % 7 < 3;
  CHECK(rawZero == tiny);
  CHECK(scaledZero == 0);
}

TEST_CASE("every format keeps signs and maps zero to zero-or-table; specials as documented", "[codec]") {
  std::vector<float> x = gradientLike(9000, 4);
  x[10] = 0.0f, x[11] = -0.0f, x[12] = 1e30f, x[13] = -1e30f, x[14] = 1e-42f, x[15] = -1e-42f;
  for (Format f : allFormats()) {
    INFO(formatName(f));
    const std::vector<float> y = roundTrip(f, x);
    std::size_t flips = 0;
    for (std::size_t i = 0; i < x.size(); ++i) flips += std::signbit(x[i]) != std::signbit(y[i]);
    CHECK(flips == 0);
    // Beyond the range: fp16 and fp8 overflow to Inf (as an IEEE cast; saturating would clamp
    // silently), every other format keeps a finite value of the right sign (docs/formats.md).
    if (f == Format::kFp16 || f == Format::kFp8) {
      CHECK(y[12] == INFINITY);
      CHECK(y[13] == -INFINITY);
    } else {
      CHECK(std::isfinite(y[12]));
    }
  }
  std::vector<float> specials = {NAN, -NAN, INFINITY, -INFINITY, 1.0f, -2.0f};
  for (Format f : {Format::kBf16, Format::kFp16, Format::kFp8, Format::kFp8s}) {
    INFO(formatName(f));
    const std::vector<float> y = roundTrip(f, specials);
    CHECK(std::isnan(y[0]));
    CHECK(std::isnan(y[1]));
    CHECK(std::signbit(y[1]));
    CHECK(y[2] == INFINITY);
    CHECK(y[3] == -INFINITY);
    CHECK(y[4] == 1.0f);
    CHECK(y[5] == -2.0f);
  }
  const std::vector<float> e4 = roundTrip(Format::kE4m3, specials);  // E4M3FN has no Inf: NaN, sign kept
  CHECK(std::isnan(e4[2]));
  CHECK((std::isnan(e4[3]) && std::signbit(e4[3])));
  CHECK(e4[4] == 1.0f);
  CHECK(e4[5] == -2.0f);
}

TEST_CASE("decodeAdd adds exactly decode's values", "[codec]") {
  const std::vector<float> x = gradientLike(20011, 5);
  const std::vector<float> base = gradientLike(20011, 6);
  for (Format f : allFormats()) {
    INFO(formatName(f));
    std::vector<unsigned char> chunk(encodedBytes(f, x.size()));
    encode(f, x.data(), x.size(), chunk.data(), chunk.size());
    std::vector<float> decoded(x.size());
    decode(f, chunk.data(), chunk.size(), decoded.data(), decoded.size());
    std::vector<float> acc = base;
    decodeAdd(f, chunk.data(), chunk.size(), acc.data(), acc.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) bad += detail::floatBits(acc[i]) != detail::floatBits(base[i] + decoded[i]);
    CHECK(bad == 0);
  }
}

namespace {

// decodeAdd's documented addition (docs/formats.md), written out independently of the library: the
// fp32 sum, except that two finite operands whose sum overflows give FLT_MAX with the sum's sign.
float documentedSum(float acc, float value) {
  const float sum = acc + value;
  if (std::isinf(sum) && std::isfinite(acc) && std::isfinite(value))
    return std::copysign(std::numeric_limits<float>::max(), sum);
  return sum;
}

bool sameValue(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || detail::floatBits(a) == detail::floatBits(b);
}

// One lossy chunk's decodeAdd through one ISA's kernel (the parameters and payload located by the
// chunk layout: header, parameters, then the payload at the end).
void kernelDecodeAdd(const codec::HostKernels& k, Format f, const std::vector<unsigned char>& chunk, std::size_t n,
                     float* acc) {
  const unsigned bits = tableBits(f);
  const std::size_t payloadBytes = bits != 0 ? (n * bits + 7) / 8
                                   : f == Format::kBf16 || f == Format::kFp16 ? 2 * n
                                                                               : n;
  const unsigned char* params = chunk.data() + 16;
  const unsigned char* payload = chunk.data() + chunk.size() - payloadBytes;
  switch (f) {
    case Format::kBf16: return k.decodeAddBf16(payload, n, acc);
    case Format::kFp16: return k.decodeAddF16(payload, n, acc);
    case Format::kFp8: return k.decodeAddFp8(payload, n, nullptr, acc);
    case Format::kFp8s: return k.decodeAddFp8(payload, n, params, acc);
    case Format::kE4m3: return k.decodeAddE4m3(payload, n, params, acc);
    default: break;
  }
  REQUIRE(bits != 0);
  const std::size_t size = std::size_t{1} << (bits - 1);
  std::vector<float> signedTable(std::max<std::size_t>(2 * size, 16), 0.0f);
  std::memcpy(signedTable.data(), params, size * sizeof(float));
  for (std::size_t i = 0; i < size; ++i) signedTable[size + i] = -signedTable[i];
  k.decodeAddTable(payload, n, bits, signedTable.data(), acc);
}

std::vector<const codec::HostKernels*> everyIsa() {
  std::vector<const codec::HostKernels*> isas = {&codec::genericHostKernels()};
  for (const codec::HostKernels* k : {codec::avx2HostKernels(), codec::avx512HostKernels()})
    if (k != nullptr) isas.push_back(k);
  return isas;
}

}  // namespace

TEST_CASE("decodeAdd of every lossy format saturates finite overflowing sums at +-FLT_MAX on every ISA",
          "[codec][isa]") {
  // Chunk values near FLT_MAX (and small ones) against accumulators near FLT_MAX, Inf and NaN: the
  // two cycles have coprime lengths, so every pair meets, in the vector bodies and the scalar tails
  // (two scale blocks and a partial one). A second chunk holds Inf and NaN itself.
  const float flt = std::numeric_limits<float>::max(), inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {1.7e38f, -1.7e38f, 3.0e38f, -3.0e38f, flt, 1.0f, -2.5f};
  const std::vector<float> accs = {flt, -flt, std::ldexp(1.0f, 127), -std::ldexp(1.0f, 127), 1.7e38f, 1.0f, inf, -inf, nan};
  const std::vector<float> specials = {1.7e38f, inf, -3.0e38f, -inf, nan, 2.0f, -nan};
  const std::size_t n = 2 * kScaleBlock + 45;
  for (const std::vector<float>* cycle : {&values, &specials}) {
    std::vector<float> x(n), acc(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = (*cycle)[i % cycle->size()];
      acc[i] = accs[i % accs.size()];
    }
    for (Format f : allFormats()) {
      if (isLossless(f)) continue;
      INFO(formatName(f) << (cycle == &specials ? ", chunk with Inf/NaN" : ""));
      std::vector<unsigned char> chunk(encodedBytes(f, n));
      encode(f, x.data(), n, chunk.data(), chunk.size());
      std::vector<float> decoded(n);
      decode(f, chunk.data(), chunk.size(), decoded.data(), n);
      std::size_t saturated = 0;
      for (std::size_t i = 0; i < n; ++i) saturated += std::isinf(acc[i] + decoded[i]) && std::isfinite(acc[i]) && std::isfinite(decoded[i]);
      // fp16 and raw fp8 decode to at most 65504 / 57344: added to a finite value they never overflow
      // (FLT_MAX's half-ulp is 2^103). Every other format meets overflowing pairs here.
      if (cycle == &values && f != Format::kFp16 && f != Format::kFp8) CHECK(saturated > 0);
      std::vector<float> viaApi = acc;
      decodeAdd(f, chunk.data(), chunk.size(), viaApi.data(), n);
      std::size_t apiWrong = 0;
      for (std::size_t i = 0; i < n; ++i) apiWrong += !sameValue(viaApi[i], documentedSum(acc[i], decoded[i]));
      CHECK(apiWrong == 0);
      // A Table-N chunk holding Inf/NaN decodes to NaN everywhere without reaching the kernels.
      if (tableBits(f) != 0 && cycle == &specials) continue;
      for (const codec::HostKernels* k : everyIsa()) {
        INFO("variant " << k->isa);
        std::vector<float> got = acc;
        kernelDecodeAdd(*k, f, chunk, n, got.data());
        std::size_t wrong = 0, infinite = 0, notApi = 0;
        std::ostringstream firstDifference;
        for (std::size_t i = 0; i < n; ++i) {
          const float want = documentedSum(acc[i], decoded[i]);
          if (!sameValue(got[i], want) && wrong++ == 0)
            UNSCOPED_INFO("element " << i << ": " << acc[i] << " + " << decoded[i] << " gave " << got[i] << ", documented " << want);
          infinite += std::isinf(got[i]) && std::isfinite(acc[i]) && std::isfinite(decoded[i]);
          // NaN + NaN: which operand's sign the result keeps follows the operand order each compiled
          // loop picks (x86 returns the first source's NaN), so only NaN-ness is compared there.
          const bool bothNan = std::isnan(acc[i]) && std::isnan(decoded[i]);
          if ((bothNan ? !sameValue(got[i], viaApi[i]) : detail::floatBits(got[i]) != detail::floatBits(viaApi[i])) &&
              notApi++ == 0)
            firstDifference << "element " << i << ": " << acc[i] << " + " << decoded[i] << " gave bits " << std::hex
                            << detail::floatBits(got[i]) << ", the API " << detail::floatBits(viaApi[i]);
        }
        CHECK(wrong == 0);
        CHECK(infinite == 0);
        INFO(firstDifference.str());
        CHECK(notApi == 0);  // bit-identical across ISAs (the API runs the widest, or ADAPREC_CPU_ISA's)
      }
    }
  }
}

TEST_CASE("fp32 decodeAdd keeps IEEE addition: an overflowing sum is Inf", "[codec][isa]") {
  const float flt = std::numeric_limits<float>::max();
  const std::vector<float> x = {flt, -flt, std::ldexp(1.0f, 127), 1.0f};
  std::vector<unsigned char> chunk(encodedBytes(Format::kFp32, x.size()));
  encode(Format::kFp32, x.data(), x.size(), chunk.data(), chunk.size());
  const std::vector<float> want = {INFINITY, -INFINITY, INFINITY, flt};
  std::vector<float> acc = {flt, -flt, std::ldexp(1.0f, 127), flt};
  decodeAdd(Format::kFp32, chunk.data(), chunk.size(), acc.data(), acc.size());
  CHECK(acc == want);
  for (const codec::HostKernels* k : everyIsa()) {
    INFO("variant " << k->isa);
    std::vector<float> got = {flt, -flt, std::ldexp(1.0f, 127), flt};
    k->decodeAddF32(chunk.data() + 16, x.size(), got.data());
    CHECK(got == want);
  }
}

TEST_CASE("saturatingAdd: finite overflow gives +-FLT_MAX, Inf and NaN operands keep IEEE results", "[codec]") {
  const float flt = std::numeric_limits<float>::max(), inf = std::numeric_limits<float>::infinity();
  const float top = std::ldexp(1.0f, 127);
  CHECK(detail::saturatingAdd(top, top) == flt);
  CHECK(detail::saturatingAdd(-top, -top) == -flt);
  CHECK(detail::saturatingAdd(flt, flt) == flt);
  CHECK(detail::saturatingAdd(flt, -flt) == 0.0f);
  CHECK(detail::saturatingAdd(flt, 1.0f) == flt);
  CHECK(detail::saturatingAdd(1.5f, 2.25f) == 3.75f);
  CHECK(detail::saturatingAdd(inf, 1.0f) == inf);
  CHECK(detail::saturatingAdd(flt, -inf) == -inf);
  CHECK(detail::saturatingAdd(-inf, -inf) == -inf);
  CHECK(std::isnan(detail::saturatingAdd(inf, -inf)));
  CHECK(std::isnan(detail::saturatingAdd(std::numeric_limits<float>::quiet_NaN(), top)));
  CHECK(std::isnan(detail::saturatingAdd(flt, std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("chunks need no alignment", "[codec]") {
  const std::vector<float> x = gradientLike(777, 7);
  for (Format f : allFormats()) {
    INFO(formatName(f));
    const std::size_t bytes = encodedBytes(f, x.size());
    std::vector<unsigned char> aligned(bytes), shifted(bytes + 3);
    encode(f, x.data(), x.size(), aligned.data(), bytes);
    encode(f, x.data(), x.size(), shifted.data() + 3, bytes);
    CHECK(std::memcmp(aligned.data(), shifted.data() + 3, bytes) == 0);
    std::vector<float> a(x.size()), b(x.size());
    decode(f, aligned.data(), bytes, a.data(), a.size());
    decode(f, shifted.data() + 3, bytes, b.data(), b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
}

namespace {

void compareWithGeneric(const codec::HostKernels* fast) {
  const codec::HostKernels& slow = codec::genericHostKernels();
  std::vector<float> x = gradientLike(3 * kScaleBlock + 77, 8);
  x[5] = NAN, x[6] = -INFINITY, x[7] = 1e-42f, x[8] = -0.0f, x[9] = 7e4f;
  const std::size_t n = x.size();
  auto same = [](const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) { return a == b; };
  using Enc16 = void (*)(const float*, std::size_t, std::uint8_t*);
  using Dec16 = void (*)(const std::uint8_t*, std::size_t, float*);
  const std::pair<Enc16, Enc16> enc16[] = {{slow.encodeF16, fast->encodeF16}, {slow.encodeBf16, fast->encodeBf16}};
  const std::pair<Dec16, Dec16> dec16[] = {{slow.decodeF16, fast->decodeF16}, {slow.decodeBf16, fast->decodeBf16},
                                           {slow.decodeAddF16, fast->decodeAddF16}, {slow.decodeAddBf16, fast->decodeAddBf16}};
  for (auto [a, b] : enc16) {
    std::vector<unsigned char> ea(2 * n), eb(2 * n);
    a(x.data(), n, ea.data());
    b(x.data(), n, eb.data());
    CHECK(same(ea, eb));
  }
  std::vector<unsigned char> codes(2 * n);
  std::mt19937 rng(9);
  for (auto& c : codes) c = static_cast<unsigned char>(rng());
  for (auto [a, b] : dec16) {
    std::vector<float> da(n, 1.0f), db(n, 1.0f);
    a(codes.data(), n, da.data());
    b(codes.data(), n, db.data());
    CHECK(std::memcmp(da.data(), db.data(), n * sizeof(float)) == 0);
  }
  // 8-bit floats: the gradient-like data, and every fp32 exponent and sign with the 16 high bits
  // enumerated and the low ones 0 (every fp8 and e4m3 rounding tie), 1 and 0xffff (its neighbours);
  // its first scale blocks hold fp32 subnormals and amax small enough for two scale factors.
  // Decoded: random codes, and every code under every scale exponent the encoder produced.
  std::vector<float> patterns;
  for (std::uint32_t hi = 0; hi < 0x10000; ++hi)
    for (std::uint32_t lo : {0u, 1u, 0xffffu}) patterns.push_back(detail::bitsFloat(hi << 16 | lo));
  patterns.resize(patterns.size() + 13, -3.0f);  // a last block shorter than a vector, with
  patterns[patterns.size() - 2] = INFINITY;       // non-finite values in its scalar tail
  patterns[patterns.size() - 1] = NAN;
  for (const std::vector<float>& input : {x, patterns}) {
    const std::size_t m = input.size();
    INFO("8-bit floats, " << m << " elements");
    std::vector<unsigned char> exps(2 * (m / kScaleBlock + 1)), bytes(m);
    for (std::size_t i = 0; i < m; ++i) bytes[i] = m == n ? codes[i] : static_cast<unsigned char>(i);
    for (bool scaled : {false, true}) {
      for (auto [a, b] : {std::pair{slow.encodeFp8, fast->encodeFp8}, std::pair{slow.encodeE4m3, fast->encodeE4m3}}) {
        std::vector<unsigned char> ea(m), eb(m), xa(exps.size()), xb(exps.size());
        a(input.data(), m, scaled ? xa.data() : nullptr, ea.data());
        b(input.data(), m, scaled ? xb.data() : nullptr, eb.data());
        CHECK(same(ea, eb));
        CHECK(same(xa, xb));
        exps = xa;
      }
      for (auto [a, b] : {std::pair{slow.decodeFp8, fast->decodeFp8}, std::pair{slow.decodeE4m3, fast->decodeE4m3},
                          std::pair{slow.decodeAddFp8, fast->decodeAddFp8}, std::pair{slow.decodeAddE4m3, fast->decodeAddE4m3}}) {
        std::vector<float> da(m, 1.0f), db(m, 1.0f);
        a(bytes.data(), m, scaled ? exps.data() : nullptr, da.data());
        b(bytes.data(), m, scaled ? exps.data() : nullptr, db.data());
        CHECK(std::memcmp(da.data(), db.data(), m * sizeof(float)) == 0);
      }
    }
  }
  for (unsigned bits = 1; bits <= 8; ++bits) {
    const std::size_t k = std::size_t{1} << (bits - 1);
    std::vector<float> mids(k), table(256, 0.0f);  // decoders may read 16 entries
    for (std::size_t i = 0; i < k; ++i) table[i] = std::ldexp(1.0f, static_cast<int>(i) - 12), table[k + i] = -table[i];
    for (std::size_t i = 0; i + 1 < k; ++i) mids[i] = detail::addRn(0.5f * table[i], 0.5f * table[i + 1]);
    // Every midpoint exactly (ties go to the smaller entry) and its float neighbours, both signs;
    // and a chunk long enough (>= 32768) for the generic encoder's bucket lookup at K >= 32.
    std::vector<float> y = x;
    for (std::size_t i = 0; i + 1 < k; ++i) {
      const float m = mids[i];
      for (float v : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY)}) y.push_back(v), y.push_back(-v);
    }
    for (const std::vector<float>& input : {y, gradientLike(40000 + bits, 10 + bits)}) {
      const std::size_t m = input.size();
      INFO("table" << bits << ", " << m << " elements");
      std::vector<unsigned char> ea((m * bits + 7) / 8), eb(ea.size());
      CHECK(slow.encodeTable(input.data(), m, bits, mids.data(), ea.data()) ==
            fast->encodeTable(input.data(), m, bits, mids.data(), eb.data()));
      CHECK(same(ea, eb));
      for (auto [a, b] : {std::pair{slow.decodeTable, fast->decodeTable}, std::pair{slow.decodeAddTable, fast->decodeAddTable}}) {
        std::vector<float> da(m, 1.0f), db(m, 1.0f);
        a(ea.data(), m, bits, table.data(), da.data());
        b(ea.data(), m, bits, table.data(), db.data());
        CHECK(std::memcmp(da.data(), db.data(), m * sizeof(float)) == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE("generic, AVX2 and AVX-512 loops produce identical bytes and values", "[codec][isa]") {
  std::size_t compared = 0;
  for (const codec::HostKernels* fast : {codec::avx2HostKernels(), codec::avx512HostKernels()}) {
    if (fast == nullptr) continue;
    INFO("variant " << fast->isa);
    compareWithGeneric(fast);
    ++compared;
  }
  if (compared == 0) WARN("no vector kernels on this CPU/build: nothing to compare");
}
