// libFuzzer harness: the trainer's checkpoint reader (deserializeSnapshot, what readSnapshotFile and
// CheckpointDirectory::loadLatest use after reading the file).
//
// Input, first byte b0:
//   b0 & 1: the rest is a whole checkpoint file, read as is (magic, version, length and CRC fuzzed).
//   otherwise: the rest is the payload (the named sections); the harness wraps it in a valid header
//   and CRC-32 so the section parser is reached past the checksum.
//
// Findings besides crashes and sanitizer reports: an exception other than adaprec::Error; an accepted
// file that serializeSnapshot does not reproduce byte for byte (the layout has one encoding per
// snapshot: fixed section order, no slack).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "adaprec/error.hpp"
#include "fuzz_check.hpp"
#include "trainer/checkpoint.hpp"

namespace {

void append(std::vector<std::uint8_t>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

// The file layout of checkpoint.hpp around a payload: "ADAPRCKP", u32 version, u64 payload bytes,
// payload, u32 CRC-32 of the payload (all little-endian).
std::vector<std::uint8_t> wrap(const std::uint8_t* payload, std::size_t size) {
  std::vector<std::uint8_t> file;
  append(file, "ADAPRCKP", 8);
  const std::uint32_t version = adaprec::trainer::kCheckpointVersion;
  append(file, &version, 4);
  const std::uint64_t bytes = size;
  append(file, &bytes, 8);
  if (size != 0) append(file, payload, size);
  const auto crc = static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), payload, static_cast<uInt>(size)));
  append(file, &crc, 4);
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace adaprec;
  if (size == 0) return 0;
  const std::vector<std::uint8_t> file = (data[0] & 1) ? std::vector<std::uint8_t>(data + 1, data + size)
                                                       : wrap(data + 1, size - 1);
  trainer::TrainerSnapshot snapshot;
  try {
    snapshot = trainer::deserializeSnapshot(file, "fuzz input");
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kMalformedInput);
    return 0;
  }
  // This build writes its own version: an input of that version comes back byte for byte; an older
  // one it reads (version 2) is written as the current version, which must read back the same.
  const std::vector<std::uint8_t> again = trainer::serializeSnapshot(snapshot);
  std::uint32_t version = 0;
  std::memcpy(&version, file.data() + 8, 4);
  if (version == adaprec::trainer::kCheckpointVersion) {
    FUZZ_REQUIRE(again == file);
  } else {
    FUZZ_REQUIRE(trainer::serializeSnapshot(trainer::deserializeSnapshot(again, "fuzz output")) == again);
  }
  return 0;
}
