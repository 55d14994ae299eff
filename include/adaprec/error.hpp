// AdaPrec's one exception type and the checking macros that raise it.
//
// Every failure the library detects is an adaprec::Error carrying an ErrorCode; the message names the
// failed condition, the values involved and file:line. The C API turns these into status codes and
// never lets an exception cross it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace adaprec {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // a caller passed something the API does not accept
  kMalformedInput = 2,   // bytes or files that do not follow their specification
  kMismatch = 3,         // ranks disagree (count, format, ...) or a buffer has the wrong size
  kUnsupported = 4,      // valid request this build or machine cannot serve (no CUDA, ...)
  kTransport = 5,        // MPI/NCCL/loopback failure
  kIo = 6,               // file system
  kInternal = 7,         // a broken invariant: a bug in AdaPrec
  kCuda = 8,             // CUDA runtime error
};

const char* errorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Every Error's what() begins with this, so that a message in a job's mixed output says whose it is.
inline constexpr const char* kMessagePrefix = "adaprec: ";

// The message for a person at a command line, which the caller prefixes with its own name
// ("adaprec-train: ...", the C API's "adaprec: ..."): an Error's what() without kMessagePrefix and
// without the "[code: condition at file:line]" the checks append (argument errors carry none), except
// for an internal error, whose place is what a bug report needs. Any other exception's what() as it is.
std::string messageForUsers(const std::exception& e);

// what() without kMessagePrefix (the check's place kept): for lines that already begin with it.
std::string withoutMessagePrefix(const std::exception& e);

// For command-line tools, last thing before a successful exit: flushes stdout, std::cout, stderr and
// std::cerr and tells whether everything written to them arrived. False on a full disk, /dev/full or
// a file system error: the tool must then exit non-zero (its results are not where the user looks),
// not 0 with an empty or cut file. A closed pipe ends the process with SIGPIPE before this.
bool standardStreamsComplete();

namespace detail {
[[noreturn]] void throwError(ErrorCode code, const std::string& message, const char* condition,
                             const char* file, int line);
}  // namespace detail

}  // namespace adaprec

// ADAPREC_CHECK(cond, code, stream-expression): throws adaprec::Error(code) when cond is false.
// The message is built with operator<<, so values can be printed: ADAPREC_CHECK(n > 0, k, "n=" << n).
#define ADAPREC_CHECK(cond, code, msg)                                                        \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::ostringstream adaprec_check_os_;                                                    \
      adaprec_check_os_ << msg;                                                                \
      ::adaprec::detail::throwError((code), adaprec_check_os_.str(), #cond, __FILE__, __LINE__); \
    }                                                                                          \
  } while (0)

#define ADAPREC_CHECK_ARG(cond, msg) ADAPREC_CHECK(cond, ::adaprec::ErrorCode::kInvalidArgument, msg)

// ADAPREC_FAIL(code, stream-expression): throws unconditionally.
#define ADAPREC_FAIL(code, msg)                                                       \
  do {                                                                                \
    std::ostringstream adaprec_check_os_;                                             \
    adaprec_check_os_ << msg;                                                         \
    ::adaprec::detail::throwError((code), adaprec_check_os_.str(), nullptr, __FILE__, __LINE__); \
  } while (0)
