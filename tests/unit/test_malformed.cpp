// Decoders reject truncated, oversized and malformed chunks with a clear error and never read or
// write out of bounds (this suite also runs in the address/UB-sanitizer build: tools/test --sanitize).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
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

namespace {

// The message of the Error decode throws, without the "adaprec: " prefix and the " [code: ...]" suffix
// naming the check; empty when decode accepts the chunk. Output untouched on error, as decodeError.
std::string decodeMessage(Format f, const std::vector<unsigned char>& chunk, std::size_t n) {
  std::vector<float> out(n, 42.0f);
  try {
    decode(f, chunk.data(), chunk.size(), out.data(), n);
  } catch (const Error& e) {
    for (float v : out) {
      if (v != 42.0f) return "output written before the error";
    }
    const std::string what = e.what();
    const std::string prefix = "adaprec: ";
    const std::size_t end = what.find(" [malformed input: ");
    if (e.code() != ErrorCode::kMalformedInput || what.rfind(prefix, 0) != 0 || end == std::string::npos) return what;
    return what.substr(prefix.size(), end - prefix.size());
  }
  return {};
}

// A valid fp8s/e4m3 chunk with block's scale exponent replaced by e and its codes by every magnitude
// up to 0x77 (finite under every valid exponent), both signs.
std::vector<unsigned char> withScale(Format f, std::size_t n, std::size_t block, std::int16_t e) {
  auto chunk = validChunk(f, n);
  std::memcpy(chunk.data() + kChunkHeaderBytes + 2 * block, &e, 2);
  const std::size_t payload = chunk.size() - n;
  for (std::size_t i = block * 4096; i < std::min(n, (block + 1) * 4096); ++i)
    chunk[payload + i] = static_cast<unsigned char>((i % 0x78) | (i & 0x100 ? 0x80 : 0));
  return chunk;
}

}  // namespace

TEST_CASE("scale exponents are validated against each format's exact range", "[malformed]") {
  // What encoders write for finite amax: 2^-149 and FLT_MAX give fp8s -164 / 113, e4m3 -157 / 120.
  struct Range {
    Format format;
    int lo;
    int hi;
  };
  for (const Range r : {Range{Format::kFp8s, -164, 113}, Range{Format::kE4m3, -157, 120}}) {
    const std::string name(formatName(r.format));
    INFO(name);
    const std::size_t n = 2 * 4096 + 5;
    for (std::size_t block : {0, 2}) {
      CHECK(decodeMessage(r.format, withScale(r.format, n, block, static_cast<std::int16_t>(r.lo)), n).empty());
      CHECK(decodeMessage(r.format, withScale(r.format, n, block, static_cast<std::int16_t>(r.hi)), n).empty());
      for (int e : {r.lo - 1, r.hi + 1, r.hi + 7, -32768, 32767}) {
        const std::string range = "[" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
        CHECK(decodeMessage(r.format, withScale(r.format, n, block, static_cast<std::int16_t>(e)), n) ==
              name + " chunk: scale exponent " + std::to_string(e) + " of block " + std::to_string(block) +
                  " is outside " + range);
      }
    }
  }
}

TEST_CASE("finite codes that overflow fp32 under the top scale exponent are rejected", "[malformed]") {
  // At the top exponent (amax near FLT_MAX) the largest finite code value * 2^e is 0x77's: fp8s
  // 1.75 * 2^14 * 2^113, e4m3 240 * 2^120. The codes above it (0x78 = 2^15 resp. 256, times 2^e =
  // 2^128) would decode to inf; Inf (fp8s 0x7c) and NaN codes stay valid. One below the top
  // exponent every finite code is valid.
  struct Case {
    Format format;
    int top;
    unsigned firstSpecial;  // Inf or NaN magnitude codes from here on
  };
  for (const Case c : {Case{Format::kFp8s, 113, 0x7c}, Case{Format::kE4m3, 120, 0x7f}}) {
    const std::string name(formatName(c.format));
    const std::size_t n = 4096 + 100;
    for (std::size_t block : {0, 1}) {
      const std::size_t at = block * 4096 + 37;
      for (unsigned magnitude = 0; magnitude < 0x80; ++magnitude) {
        for (unsigned sign : {0u, 0x80u}) {
          const unsigned code = magnitude | sign;
          INFO(name << " block " << block << " code " << code);
          auto chunk = withScale(c.format, n, block, static_cast<std::int16_t>(c.top - 1));
          const std::size_t payload = chunk.size() - n;
          chunk[payload + at] = static_cast<unsigned char>(code);
          CHECK(decodeMessage(c.format, chunk, n).empty());
          chunk = withScale(c.format, n, block, static_cast<std::int16_t>(c.top));
          chunk[payload + at] = static_cast<unsigned char>(code);
          if (magnitude <= 0x77 || magnitude >= c.firstSpecial) {
            CHECK(decodeMessage(c.format, chunk, n).empty());
          } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%x", code);
            CHECK(decodeMessage(c.format, chunk, n) ==
                  name + " chunk: code " + hex + " of element " + std::to_string(at) + " (block " +
                      std::to_string(block) + ") overflows fp32 under scale exponent " + std::to_string(c.top) +
                      " (largest finite magnitude code 0x77)");
          }
        }
      }
    }
  }
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

namespace {
std::string thrownMessage(ErrorCode code, const std::string& text) {
  try {
    ADAPREC_CHECK(false, code, text);
  } catch (const Error& e) {
    return messageForUsers(e);
  }
  return {};
}
}  // namespace

TEST_CASE("messageForUsers drops the check's place, except for an internal error", "[errors]") {
  // What the command-line tools print: "cannot open 'x' for reading", not "... [I/O error: in.good() at ...]".
  // Nor the "adaprec: " every what() begins with: the tool's own name goes before it.
  CHECK(thrownMessage(ErrorCode::kIo, "cannot open 'x'") == "cannot open 'x'");
  CHECK(thrownMessage(ErrorCode::kMalformedInput, "value in [0, 1] expected") == "value in [0, 1] expected");
  CHECK(thrownMessage(ErrorCode::kInvalidArgument, "n [1, 2]") == "n [1, 2]");
  CHECK(thrownMessage(ErrorCode::kIo, "adaprec: twice") == "adaprec: twice");  // only the one prefix
  const std::string internal = thrownMessage(ErrorCode::kInternal, "broken");
  CHECK(internal.rfind("broken [internal error: false at ", 0) == 0);
  CHECK(messageForUsers(std::runtime_error("plain [x]")) == "plain [x]");
}
