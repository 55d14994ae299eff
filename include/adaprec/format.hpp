// The wire formats: one table of stable names, used everywhere (CLI, environment, logs).
// docs/formats.md is the normative byte-level specification of each format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace adaprec {

// Numeric ids are part of the wire format (byte 3 of every chunk header): never renumber.
enum class Format : std::uint8_t {
  kFp32 = 1,
  kBf16 = 2,
  kFp16 = 3,
  kFp8 = 4,    // 1-5-2 (E5M2 layout), bias 15, saturating
  kFp8s = 5,   // fp8 with a power-of-two scale per block of kScaleBlock elements
  kE4m3 = 6,   // 1-4-3 OCP FN (max 448), same per-block scale
  kTable1 = 11,
  kTable2 = 12,
  kTable3 = 13,
  kTable4 = 14,
  kTable5 = 15,
  kTable6 = 16,
  kTable7 = 17,
  kTable8 = 18,
  // tableNz: Table-N whose index 0 is reserved for exact zero (table entry 0 is +0 and every
  // non-zero magnitude gets an index >= 1); the other K-1 entries are percentiles of the non-zero
  // magnitudes. N >= 3: with one non-zero entry (N = 2) every non-zero value would decode to it.
  kTable3z = 23,
  kTable4z = 24,
  kTable5z = 25,
  kTable6z = 26,
  kTable7z = 27,
  kTable8z = 28,
};

// All wire formats in their canonical order (the order `all` expands to in tools).
std::span<const Format> allFormats();

std::string_view formatName(Format format);
std::optional<Format> tryParseFormat(std::string_view name);
// Throws Error(kInvalidArgument) naming the valid formats when `name` is not one.
Format parseFormat(std::string_view name);
// "fp32, bf16, fp16, ..." for error messages and --help texts.
std::string validFormatNames();
// Whether `id` is the numeric id of a format (used when validating chunk headers).
bool isFormatId(std::uint8_t id);

// Payload bits per element (fp32 32, fp16 16, fp8 8, tableN N); headers and tables come on top.
unsigned bitsPerElement(Format format);
bool isLossless(Format format);
// N for tableN and tableNz, 0 for every other format.
unsigned tableBits(Format format);
// Whether the format is a tableNz (index 0 = exact zero).
bool hasZeroCode(Format format);
// Whether the format carries per-block power-of-two scales (fp8s, e4m3).
bool isBlockScaled(Format format);

// What a user may ask for where a format is expected: a wire format (optionally with error feedback,
// "table1+ef"), or a per-layer/per-phase choice made by the library ("fastest", "adaptive").
enum class Selection : std::uint8_t { kFixed, kFastest, kAdaptive };

struct FormatSpec {
  Selection selection = Selection::kFixed;
  Format format = Format::kFp32;  // meaningful for kFixed
  bool errorFeedback = false;     // "+ef": keep the quantization residual and add it next time

  friend bool operator==(const FormatSpec&, const FormatSpec&) = default;
};

// Parses "fp8", "table1+ef", "fastest", "adaptive"; throws Error(kInvalidArgument) listing the
// valid spellings otherwise.
FormatSpec parseFormatSpec(std::string_view text);
std::string toString(const FormatSpec& spec);

}  // namespace adaprec
