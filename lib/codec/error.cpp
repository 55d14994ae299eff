#include "adaprec/error.hpp"

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string_view>

namespace adaprec {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kMalformedInput: return "malformed input";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kTransport: return "transport error";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kCuda: return "CUDA error";
  }
  return "unknown error";
}

std::string withoutMessagePrefix(const std::exception& e) {
  std::string message = e.what();
  if (dynamic_cast<const Error*>(&e) != nullptr && message.rfind(kMessagePrefix, 0) == 0)
    message.erase(0, std::string_view(kMessagePrefix).size());
  return message;
}

std::string messageForUsers(const std::exception& e) {
  // The caller names itself ("adaprec-train: ", the C API's "adaprec: "): not twice.
  std::string message = withoutMessagePrefix(e);
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error == nullptr || error->code() == ErrorCode::kInternal) return message;
  const std::string suffix = std::string(" [") + errorCodeName(error->code());
  const std::size_t at = message.rfind(suffix);
  if (at != std::string::npos && message.back() == ']') message.resize(at);
  return message;
}

bool standardStreamsComplete() {
  std::cout.flush();
  std::cerr.flush();
  // Each flush runs whatever the others gave: a failed stdout must not leave stderr unflushed.
  const bool cout = std::cout.good();
  const bool cerr = std::cerr.good();
  const bool out = std::fflush(stdout) == 0 && std::ferror(stdout) == 0;
  const bool err = std::fflush(stderr) == 0 && std::ferror(stderr) == 0;
  return cout && cerr && out && err;
}

namespace detail {

void throwError(ErrorCode code, const std::string& message, const char* condition, const char* file,
                int line) {
  std::ostringstream os;
  os << kMessagePrefix << message;
  // Argument errors are for users: keep them to the message. Everything else also says where.
  if (code != ErrorCode::kInvalidArgument) {
    os << " [" << errorCodeName(code);
    if (condition != nullptr) os << ": " << condition;
    os << " at " << file << ":" << line << "]";
  }
  throw Error(code, os.str());
}

}  // namespace detail
}  // namespace adaprec
