// CLI11 checks for the benchmarks' numeric options whose messages say what is valid
// ("-n: must be an integer >= 1, got '0'"), unlike CLI::PositiveNumber's "Value 0 not in range 0 to
// 1.797...e308". The value is parsed as double (every option checked here fits).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

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

inline CLI::Validator integerAtLeast(double low) {
  return numberCheck(low, std::numeric_limits<double>::infinity(), true);
}

}  // namespace adaprec::bench
