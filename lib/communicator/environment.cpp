// EnvironmentConfig: the ADAPREC_* variables shared by the C API, the preload library and tools.
#include <sstream>
#include <string>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "codec/host_kernels.hpp"
#include "config/environment_variables.hpp"

namespace adaprec {

CommunicatorOptions CommunicatorOptions::fromEnvironment() {
  CommunicatorOptions options;
  options.segmentCount = static_cast<std::size_t>(
      detail::readEnvironmentUnsigned(detail::kEnvSegmentCount).value_or(kDefaultSegmentCount));
  options.checksum = detail::readEnvironmentFlag(detail::kEnvChecksum).value_or(false);
  options.timeoutSeconds = detail::readEnvironmentSeconds(detail::kEnvTimeout).value_or(0.0);
  options.timelinePath = detail::environmentText(detail::kEnvTimeline).value_or("");
  options.maxQuantizations = static_cast<int>(
      detail::readEnvironmentUnsigned(detail::kEnvMaxQuantizations).value_or(kDefaultMaxQuantizations));
  options.calibrationPath = detail::environmentText(detail::kEnvCalibration).value_or("");
  options.debug = detail::readEnvironmentFlag(detail::kEnvDebug).value_or(false);
  if (const auto bytes = detail::readEnvironmentUnsigned(detail::kEnvMessageBytes)) {
    if (!detail::validMessageBytes(*bytes))
      detail::rejectEnvironmentValue(detail::kEnvMessageBytes, std::to_string(*bytes));
    options.interNodeMessageBytes = static_cast<std::size_t>(*bytes);
  }
  return options;
}

EnvironmentConfig EnvironmentConfig::fromEnvironment() {
  EnvironmentConfig config;
  if (const auto text = detail::environmentText(kEnvFormat)) {
    try {
      config.format = parseFormatSpec(*text);
    } catch (const Error&) {
      detail::rejectEnvironmentValue(kEnvFormat, *text);
    }
    // adaptive is a valid format spec elsewhere (the trainer's controller), never here.
    if (config.format.selection == Selection::kAdaptive) detail::rejectEnvironmentValue(kEnvFormat, *text);
  }
  if (const auto text = detail::environmentText(kEnvAlgo)) {
    const std::optional<Algorithm> algorithm = tryParseAlgorithm(*text);
    if (!algorithm) detail::rejectEnvironmentValue(kEnvAlgo, *text);
    config.algorithm = *algorithm;
  }
  // A combination no call could serve is refused with the rest of the environment, at MPI_Init, not
  // as a failure of every compressed call later.
  if (config.algorithm == Algorithm::kNative && config.format.selection == Selection::kFixed &&
      !detail::nativeSupports(config.format.format))
    ADAPREC_FAIL(ErrorCode::kInvalidArgument,
                 kEnvAlgo << "='native' carries " << detail::nativeFormatNames() << " only; " << kEnvFormat << "='"
                          << toString(config.format) << "' needs another algorithm (auto, ring, twoshot, ...)");
  config.minBytes = static_cast<std::size_t>(detail::readEnvironmentUnsigned(kEnvMinBytes).value_or(kDefaultMinBytes));
  config.stats = detail::readEnvironmentFlag(kEnvStats).value_or(false);
  config.ranksPerNode = static_cast<int>(detail::readEnvironmentUnsigned(kEnvRanksPerNode).value_or(0));
  config.communicator = CommunicatorOptions::fromEnvironment();
  // ADAPREC_CPU_ISA: an invalid or unavailable ISA is refused now, not at the first encode.
  codec::kernelsForIsa(detail::readEnvironmentChoice(detail::kEnvCpuIsa).value_or(""));
  return config;
}

std::string EnvironmentConfig::agreedSettings() const {
  std::ostringstream out;
  out << kEnvFormat << '=' << toString(format) << ' ' << kEnvAlgo << '=' << algorithmName(algorithm) << ' '
      << kEnvMinBytes << '=' << minBytes << ' ' << kEnvRanksPerNode << '='
      << (ranksPerNode > 0 ? std::to_string(ranksPerNode) : std::string("unset")) << ' '
      << detail::kEnvSegmentCount << '=' << communicator.segmentCount << ' ' << detail::kEnvChecksum << '='
      << (communicator.checksum ? 1 : 0) << ' ' << detail::kEnvMessageBytes << '='
      << (communicator.interNodeMessageBytes ? std::to_string(*communicator.interNodeMessageBytes)
                                             : std::string("transport"))
      << ' ' << detail::kEnvTimeout << '=' << (communicator.timeoutSeconds > 0 ? "set" : "0");  // set or not: its value may differ
  return out.str();
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
