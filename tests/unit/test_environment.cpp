// The ADAPREC_* table (lib/config): strict parsing of every value, the one-line messages, the
// defaults the code uses, and docs/cluster.md listing every variable with its declared default.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "config/environment_variables.hpp"
#include "transport/eager_message.hpp"

using namespace adaprec;
using namespace adaprec::detail;

namespace {

// The message of what fromEnvironment throws with name=value set, or "" when it accepts it.
std::string failure(const char* name, const char* value) {
  setenv(name, value, 1);
  std::string message;
  try {
    EnvironmentConfig::fromEnvironment();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    message = e.what();
  }
  unsetenv(name);
  return message;
}

}  // namespace

TEST_CASE("numeric ADAPREC_* values are parsed strictly", "[environment]") {
  // Each of these was accepted (or wrapped) by strtoull/strtol before: -1 wrapped to 2^64-1, and
  // 2^64-1 made the segment layout wrap to zero segments (nothing reduced, ranks disagreeing).
  const char* bad[] = {"-1", "18446744073709551615", "18446744073709551616", " -1", " 4096", "4096 ",
                       "+4096", "1e23", "4096abc", "0x1000", "4k", "99999999999999999999999"};
  for (const char* name : {"ADAPREC_SEGMENT_COUNT", "ADAPREC_MIN_BYTES", "ADAPREC_RANKS_PER_NODE"}) {
    for (const char* value : bad) {
      INFO(name << "='" << value << "'");
      const std::string message = failure(name, value);
      CHECK_THAT(message, Catch::StartsWith("adaprec: " + std::string(name) + "='" + value + "' is invalid; valid values: "));
      CHECK(message.find('\n') == std::string::npos);
    }
  }
  // Ranges: segments of fewer than 256 elements (1 took over 60 s for 256 Ki elements), more than
  // 2^28, zero ranks per node.
  CHECK_THAT(failure("ADAPREC_SEGMENT_COUNT", "1"), Catch::Contains("from 256 to 268435456"));
  CHECK_THAT(failure("ADAPREC_SEGMENT_COUNT", "255"), Catch::Contains("is invalid"));
  CHECK_THAT(failure("ADAPREC_SEGMENT_COUNT", "268435457"), Catch::Contains("is invalid"));
  CHECK(failure("ADAPREC_SEGMENT_COUNT", "256").empty());
  CHECK(failure("ADAPREC_SEGMENT_COUNT", "268435456").empty());
  CHECK_THAT(failure("ADAPREC_RANKS_PER_NODE", "0"), Catch::Contains("positive"));
  CHECK(failure("ADAPREC_MIN_BYTES", "0").empty());
  CHECK(failure("ADAPREC_MIN_BYTES", "4611686018427387904").empty());  // 2^62
  CHECK_THAT(failure("ADAPREC_MIN_BYTES", "4611686018427387905"), Catch::Contains("is invalid"));
  CHECK_THAT(failure("ADAPREC_STATS", "2"), Catch::Contains("valid values: 0, 1"));
  CHECK_THAT(failure("ADAPREC_STATS", "1\n2\x1b"), Catch::Contains("ADAPREC_STATS='1\\x0a2\\x1b' is invalid"));
  CHECK_THAT(failure("ADAPREC_STATS", "01"), Catch::Contains("is invalid"));
  CHECK_THAT(failure("ADAPREC_CPU_ISA", "sse"), Catch::Contains("valid values: generic, avx2, avx512"));
  CHECK(failure("ADAPREC_CPU_ISA", "generic").empty());
  // adaptive is a format spec of the trainer, never a valid ADAPREC_FORMAT: the list must not name it.
  const std::string adaptive = failure("ADAPREC_FORMAT", "adaptive");
  CHECK_THAT(adaptive, Catch::Contains("is invalid") && Catch::Contains("fastest"));
  CHECK_THAT(adaptive, !Catch::Contains("adaptive,") && !Catch::Contains("adaptive)"));
}

TEST_CASE("valid ADAPREC_* values reach the configuration", "[environment]") {
  setenv("ADAPREC_SEGMENT_COUNT", "4096", 1);
  setenv("ADAPREC_RANKS_PER_NODE", "2", 1);
  setenv("ADAPREC_MIN_BYTES", "000123", 1);
  const EnvironmentConfig config = EnvironmentConfig::fromEnvironment();
  CHECK(config.communicator.segmentCount == 4096);
  CHECK(config.ranksPerNode == 2);
  CHECK(config.minBytes == 123);
  CHECK_THAT(config.agreedSettings(), Catch::Contains("ADAPREC_SEGMENT_COUNT=4096") &&
                                          Catch::Contains("ADAPREC_RANKS_PER_NODE=2") &&
                                          Catch::Contains("ADAPREC_MIN_BYTES=123"));
  for (const char* name : {"ADAPREC_SEGMENT_COUNT", "ADAPREC_RANKS_PER_NODE", "ADAPREC_MIN_BYTES"}) unsetenv(name);
  setenv("ADAPREC_SEGMENT_COUNT", "", 1);  // empty means unset
  CHECK(CommunicatorOptions::fromEnvironment().segmentCount == kDefaultSegmentCount);
  unsetenv("ADAPREC_SEGMENT_COUNT");
}

TEST_CASE("the table's defaults are the ones the code uses", "[environment]") {
  CHECK(environmentVariable("ADAPREC_MIN_BYTES").defaultText == std::to_string(kDefaultMinBytes));
  CHECK(environmentVariable("ADAPREC_SEGMENT_COUNT").defaultText == std::to_string(kDefaultSegmentCount));
  const EnvironmentConfig defaults = EnvironmentConfig::fromEnvironment();
  CHECK(environmentVariable("ADAPREC_FORMAT").defaultText == toString(defaults.format));
  CHECK(environmentVariable("ADAPREC_ALGO").defaultText == algorithmName(defaults.algorithm));
  CHECK(environmentVariable("ADAPREC_STATS").defaultText == (defaults.stats ? "1" : "0"));
  CHECK_THROWS_AS(environmentVariable("ADAPREC_NO_SUCH"), Error);
}

