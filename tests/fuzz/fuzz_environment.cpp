// libFuzzer harness: the ADAPREC_* environment variables (EnvironmentConfig::fromEnvironment).
//
// Input: lines. Lines 1-4 are the values of ADAPREC_FORMAT, ADAPREC_ALGO, ADAPREC_MIN_BYTES and
// ADAPREC_STATS (a missing line leaves the variable unset, an empty one sets it empty); every further
// line "NAME=value" sets ADAPREC_NAME, so variables added to the parser later are reached too (with a
// dictionary entry for the name). Only the public entry point is called.
//
// Findings besides crashes and sanitizer reports: an exception other than adaprec::Error(kInvalid-
// Argument); an accepted environment that breaks communicator.hpp's contract: unset or empty
// variables keep their defaults, the format is never `adaptive` and prints and parses back to itself,
// a plain decimal ADAPREC_MIN_BYTES is taken as its value (a number too large for size_t is invalid,
// not clamped), ADAPREC_STATS is 0 or 1.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "adaprec/format.hpp"
#include "fuzz_check.hpp"

namespace {

// The "NAME=value" strings this harness put into the environment (putenv keeps the pointer), removed
// again before the next input. Not setenv: glibc keeps every value setenv ever allocated, so a long run
// would grow without bound.
std::map<std::string, std::string>& entries() {
  static std::map<std::string, std::string> strings;
  return strings;
}

void set(const std::string& name, const std::string& value) {
  if (entries().count(name) != 0) return;  // the first setting of a name wins
  std::string& entry = entries()[name];
  entry = name + "=" + value;
  putenv(entry.data());
}

void clearAll() {
  for (const auto& [name, entry] : entries()) unsetenv(name.c_str());
  entries().clear();
}

// The value of a plain decimal string ("0".."9" only), or nullopt when it is not one or overflows.
std::optional<std::size_t> plainDecimal(const std::string& text) {
  if (text.empty()) return std::nullopt;
  std::size_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<std::size_t>(c - '0');
    if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

bool isPlainDigits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace adaprec;
  clearAll();

  std::vector<std::string> lines;
  const std::string input(reinterpret_cast<const char*>(data), size);
  for (std::size_t start = 0; start <= input.size() && !input.empty();) {
    const std::size_t end = std::min(input.find('\n', start), input.size());
    // setenv stops at a NUL byte: cut there so the checks below see what the parser sees.
    std::string line = input.substr(start, end - start);
    line = line.substr(0, line.find('\0'));
    lines.push_back(line);
    start = end + 1;
  }
  const char* fixed[] = {kEnvFormat, kEnvAlgo, kEnvMinBytes, kEnvStats};
  std::string value[4];
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i < 4) {
      set(fixed[i], lines[i]);
      value[i] = lines[i];
    } else if (const std::size_t eq = lines[i].find('='); eq != std::string::npos && eq != 0) {
      const std::string name = "ADAPREC_" + lines[i].substr(0, eq);
      bool isFixed = false;
      for (const char* f : fixed) isFixed = isFixed || name == f;
      // The four above keep the values the checks expect; ADAPREC_CPU_ISA would change the codec.
      if (!isFixed && name != "ADAPREC_CPU_ISA") set(name, lines[i].substr(eq + 1));
    }
  }

  EnvironmentConfig config;
  try {
    config = EnvironmentConfig::fromEnvironment();
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kInvalidArgument);
    return 0;
  }
  FUZZ_REQUIRE(config.format.selection != Selection::kAdaptive);
  FUZZ_REQUIRE(parseFormatSpec(toString(config.format)) == config.format);
  if (value[0].empty()) FUZZ_REQUIRE(config.format == FormatSpec{});
  if (value[1].empty()) FUZZ_REQUIRE(config.algorithm == Algorithm::kAuto);
  if (value[2].empty()) FUZZ_REQUIRE(config.minBytes == kDefaultMinBytes);
  // Strict parsing: only plain decimal digits are ever accepted (no sign, space, exponent or suffix).
  if (!value[2].empty()) FUZZ_REQUIRE(isPlainDigits(value[2]));
  if (isPlainDigits(value[2])) {
    const std::optional<std::size_t> expected = plainDecimal(value[2]);
    FUZZ_REQUIRE(expected.has_value());  // accepted although it does not fit in size_t
    FUZZ_REQUIRE(config.minBytes == *expected);
  }
  if (value[3].empty()) FUZZ_REQUIRE(!config.stats);
  return 0;
}
