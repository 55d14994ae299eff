// EnvironmentConfig: the ADAPREC_* variables shared by the C API, the preload library and tools.
#include <cstdlib>
#include <string>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"

namespace adaprec {
namespace {

const char* valueOf(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? text : nullptr;
}

}  // namespace

EnvironmentConfig EnvironmentConfig::fromEnvironment() {
  EnvironmentConfig config;
  if (const char* text = valueOf(kEnvFormat)) {
    try {
      config.format = parseFormatSpec(text);
    } catch (const Error&) {
      ADAPREC_FAIL(ErrorCode::kInvalidArgument,
                   kEnvFormat << "='" << text << "' is invalid; valid values: " << validFormatNames()
                              << " (each optionally with +ef), fastest");
    }
    ADAPREC_CHECK_ARG(config.format.selection != Selection::kAdaptive,
                      kEnvFormat << "='" << text
                                 << "' is invalid here: adaptive needs the trainer's controller; valid "
                                    "values: "
                                 << validFormatNames() << " (each optionally with +ef), fastest");
  }
  if (const char* text = valueOf(kEnvAlgo)) {
    const std::optional<Algorithm> algorithm = tryParseAlgorithm(text);
    ADAPREC_CHECK_ARG(algorithm.has_value(), kEnvAlgo << "='" << text << "' is invalid; valid values: "
                                                      << validAlgorithmNames());
    config.algorithm = *algorithm;
  }
  if (const char* text = valueOf(kEnvMinBytes)) {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    ADAPREC_CHECK_ARG(end != text && *end == '\0' && text[0] != '-',
                      kEnvMinBytes << "='" << text
                                   << "' is invalid; valid values: a byte count (decimal integer >= 0)");
    config.minBytes = static_cast<std::size_t>(value);
  }
  if (const char* text = valueOf(kEnvStats)) {
    const std::string value = text;
    ADAPREC_CHECK_ARG(value == "0" || value == "1",
                      kEnvStats << "='" << text << "' is invalid; valid values: 0, 1");
    config.stats = value == "1";
  }
  return config;
}

AllreduceStats& AllreduceStats::operator+=(const AllreduceStats& other) {
  count += other.count;
  wireBytes += other.wireBytes;
  fp32Bytes += other.fp32Bytes;
  encodeSeconds += other.encodeSeconds;
  decodeSeconds += other.decodeSeconds;
  transferSeconds += other.transferSeconds;
  totalSeconds += other.totalSeconds;
  calls += other.calls;
  return *this;
}

}  // namespace adaprec