TEST_CASE("docs/cluster.md lists every ADAPREC_* variable with its declared default", "[environment]") {
  std::ifstream in(ADAPREC_SOURCE_ROOT "/docs/cluster.md");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string docs = text.str();
  for (const EnvironmentVariable& v : environmentVariables()) {
    INFO(v.name);
    const std::string row = "| `" + std::string(v.name) + "` |";
    const std::size_t at = docs.find(row);
    REQUIRE(at != std::string::npos);
    const std::string line = docs.substr(at, docs.find('\n', at) - at);
    CHECK_THAT(line, Catch::Contains(std::string(v.defaultText)));
  }
}

TEST_CASE("ADAPREC_MESSAGE_BYTES", "[environment]") {
  CHECK_FALSE(CommunicatorOptions::fromEnvironment().interNodeMessageBytes.has_value());  // the transport's
  CHECK_THAT(std::string(environmentVariable("ADAPREC_MESSAGE_BYTES").defaultText),
             Catch::Contains("MPI " + std::to_string(kEagerMessageBytes)));
  for (const char* bad : {"1", "1023", "1073741825", "-1", "48k"})
    CHECK_THAT(failure("ADAPREC_MESSAGE_BYTES", bad),
               Catch::Contains(std::string("ADAPREC_MESSAGE_BYTES='") + bad + "' is invalid; valid values: 0 (whole"));
  for (const char* good : {"0", "1024", "65536", "1073741824"}) {
    INFO(good);
    CHECK(failure("ADAPREC_MESSAGE_BYTES", good).empty());
    setenv("ADAPREC_MESSAGE_BYTES", good, 1);
    CHECK(CommunicatorOptions::fromEnvironment().interNodeMessageBytes == std::stoull(good));
    CHECK_THAT(EnvironmentConfig::fromEnvironment().agreedSettings(),
               Catch::Contains(std::string("ADAPREC_MESSAGE_BYTES=") + good));
    unsetenv("ADAPREC_MESSAGE_BYTES");
  }
  CHECK_THAT(EnvironmentConfig::fromEnvironment().agreedSettings(),
             Catch::Contains("ADAPREC_MESSAGE_BYTES=transport"));
}

TEST_CASE("ADAPREC_CHECKSUM and ADAPREC_TIMEOUT", "[environment]") {
  CHECK_THAT(failure("ADAPREC_CHECKSUM", "yes"), Catch::Contains("valid values: 0, 1"));
  for (const char* bad : {"-1", "1e3", "inf", "nan", ".", "1.2.3", " 5", "5s", "1000000.5", "99999999999"})
    CHECK_THAT(failure("ADAPREC_TIMEOUT", bad), Catch::Contains(std::string("ADAPREC_TIMEOUT='") + bad + "' is invalid"));
  setenv("ADAPREC_CHECKSUM", "1", 1);
  setenv("ADAPREC_TIMEOUT", "2.5", 1);
  const CommunicatorOptions options = CommunicatorOptions::fromEnvironment();
  CHECK(options.checksum);
  CHECK(options.timeoutSeconds == 2.5);
  CHECK_THAT(EnvironmentConfig::fromEnvironment().agreedSettings(), Catch::Contains("ADAPREC_CHECKSUM=1"));
  // Whether a timeout is set is agreed (the completion vote), not its value.
  CHECK_THAT(EnvironmentConfig::fromEnvironment().agreedSettings(), Catch::Contains("ADAPREC_TIMEOUT=set"));
  setenv("ADAPREC_TIMEOUT", "7", 1);
  CHECK_THAT(EnvironmentConfig::fromEnvironment().agreedSettings(), Catch::Contains("ADAPREC_TIMEOUT=set"));
  unsetenv("ADAPREC_CHECKSUM");
  unsetenv("ADAPREC_TIMEOUT");
  const CommunicatorOptions defaults = CommunicatorOptions::fromEnvironment();
  CHECK_FALSE(defaults.checksum);
  CHECK(defaults.timeoutSeconds == 0);
  CHECK_THAT(EnvironmentConfig::fromEnvironment().agreedSettings(), Catch::Contains("ADAPREC_TIMEOUT=0"));
}

TEST_CASE("ADAPREC_ALGO=native with a format native cannot carry is refused with the environment", "[environment]") {
  // It used to pass the check and fail every compressed call later, with an internal file:line suffix.
  setenv("ADAPREC_ALGO", "native", 1);
  for (const char* format : {"fp8", "fp8s", "table4", "table1+ef", "e4m3"}) {
    INFO(format);
    const std::string message = failure("ADAPREC_FORMAT", format);
    CHECK_THAT(message, Catch::StartsWith("adaprec: ADAPREC_ALGO='native' carries fp32, bf16 or fp16 only; "
                                          "ADAPREC_FORMAT='" + std::string(format) + "' needs another algorithm"));
    CHECK(message.find('\n') == std::string::npos);
  }
  for (const char* format : {"fp32", "bf16", "fp16", "fp16+ef", "fastest"}) {
    INFO(format);
    CHECK(failure("ADAPREC_FORMAT", format).empty());
  }
  unsetenv("ADAPREC_ALGO");
  CHECK(failure("ADAPREC_FORMAT", "fp8").empty());  // any other algorithm takes it
}
