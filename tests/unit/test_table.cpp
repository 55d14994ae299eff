// Table-N: the percentile table follows the spec (exact order statistics for small chunks, the
// stratified sample for large ones), elements code to the nearest entry, codes pack into the
// LSB-first bit stream at every N and awkward count, signs survive, NaN/Inf poison the chunk.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "adaprec/detail/table_spec.hpp"

using namespace adaprec;

namespace {

Format tableFormat(unsigned bits) { return static_cast<Format>(static_cast<unsigned>(Format::kTable1) + bits - 1); }

std::vector<unsigned char> encodeChunk(Format f, const std::vector<float>& x) {
  std::vector<unsigned char> chunk(encodedBytes(f, x.size()));
  encode(f, x.data(), x.size(), chunk.data(), chunk.size());
  return chunk;
}

std::vector<float> tableOf(const std::vector<unsigned char>& chunk, unsigned bits) {
  std::vector<float> t(std::size_t{1} << (bits - 1));
  std::memcpy(t.data(), chunk.data() + kChunkHeaderBytes, t.size() * sizeof(float));
  return t;
}

// The spec's table computed independently: sorted finite |x| of the listed positions, then ranks.
std::vector<float> specTable(const std::vector<float>& x, const std::vector<std::size_t>& positions, unsigned bits) {
  std::vector<double> mags;
  for (std::size_t p : positions) {
    if (std::isfinite(x[p])) mags.push_back(std::fabs(static_cast<double>(x[p])));
  }
  std::sort(mags.begin(), mags.end());
  const std::size_t k = std::size_t{1} << (bits - 1);
  std::vector<float> t(k, 0.0f);
  if (mags.empty()) return t;
  for (std::size_t i = 1; i <= k; ++i) {
    // floor(0.99 * i/K * (m-1)) with integers, as the spec states.
    t[i - 1] = static_cast<float>(mags[(99 * i * (mags.size() - 1)) / (100 * k)]);
  }
  return t;
}

std::uint32_t codeAt(const unsigned char* payload, std::size_t i, unsigned bits) {
  std::uint32_t code = 0;
  for (unsigned b = 0; b < bits; ++b) {
    const std::size_t bit = i * bits + b;
    code |= static_cast<std::uint32_t>((payload[bit / 8] >> (bit % 8)) & 1u) << b;
  }
  return code;
}

std::vector<float> randomData(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

}  // namespace

TEST_CASE("Table-N table: exact percentiles for chunks up to the sample size", "[table]") {
  std::vector<float> x(100);
  for (int i = 0; i < 100; ++i) x[static_cast<std::size_t>(i)] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(100 - i);
  // |x| = 1..100: table1 holds rank floor(0.99*99) = 98 -> 99; table2 ranks 49 and 98 -> 50, 99.
  CHECK(tableOf(encodeChunk(Format::kTable1, x), 1) == std::vector<float>{99.0f});
  CHECK(tableOf(encodeChunk(Format::kTable2, x), 2) == std::vector<float>{50.0f, 99.0f});
  std::vector<std::size_t> all(x.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  for (unsigned bits = 1; bits <= 8; ++bits) {
    INFO("bits " << bits);
    CHECK(tableOf(encodeChunk(tableFormat(bits), x), bits) == specTable(x, all, bits));
  }
}

TEST_CASE("Table-N table: the stratified sample of the spec for large chunks", "[table]") {
  for (std::size_t n : {kTableSampleCount + 1, std::size_t{10007}, std::size_t{1} << 20}) {
    const std::vector<float> x = randomData(n, n);
    std::vector<std::size_t> positions;
    for (std::size_t j = 0; j < kTableSampleCount; ++j) {
      const std::size_t p = detail::tableSamplePosition(j, n, kTableSampleCount);
      REQUIRE(p >= j * n / kTableSampleCount);            // inside stratum j
      REQUIRE(p < (j + 1) * n / kTableSampleCount);
      positions.push_back(p);
    }
    for (unsigned bits : {1u, 4u, 8u}) {
      INFO("n " << n << " bits " << bits);
      CHECK(tableOf(encodeChunk(tableFormat(bits), x), bits) == specTable(x, positions, bits));
    }
  }
}

TEST_CASE("Table-N coding: nearest entry, sign kept, packing at every N and count", "[table]") {
  for (unsigned bits = 1; bits <= 8; ++bits) {
    for (std::size_t n : {0, 1, 2, 7, 8, 9, 15, 16, 17, 511, 512, 513, 1000, 4099, 100003}) {
      INFO("bits " << bits << " n " << n);
      std::vector<float> x = randomData(n, 7 * n + bits);
      if (n > 3) x[1] = 0.0f, x[2] = -0.0f;
      const Format f = tableFormat(bits);
      const auto chunk = encodeChunk(f, x);
      REQUIRE(chunk.size() == kChunkHeaderBytes + ((4 * (std::size_t{1} << (bits - 1)) + 7) / 8 * 8) + (n * bits + 7) / 8);
      const std::vector<float> t = tableOf(chunk, bits);
      const unsigned char* payload = chunk.data() + chunk.size() - (n * bits + 7) / 8;
      std::vector<float> y(n);
      decode(f, chunk.data(), chunk.size(), y.data(), n);
      bool ok = true;
      for (std::size_t i = 0; i < n && ok; ++i) {
        const std::uint32_t code = codeAt(payload, i, bits);
        const std::uint32_t idx = code & ((1u << (bits - 1)) - 1);
        const bool negative = code >> (bits - 1);
        ok &= negative == std::signbit(x[i]);                        // sign bit of the input
        ok &= std::signbit(y[i]) == std::signbit(x[i]);              // sign of the output
        ok &= std::fabs(y[i]) == t[idx];
        const double a = std::fabs(static_cast<double>(x[i]));
        for (float other : t) ok &= std::fabs(a - t[idx]) <= std::fabs(a - other) * (1 + 1e-6) + 1e-30;
        if (!ok) UNSCOPED_INFO("element " << i << " x " << x[i] << " y " << y[i] << " code " << code);
      }
      REQUIRE(ok);
    }
  }
}

TEST_CASE("Table-N: values equal to table entries decode exactly; ties go to the smaller entry", "[table]") {
  // Four distinct magnitudes, so a table4 (8 entries) built on them contains each exactly.
  std::vector<float> x;
  for (int i = 0; i < 400; ++i) x.push_back((i % 3 ? 1.0f : -1.0f) * static_cast<float>(1 << (i % 4)));
  const auto chunk = encodeChunk(Format::kTable4, x);
  std::vector<float> y(x.size());
  decode(Format::kTable4, chunk.data(), chunk.size(), y.data(), y.size());
  CHECK(y == x);
  // Midpoint tie: 1.5 lies halfway between entries 1 and 2 and must take the smaller one.
  std::vector<float> tie(x);
  tie[0] = 1.5f;
  const auto tieChunk = encodeChunk(Format::kTable4, tie);
  decode(Format::kTable4, tieChunk.data(), tieChunk.size(), y.data(), y.size());
  CHECK(y[0] == 1.0f);
}

TEST_CASE("Table-N: NaN or Inf anywhere poisons the chunk; the table ignores them", "[table]") {
  std::vector<float> x = randomData(5000, 3);
  std::vector<float> clean = x;
  x[4321] = NAN;
  x[17] = -INFINITY;
  const auto chunk = encodeChunk(Format::kTable3, x);
  CHECK(inspectChunk(chunk.data(), chunk.size()).nonFinite);
  CHECK_FALSE(inspectChunk(encodeChunk(Format::kTable3, clean).data(), encodedBytes(Format::kTable3, clean.size())).nonFinite);
  std::vector<float> y(x.size(), 1.0f);
  decodeAdd(Format::kTable3, chunk.data(), chunk.size(), y.data(), y.size());
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return std::isnan(v); }));
  // All non-finite: the table is all zeros and the chunk still decodes to NaN.
  std::vector<float> bad(10, NAN);
  const auto badChunk = encodeChunk(Format::kTable2, bad);
  CHECK(tableOf(badChunk, 2) == std::vector<float>{0.0f, 0.0f});
}

