// CLI11 checks for the benchmarks' numeric options whose messages say what is valid
// ("-n: must be an integer >= 1, got '0'"), unlike CLI::PositiveNumber's "Value 0 not in range 0 to
// 1.797...e308". The value is parsed as double (every option checked here fits).
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>

namespace adaprec::bench {

inline CLI::Validator numberCheck(double low, double high, bool integer) {
  std::ostringstream what;
  what << (integer ? "an integer " : "a number ");
  if (high == std::numeric_limits<double>::infinity()) {
    what << ">= " << low;
  } else {
    what << "in [" << low << ", " << high << "]";
  }
  const std::string valid = what.str();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        const bool ok = CLI::detail::lexical_cast(text, value) && std::isfinite(value) && value >= low &&
                        value <= high && (!integer || value == std::floor(value));
        return ok ? std::string() : "must be " + valid + ", got '" + text + "'";
      },
      valid);
}

// An integer option: plain decimal digits (not "1e3", which passed a numeric check and then failed
// CLI11's conversion with "Could not convert"), at least low and at most high, the largest value the
// option's type holds (an int by default; a seed's uint64_t passes its own: above it CLI11 would
// saturate silently).
inline CLI::Validator integerAtLeast(std::uint64_t low,
                                     std::uint64_t high = static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
  std::ostringstream what;
  what << "an integer in [" << low << ", " << high << "]";
  const std::string valid = what.str();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        std::uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [rest, error] = std::from_chars(text.data(), end, value);
        const bool ok = !text.empty() && error == std::errc() && rest == end && value >= low && value <= high;
        return ok ? std::string() : "must be " + valid + ", got '" + text + "'";
      },
      valid);
}

}  // namespace adaprec::bench
