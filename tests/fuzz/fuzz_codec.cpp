// libFuzzer harness: the chunk decoders (inspectChunk, decode, decodeAdd) of every format.
//
// Input, first byte b0:
//   b0 & 0x80: the rest is a chunk, decoded as is (header, size and layout all fuzzed).
//   otherwise: b0 picks the format (allFormats()[b0 % n]), b1 is the low byte of the header's flags,
//   b2..b3 a little-endian element count; the rest is the chunk body (parameters, payload), cut or
//   zero-padded to the size the header implies. This makes valid chunks of every format reachable.
//
// Findings besides crashes and sanitizer reports: an exception other than adaprec::Error; a rejected
// chunk whose output buffer was written; inspectChunk and decode disagreeing; decodeAdd onto zeros
// differing from decode; a chunk decoded with the wrong format or count not raising kMismatch; and,
// for every format but Table-N, decoded values that do not survive encode + decode unchanged (every
// value such a chunk decodes to is representable, so re-encoding must reproduce it; fp32 byte for byte).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "adaprec/format.hpp"
#include "fuzz_check.hpp"

namespace {

using namespace adaprec;

constexpr float kSentinel = -12345.5f;

bool untouched(const std::vector<float>& v, float fill) {
  for (float x : v)
    if (!fuzz::sameFloat(x, fill)) return false;
  return true;
}

// Formats whose every decoded value is one the encoder represents exactly (for fp8s/e4m3 with the
// block's scale it picks itself). Not Table-N: re-encoding builds a new table from percentiles.
bool reencodes(Format format) { return tableBits(format) == 0; }

void expectMismatch(Format format, const std::vector<std::uint8_t>& chunk, std::size_t count) {
  std::vector<float> out(count + 1, kSentinel);
  try {
    decode(format, chunk.data(), chunk.size(), out.data(), count);
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kMismatch);
    FUZZ_REQUIRE(untouched(out, kSentinel));
    return;
  }
  fuzz::fail(__FILE__, __LINE__, "decode accepted a chunk with the wrong format or count");
}

void check(const std::vector<std::uint8_t>& chunk) {
  ChunkInfo info{};
  try {
    info = inspectChunk(chunk.data(), chunk.size());
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kMalformedInput);
    return;
  }
  FUZZ_REQUIRE(info.bytes == chunk.size());
  FUZZ_REQUIRE(encodedBytes(info.format, info.count) == chunk.size());
  FUZZ_REQUIRE(!info.nonFinite || tableBits(info.format) != 0);

  const std::size_t n = info.count;
  std::vector<float> out(n, kSentinel);
  bool decoded = true;
  try {
    decode(info.format, chunk.data(), chunk.size(), out.data(), n);
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kMalformedInput);
    FUZZ_REQUIRE(untouched(out, kSentinel));
    decoded = false;
  }
  std::vector<float> acc(n, 0.0f);
  try {
    decodeAdd(info.format, chunk.data(), chunk.size(), acc.data(), n);
    FUZZ_REQUIRE(decoded);
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kMalformedInput);
    FUZZ_REQUIRE(!decoded);
    FUZZ_REQUIRE(untouched(acc, 0.0f));
  }
  if (!decoded) return;

  for (std::size_t i = 0; i < n; ++i) FUZZ_REQUIRE(fuzz::sameFloat(acc[i], 0.0f + out[i]));
  if (info.nonFinite) {
    for (float v : out) FUZZ_REQUIRE(std::isnan(v));
  }

  const auto formats = allFormats();
  const Format other = formats[(static_cast<std::size_t>(info.format) + 1) % formats.size()];
  if (other != info.format) expectMismatch(other, chunk, n);
  expectMismatch(info.format, chunk, n + 1);

  if (!reencodes(info.format)) return;
  std::vector<std::uint8_t> again(encodedBytes(info.format, n));
  encode(info.format, out.data(), n, again.data(), again.size());
  if (info.format == Format::kFp32) FUZZ_REQUIRE(again == chunk);
  std::vector<float> back(n, kSentinel);
  decode(info.format, again.data(), again.size(), back.data(), n);
  for (std::size_t i = 0; i < n; ++i) FUZZ_REQUIRE(fuzz::sameFloat(back[i], out[i]));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::vector<std::uint8_t> chunk;
  if (data[0] & 0x80) {
    chunk.assign(data + 1, data + size);
  } else {
    if (size < 4) return 0;
    const auto formats = allFormats();
    const Format format = formats[data[0] % formats.size()];
    const std::size_t count = data[2] | (std::size_t{data[3]} << 8);
    chunk.assign(encodedBytes(format, count), 0);
    const std::uint8_t header[8] = {0x41, 0x50, 1, static_cast<std::uint8_t>(format), data[1], 0, 0, 0};
    std::memcpy(chunk.data(), header, sizeof header);
    const std::uint64_t count64 = count;
    std::memcpy(chunk.data() + 8, &count64, sizeof count64);
    const std::size_t body = std::min(size - 4, chunk.size() - kChunkHeaderBytes);
    if (body != 0) std::memcpy(chunk.data() + kChunkHeaderBytes, data + 4, body);
  }
  check(chunk);
  return 0;
}
