// Decoders reject truncated, oversized and malformed chunks with a clear error and never read or
// write out of bounds (this suite also runs in the address/UB-sanitizer build: tools/test --sanitize).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"

using namespace adaprec;

namespace {

std::vector<unsigned char> validChunk(Format f, std::size_t n) {
  std::vector<float> x(n);
  std::mt19937 rng(static_cast<unsigned>(n));
  std::normal_distribution<float> normal(0.0f, 0.01f);
  for (float& v : x) v = normal(rng);
  std::vector<unsigned char> chunk(encodedBytes(f, n));
  encode(f, x.data(), n, chunk.data(), chunk.size());
  return chunk;
}

ErrorCode decodeError(Format f, const unsigned char* p, std::size_t bytes, std::size_t n) {
  std::vector<float> out(n + 1, 42.0f);  // one guard element past the end
  try {
    decode(f, p, bytes, out.data(), n);
  } catch (const Error& e) {
    // dst untouched on error, guard untouched always
    for (float v : out) {
      if (v != 42.0f) return ErrorCode::kInternal;
    }
    return e.code();
  }
  return out[n] == 42.0f ? ErrorCode::kOk : ErrorCode::kInternal;
}

}  // namespace

TEST_CASE("every truncation and an oversized buffer are rejected", "[malformed]") {
  for (Format f : allFormats()) {
    for (std::size_t n : {0, 1, 9, 4097}) {
      INFO(formatName(f) << " n " << n);
      const auto chunk = validChunk(f, n);
      REQUIRE(decodeError(f, chunk.data(), chunk.size(), n) == ErrorCode::kOk);
      for (std::size_t len = 0; len < chunk.size(); ++len) {
        // Copy into an exact-size heap buffer so a sanitizer sees any read past `len`.
        std::vector<unsigned char> cut(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(len));
        const ErrorCode code = decodeError(f, cut.data(), cut.size(), n);
        if (code != ErrorCode::kMalformedInput) FAIL("truncated to " << len << " bytes: code " << int(code));
      }
      std::vector<unsigned char> longer(chunk);
      longer.push_back(0);
      CHECK(decodeError(f, longer.data(), longer.size(), n) == ErrorCode::kMalformedInput);
    }
  }
}

TEST_CASE("header fields are validated", "[malformed]") {
  const auto chunk = validChunk(Format::kFp16, 10);
  auto corrupt = [&](std::size_t offset, unsigned char value) {
    auto c = chunk;
    c[offset] = value;
    return decodeError(Format::kFp16, c.data(), c.size(), 10);
  };
  CHECK(corrupt(0, 'X') == ErrorCode::kMalformedInput);  // magic
  CHECK(corrupt(2, 9) == ErrorCode::kMalformedInput);    // version
  CHECK(corrupt(3, 99) == ErrorCode::kMalformedInput);   // unknown format id
  CHECK(corrupt(4, 1) == ErrorCode::kMalformedInput);    // flags (non-finite is Table-N only)
  CHECK(corrupt(8, 11) == ErrorCode::kMalformedInput);   // count disagrees with the size
  // Another format or count than the caller expects: a mismatch (ranks disagree), not corruption.
  CHECK(decodeError(Format::kBf16, chunk.data(), chunk.size(), 10) == ErrorCode::kMismatch);
  CHECK(decodeError(Format::kFp16, chunk.data(), chunk.size(), 11) == ErrorCode::kMismatch);
  const auto eleven = validChunk(Format::kFp16, 11);
  CHECK(decodeError(Format::kFp16, eleven.data(), eleven.size(), 10) == ErrorCode::kMismatch);
}

TEST_CASE("scales, tables and padding are validated", "[malformed]") {
  auto scaled = validChunk(Format::kFp8s, 100);
  const std::int16_t badExp = 300;
  std::memcpy(scaled.data() + kChunkHeaderBytes, &badExp, 2);
  CHECK(decodeError(Format::kFp8s, scaled.data(), scaled.size(), 100) == ErrorCode::kMalformedInput);
  scaled = validChunk(Format::kFp8s, 100);
  scaled[kChunkHeaderBytes + 5] = 1;  // padding after the single scale
  CHECK(decodeError(Format::kFp8s, scaled.data(), scaled.size(), 100) == ErrorCode::kMalformedInput);

  auto table = validChunk(Format::kTable2, 9);
  const float negative = -1.0f, inf = INFINITY, big = 1e10f;
  auto withEntry = [&](std::size_t k, float v) {
    auto c = table;
    std::memcpy(c.data() + kChunkHeaderBytes + 4 * k, &v, 4);
    return decodeError(Format::kTable2, c.data(), c.size(), 9);
  };
  CHECK(withEntry(0, negative) == ErrorCode::kMalformedInput);
  CHECK(withEntry(1, inf) == ErrorCode::kMalformedInput);
  CHECK(withEntry(0, big) == ErrorCode::kMalformedInput);  // not non-decreasing
  auto padded = table;
  padded.back() |= 0x80;  // 9 codes x 2 bits = 18 bits: bits 2..7 of the last byte are padding
  CHECK(decodeError(Format::kTable2, padded.data(), padded.size(), 9) == ErrorCode::kMalformedInput);
}

TEST_CASE("random byte flips are rejected or decoded, never out of bounds", "[malformed]") {
  std::mt19937 rng(12345);
  std::size_t rejected = 0, accepted = 0;
  for (Format f : allFormats()) {
    const std::size_t n = 1000;
    const auto chunk = validChunk(f, n);
    for (int trial = 0; trial < 300; ++trial) {
      auto c = chunk;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) c[rng() % c.size()] ^= static_cast<unsigned char>(1u << (rng() % 8));
      const ErrorCode code = decodeError(f, c.data(), c.size(), n);
      REQUIRE((code == ErrorCode::kOk || code == ErrorCode::kMalformedInput || code == ErrorCode::kMismatch));
      (code == ErrorCode::kOk ? accepted : rejected) += 1;
    }
  }
  CHECK(rejected > 0);
  CHECK(accepted > 0);  // payload flips are valid data: both outcomes must occur
}

TEST_CASE("encode rejects a too-small destination and null pointers", "[malformed]") {
  std::vector<float> x(10, 1.0f);
  std::vector<unsigned char> small(encodedBytes(Format::kFp8, 10) - 1);
  CHECK_THROWS_AS(encode(Format::kFp8, x.data(), 10, small.data(), small.size()), Error);
  CHECK_THROWS_AS(encode(Format::kFp8, nullptr, 10, small.data(), 1000), Error);
  CHECK_THROWS_AS(decode(Format::kFp8, nullptr, 0, x.data(), 10), Error);
}
