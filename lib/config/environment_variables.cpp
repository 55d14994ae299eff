#include "config/environment_variables.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "adaprec/format.hpp"

namespace adaprec::detail {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::string validFormatSpecs() { return validFormatNames() + " (each optionally with +ef), fastest"; }
std::string validAlgorithms() { return validAlgorithmNames(); }

// The table. Defaults that code also needs as numbers (kDefaultMinBytes, kDefaultSegmentCount) are
// checked against defaultText by tests/unit/test_environment.cpp; docs/cluster.md's table by the same.
const std::array kVariables = {
    EnvironmentVariable{"ADAPREC_FORMAT", "C API, LD_PRELOAD",
                        "fp32, bf16, fp16, fp8, fp8s, e4m3, table1..table8, table3z..table8z (each optionally "
                        "with +ef), fastest",
                        "fp32", "wire format of intercepted float sums", 0, 0, true, validFormatSpecs},
    EnvironmentVariable{"ADAPREC_ALGO", "C API, LD_PRELOAD",
                        "auto, native, ring, twoshot, rabenseifner, recursive_doubling, hierarchical", "auto",
                        "allreduce algorithm of intercepted float sums", 0, 0, true, validAlgorithms},
    EnvironmentVariable{"ADAPREC_MIN_BYTES", "C API, LD_PRELOAD", "a byte count, a decimal integer from 0 to 2^62",
                        "65536", "float sums smaller than this go to MPI_Allreduce unchanged", 0,
                        std::uint64_t{1} << 62, true},
    EnvironmentVariable{"ADAPREC_STATS", "LD_PRELOAD", "0, 1", "0",
                        "1: rank 0 prints summed counters at MPI_Finalize (when any rank sets it; a program "
                        "linking the C API calls AdaPrec_PrintStats itself)",
                        0, 1, false},
    EnvironmentVariable{"ADAPREC_RANKS_PER_NODE", "every program",
                        "a positive decimal integer below 2^30", "the real nodes (MPI shared-memory domains)",
                        "treat k consecutive ranks as one node (hierarchical, auto)", 1, kGiB - 1, true},
    EnvironmentVariable{"ADAPREC_CPU_ISA", "every program", "generic, avx2, avx512", "the widest the CPU has",
                        "host codec variant (same bytes)", 0, 0, false},
    EnvironmentVariable{"ADAPREC_SEGMENT_COUNT", "every program",
                        "elements per pipelined segment, a decimal integer from 256 to 268435456", "262144",
                        "pipelining segment in elements (testing)", 256, std::uint64_t{1} << 28, true},
    EnvironmentVariable{"ADAPREC_CHECKSUM", "every program", "0, 1", "0",
                        "1: CRC32C with a sequence number on every message between ranks (not the native path)",
                        0, 1, true},
    EnvironmentVariable{"ADAPREC_TIMEOUT", "every program",
                        "seconds, a decimal number from 0 to 1000000 (0: wait forever)", "0",
                        "a wait for a peer longer than this fails on every rank, naming the peer; set on every "
                        "rank or on none (the values may differ)",
                        0, 1000000,
                        false},
    EnvironmentVariable{"ADAPREC_TIMELINE", "every program", "a file path prefix", "unset (no timeline)",
                        "write a Chrome trace of every allreduce to PATH.rank<N>.json per rank (docs/timeline.md)",
                        0, 0, false},
    EnvironmentVariable{"ADAPREC_MAX_QUANTIZATIONS", "every program", "a decimal integer from 1 to 64", "2",
                        "auto's error budget: lossy formats only use algorithms quantizing a value at most this "
                        "many times",
                        1, 64, true},
    EnvironmentVariable{"ADAPREC_CALIBRATION", "every program", "a file path, or a directory (one file per topology)",
                        "unset (probe at first use)",
                        "auto's cost-model calibration: loaded if it matches the job's topology, else probed and "
                        "written there",
                        0, 0, false},
    EnvironmentVariable{"ADAPREC_MESSAGE_BYTES", "every program",
                        "0 (whole messages) or a decimal integer from 1024 to 1073741824",
                        "the transport's (MPI 49152, NCCL 0)",
                        "largest message the algorithms send between nodes; 0: whole segments and ranges",
                        0, std::uint64_t{1} << 30, true},
    EnvironmentVariable{"ADAPREC_DEBUG", "every program", "0, 1", "0",
                        "1: rank 0 prints auto's calibration and each choice with its predicted times (once per "
                        "format and size class)",
                        0, 1, false},
};

bool isDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

bool validMessageBytes(std::uint64_t bytes) {
  return bytes == 0 || (bytes >= 1024 && bytes <= environmentVariable(kEnvMessageBytes).max);
}

std::span<const EnvironmentVariable> environmentVariables() { return kVariables; }

const EnvironmentVariable& environmentVariable(std::string_view name) {
  for (const EnvironmentVariable& v : kVariables)
    if (v.name == name) return v;
  ADAPREC_FAIL(ErrorCode::kInternal, "environment variable " << name << " is not declared");
}

std::optional<std::string> environmentText(std::string_view name) {
  const char* text = std::getenv(std::string(name).c_str());
  if (text == nullptr || *text == '\0') return std::nullopt;
  return std::string(text);
}

void rejectEnvironmentValue(std::string_view name, std::string_view text) {
  const EnvironmentVariable& v = environmentVariable(name);
  // The message stays one line whatever the value holds: control bytes are shown as \xNN.
  std::string shown;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      shown += c;
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      shown += {'\\', 'x', kHex[byte >> 4], kHex[byte & 15]};
    }
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument, name << "='" << shown << "' is invalid; valid values: "
                                                 << (v.validList != nullptr ? v.validList() : std::string(v.valid)));
}

