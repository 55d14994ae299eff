// What every C entry point of the explicit APIs (AdaPrec_Comm*, AdaPrec_Controller*) does with an
// exception: it becomes the function's return code and a one-line message for that API's LastError,
// so no C++ exception reaches a C caller or a language binding.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "adaprec/adaprec_mpi.h"
#include "adaprec/error.hpp"

namespace adaprec::detail {

// Runs body; on success clears lastError and returns ADAPREC_OK, else stores "function: message".
template <typename Body>
int guardedCall(std::string& lastError, const char* function, Body&& body) {
  try {
    std::forward<Body>(body)();
    lastError.clear();
    return ADAPREC_OK;
  } catch (const Error& e) {
    lastError = std::string(function) + ": " + e.what();
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    lastError = std::string(function) + ": " + e.what();
    return ADAPREC_ERR_INTERNAL;
  }
}

}  // namespace adaprec::detail