namespace {

Format zeroCodedFormat(unsigned bits) {
  return static_cast<Format>(static_cast<unsigned>(Format::kTable3z) + bits - 3);
}

// The tableNz table computed independently: +0, then the 99k/(K-1)-th percentiles (k = 1..K-1) of
// the sorted finite non-zero |x| over all elements (chunks up to the sample size).
std::vector<float> specZeroCodedTable(const std::vector<float>& x, unsigned bits) {
  std::vector<double> mags;
  for (float v : x) {
    if (std::isfinite(v) && v != 0.0f) mags.push_back(std::fabs(static_cast<double>(v)));
  }
  std::sort(mags.begin(), mags.end());
  const std::size_t k = std::size_t{1} << (bits - 1);
  std::vector<float> t(k, 0.0f);
  for (std::size_t i = 1; i < k && !mags.empty(); ++i) t[i] = static_cast<float>(mags[(99 * i * (mags.size() - 1)) / (100 * (k - 1))]);
  return t;
}

}  // namespace

TEST_CASE("tableNz: zeros stay exact zeros, non-zero values never become zero, signs kept", "[table]") {
  for (unsigned bits = 3; bits <= 8; ++bits) {
    for (std::size_t n : {1, 7, 9, 100, 1999, 100003}) {
      INFO("table" << bits << "z, n " << n);
      // Sparse gradient-like data: a third exact zeros (both signs), the rest tiny to large.
      std::vector<float> x = randomData(n, 11 * n + bits);
      for (std::size_t i = 0; i < n; i += 3) x[i] = (i % 2) ? -0.0f : 0.0f;
      if (n > 5) x[4] = 1e-30f, x[5] = -1e-30f;  // far below every percentile: must not vanish
      const Format f = zeroCodedFormat(bits);
      const auto chunk = encodeChunk(f, x);
      const std::vector<float> t = tableOf(chunk, bits);
      if (n <= kTableSampleCount) CHECK(t == specZeroCodedTable(x, bits));
      CHECK(std::bit_cast<std::uint32_t>(t[0]) == 0u);
      std::vector<float> y(n);
      decode(f, chunk.data(), chunk.size(), y.data(), n);
      bool ok = true;
      for (std::size_t i = 0; i < n && ok; ++i) {
        ok &= std::signbit(y[i]) == std::signbit(x[i]);
        ok &= (x[i] == 0.0f) == (y[i] == 0.0f);
        // the nearest of the non-zero entries
        const double a = std::fabs(static_cast<double>(x[i]));
        if (x[i] != 0.0f) {
          for (std::size_t k = 1; k < t.size(); ++k) ok &= std::fabs(a - std::fabs(y[i])) <= std::fabs(a - t[k]) * (1 + 1e-6);
        }
        if (!ok) UNSCOPED_INFO("element " << i << " x " << x[i] << " y " << y[i]);
      }
      REQUIRE(ok);
    }
  }
  // table3z on known data: 0 and the 33rd, 66th and 99th percentiles of the non-zero magnitudes.
  std::vector<float> x;
  for (int i = 0; i < 300; ++i) x.push_back(i % 3 == 0 ? 0.0f : (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i));
  // non-zero |x|: the 200 values i = 1..299 with i % 3 != 0; ranks floor(99k*199/300) = 65, 131, 197
  std::vector<float> mags;
  for (int i = 1; i < 300; ++i) if (i % 3 != 0) mags.push_back(static_cast<float>(i));
  CHECK(tableOf(encodeChunk(Format::kTable3z, x), 3) == std::vector<float>{0.0f, mags[65], mags[131], mags[197]});
}

TEST_CASE("tableNz: an all-zero chunk decodes to zeros; the zero entry is validated", "[table]") {
  std::vector<float> zeros(50, 0.0f);
  const auto chunk = encodeChunk(Format::kTable4z, zeros);
  std::vector<float> y(zeros.size(), 1.0f);
  decode(Format::kTable4z, chunk.data(), chunk.size(), y.data(), y.size());
  CHECK(y == zeros);
  // A table whose entry 0 is not +0 is malformed for tableNz (it would decode zeros to non-zero).
  std::vector<float> x = randomData(64, 5);
  auto bad = encodeChunk(Format::kTable4z, x);
  const float smallest = 1e-9f;
  std::memcpy(bad.data() + kChunkHeaderBytes, &smallest, sizeof smallest);
  try {
    decode(Format::kTable4z, bad.data(), bad.size(), y.data(), x.size());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kMalformedInput);
  }
}
