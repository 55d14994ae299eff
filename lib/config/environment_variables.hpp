// Every ADAPREC_* environment variable the library reads, declared once (name, valid values, default,
// meaning, whether ranks must agree on it), like NCCL_PARAM: the readers below, the error messages,
// the docs consistency test and `adaprec-codec env` all take them from this one table.
//
// Parsing is strict: an unset or empty variable means "default"; anything else must be exactly a
// valid value (no sign, no spaces, no exponent, no trailing characters, within range) or the reader
// throws Error(kInvalidArgument) with one line: "ADAPREC_X='text' is invalid; valid values: ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace adaprec::detail {

struct EnvironmentVariable {
  std::string_view name;
  std::string_view readBy;       // "every program" or "C API, LD_PRELOAD"
  std::string_view valid;        // the valid values, as error messages and docs print them
  std::string_view defaultText;  // the default, as docs print it
  std::string_view meaning;
  std::uint64_t min = 0;         // integer variables: the inclusive range
  std::uint64_t max = 0;
  bool mustAgree = false;        // ranks with different values are refused (Communicator, C API)
  // When set, the exact list for error messages, built from the format or algorithm table (`valid`
  // is then the short form the docs print).
  std::string (*validList)() = nullptr;
};

std::span<const EnvironmentVariable> environmentVariables();
// The declaration of `name`; throws Error(kInternal) for a name not in the table.
const EnvironmentVariable& environmentVariable(std::string_view name);

// The variable's text, or nullopt when unset or empty.
std::optional<std::string> environmentText(std::string_view name);
// [[noreturn]]: throws the one-line Error(kInvalidArgument) for `text` as a value of `name`.
[[noreturn]] void rejectEnvironmentValue(std::string_view name, std::string_view text);

// Strict decimal integer within the declared [min, max].
std::uint64_t parseEnvironmentUnsigned(std::string_view name, std::string_view text);
std::optional<std::uint64_t> readEnvironmentUnsigned(std::string_view name);
// "0" or "1".
std::optional<bool> readEnvironmentFlag(std::string_view name);
// A non-negative decimal number of seconds (digits, optional fraction), at most the declared max.
double parseEnvironmentSeconds(std::string_view name, std::string_view text);
std::optional<double> readEnvironmentSeconds(std::string_view name);
// One of the words of the declared `valid` list (separated by ", ").
std::optional<std::string> readEnvironmentChoice(std::string_view name);

// Names, as constants, of the variables read in more than one place.
inline constexpr std::string_view kEnvSegmentCount = "ADAPREC_SEGMENT_COUNT";
inline constexpr std::string_view kEnvRanksPerNodeName = "ADAPREC_RANKS_PER_NODE";
inline constexpr std::string_view kEnvCpuIsa = "ADAPREC_CPU_ISA";
inline constexpr std::string_view kEnvChecksum = "ADAPREC_CHECKSUM";
inline constexpr std::string_view kEnvTimeout = "ADAPREC_TIMEOUT";
inline constexpr std::string_view kEnvTimeline = "ADAPREC_TIMELINE";
inline constexpr std::string_view kEnvMaxQuantizations = "ADAPREC_MAX_QUANTIZATIONS";
inline constexpr std::string_view kEnvCalibration = "ADAPREC_CALIBRATION";
inline constexpr std::string_view kEnvDebug = "ADAPREC_DEBUG";
inline constexpr std::string_view kEnvMessageBytes = "ADAPREC_MESSAGE_BYTES";
// Whether `bytes` is a valid ADAPREC_MESSAGE_BYTES / CommunicatorOptions::interNodeMessageBytes: 0, or
// from 1 KiB (each message costs a round of the transport's per-message work) to the declared max.
bool validMessageBytes(std::uint64_t bytes);

}  // namespace adaprec::detail
