#include "adaprec/format.hpp"

#include <array>

#include "adaprec/error.hpp"

namespace adaprec {
namespace {

struct FormatRow {
  Format format;
  std::string_view name;
  unsigned bits;
};

// The one table of formats. Order = canonical order of `all`.
constexpr std::array<FormatRow, 20> kFormats = {{
    {Format::kFp32, "fp32", 32},
    {Format::kBf16, "bf16", 16},
    {Format::kFp16, "fp16", 16},
    {Format::kFp8, "fp8", 8},
    {Format::kFp8s, "fp8s", 8},
    {Format::kE4m3, "e4m3", 8},
    {Format::kTable1, "table1", 1},
    {Format::kTable2, "table2", 2},
    {Format::kTable3, "table3", 3},
    {Format::kTable4, "table4", 4},
    {Format::kTable5, "table5", 5},
    {Format::kTable6, "table6", 6},
    {Format::kTable7, "table7", 7},
    {Format::kTable8, "table8", 8},
    {Format::kTable3z, "table3z", 3},
    {Format::kTable4z, "table4z", 4},
    {Format::kTable5z, "table5z", 5},
    {Format::kTable6z, "table6z", 6},
    {Format::kTable7z, "table7z", 7},
    {Format::kTable8z, "table8z", 8},
}};

constexpr std::array<Format, kFormats.size()> makeFormatList() {
  std::array<Format, kFormats.size()> list{};
  for (std::size_t i = 0; i < kFormats.size(); ++i) list[i] = kFormats[i].format;
  return list;
}
constexpr std::array<Format, kFormats.size()> kFormatList = makeFormatList();

const FormatRow& row(Format format) {
  for (const FormatRow& r : kFormats) {
    if (r.format == format) return r;
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument,
               "unknown format id " << static_cast<int>(static_cast<std::uint8_t>(format)));
}

constexpr std::string_view kErrorFeedbackSuffix = "+ef";

}  // namespace

std::span<const Format> allFormats() { return kFormatList; }

std::string_view formatName(Format format) { return row(format).name; }

std::optional<Format> tryParseFormat(std::string_view name) {
  for (const FormatRow& r : kFormats) {
    if (r.name == name) return r.format;
  }
  return std::nullopt;
}

std::string validFormatNames() {
  std::string names;
  for (const FormatRow& r : kFormats) {
    if (!names.empty()) names += ", ";
    names += r.name;
  }
  return names;
}

Format parseFormat(std::string_view name) {
  std::optional<Format> format = tryParseFormat(name);
  ADAPREC_CHECK_ARG(format.has_value(),
                    "unknown format '" << name << "'; valid formats: " << validFormatNames());
  return *format;
}

bool isFormatId(std::uint8_t id) {
  for (const FormatRow& r : kFormats) {
    if (static_cast<std::uint8_t>(r.format) == id) return true;
  }
  return false;
}

unsigned bitsPerElement(Format format) { return row(format).bits; }

bool isLossless(Format format) { return format == Format::kFp32; }

unsigned tableBits(Format format) {
  const auto id = static_cast<unsigned>(format);
  if (id >= static_cast<unsigned>(Format::kTable1) && id <= static_cast<unsigned>(Format::kTable8))
    return id - static_cast<unsigned>(Format::kTable1) + 1;
  if (hasZeroCode(format)) return id - static_cast<unsigned>(Format::kTable3z) + 3;
  return 0;
}

bool hasZeroCode(Format format) {
  const auto id = static_cast<unsigned>(format);
  return id >= static_cast<unsigned>(Format::kTable3z) && id <= static_cast<unsigned>(Format::kTable8z);
}

bool isBlockScaled(Format format) { return format == Format::kFp8s || format == Format::kE4m3; }

FormatSpec parseFormatSpec(std::string_view text) {
  FormatSpec spec;
  if (text == "fastest") {
    spec.selection = Selection::kFastest;
    return spec;
  }
  if (text == "adaptive") {
    spec.selection = Selection::kAdaptive;
    return spec;
  }
  std::string_view base = text;
  if (base.size() > kErrorFeedbackSuffix.size() && base.ends_with(kErrorFeedbackSuffix)) {
    base.remove_suffix(kErrorFeedbackSuffix.size());
    spec.errorFeedback = true;
  }
  std::optional<Format> format = tryParseFormat(base);
  ADAPREC_CHECK_ARG(format.has_value(),
                    "unknown format '" << text << "'; valid: " << validFormatNames()
                                       << " (each optionally with +ef), fastest, adaptive (a trainer's choice: adaprec-train and "
                                          "the Python driver)");
  spec.format = *format;
  return spec;
}

std::string toString(const FormatSpec& spec) {
  switch (spec.selection) {
    case Selection::kFastest: return "fastest";
    case Selection::kAdaptive: return "adaptive";
    case Selection::kFixed: break;
  }
  std::string s(formatName(spec.format));
  if (spec.errorFeedback) s += kErrorFeedbackSuffix;
  return s;
}

}  // namespace adaprec
