// libFuzzer harness: format specs and names (parseFormatSpec, tryParseFormat, tryParseAlgorithm), the
// spellings users type into options and ADAPREC_FORMAT / ADAPREC_ALGO.
//
// Findings besides crashes and sanitizer reports: an exception other than adaprec::Error(kInvalid-
// Argument); a spec that does not survive toString and parsing again (parse(toString(parse(s))) must
// equal parse(s), and toString must be a fixed point); a name that parses to a format or algorithm
// whose canonical name parses to something else; tryParse and parse disagreeing.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "adaprec/format.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace adaprec;
  const std::string text(reinterpret_cast<const char*>(data), size);

  std::optional<FormatSpec> spec;
  try {
    spec = parseFormatSpec(text);
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kInvalidArgument);
  }
  if (spec) {
    const std::string printed = toString(*spec);
    FUZZ_REQUIRE(parseFormatSpec(printed) == *spec);
    FUZZ_REQUIRE(toString(parseFormatSpec(printed)) == printed);
    if (spec->selection == Selection::kFixed) {
      FUZZ_REQUIRE(tryParseFormat(formatName(spec->format)) == spec->format);
    }
  }

  const std::optional<Format> format = tryParseFormat(text);
  if (format) {
    FUZZ_REQUIRE(parseFormat(text) == *format);
    FUZZ_REQUIRE(tryParseFormat(formatName(*format)) == *format);
    FUZZ_REQUIRE(isFormatId(static_cast<std::uint8_t>(*format)));
    FUZZ_REQUIRE(spec && spec->selection == Selection::kFixed && spec->format == *format && !spec->errorFeedback);
  } else {
    try {
      parseFormat(text);
      fuzz::fail(__FILE__, __LINE__, "parseFormat accepted what tryParseFormat rejected");
    } catch (const Error& e) {
      FUZZ_REQUIRE(e.code() == ErrorCode::kInvalidArgument);
    }
  }

  const std::optional<Algorithm> algorithm = tryParseAlgorithm(text);
  if (algorithm) {
    FUZZ_REQUIRE(parseAlgorithm(text) == *algorithm);
    FUZZ_REQUIRE(tryParseAlgorithm(algorithmName(*algorithm)) == *algorithm);
  } else {
    try {
      parseAlgorithm(text);
      fuzz::fail(__FILE__, __LINE__, "parseAlgorithm accepted what tryParseAlgorithm rejected");
    } catch (const Error& e) {
      FUZZ_REQUIRE(e.code() == ErrorCode::kInvalidArgument);
    }
  }
  return 0;
}