std::uint64_t parseEnvironmentUnsigned(std::string_view name, std::string_view text) {
  const EnvironmentVariable& v = environmentVariable(name);
  std::uint64_t value = 0;
  bool ok = !text.empty();
  for (char c : text) {
    // Overflow-checked: "18446744073709551615" and longer must not wrap into the range.
    const std::uint64_t digit = isDigit(c) ? static_cast<std::uint64_t>(c - '0') : 10;
    ok = ok && digit <= 9 && digit <= v.max && value <= (v.max - digit) / 10;
    if (!ok) break;
    value = value * 10 + digit;
  }
  if (!ok || value < v.min || value > v.max) rejectEnvironmentValue(name, text);
  return value;
}

std::optional<std::uint64_t> readEnvironmentUnsigned(std::string_view name) {
  const std::optional<std::string> text = environmentText(name);
  if (!text) return std::nullopt;
  return parseEnvironmentUnsigned(name, *text);
}

std::optional<bool> readEnvironmentFlag(std::string_view name) {
  const std::optional<std::string> text = environmentText(name);
  if (!text) return std::nullopt;
  if (*text != "0" && *text != "1") rejectEnvironmentValue(name, *text);
  return *text == "1";
}

double parseEnvironmentSeconds(std::string_view name, std::string_view text) {
  const EnvironmentVariable& v = environmentVariable(name);
  // Digits with at most one '.', and at least one digit: no sign, exponent, inf or nan spellings.
  bool ok = !text.empty() && text.find_first_not_of("0123456789.") == std::string_view::npos &&
            text.find('.') == text.rfind('.') && text != ".";
  double value = 0;
  if (ok) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    ok = ec == std::errc() && end == text.data() + text.size() && std::isfinite(value) &&
         value <= static_cast<double>(v.max);
  }
  if (!ok) rejectEnvironmentValue(name, text);
  return value;
}

std::optional<double> readEnvironmentSeconds(std::string_view name) {
  const std::optional<std::string> text = environmentText(name);
  if (!text) return std::nullopt;
  return parseEnvironmentSeconds(name, *text);
}

std::optional<std::string> readEnvironmentChoice(std::string_view name) {
  const std::optional<std::string> text = environmentText(name);
  if (!text) return std::nullopt;
  std::string_view valid = environmentVariable(name).valid;
  while (!valid.empty()) {
    const std::size_t cut = valid.find(", ");
    if (valid.substr(0, cut) == *text) return text;
    valid = cut == std::string_view::npos ? std::string_view{} : valid.substr(cut + 2);
  }
  rejectEnvironmentValue(name, *text);
}

}  // namespace adaprec::detail
