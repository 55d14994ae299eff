// Shared by the libFuzzer harnesses: what counts as a finding besides a crash or a sanitizer report.
// A parser may reject input only with adaprec::Error; everything it accepts must satisfy the
// harness's consistency checks. A failed check prints what was violated and aborts, which libFuzzer
// records as a crash (the input is saved as crash-<sha1>).
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>

namespace adaprec::fuzz {

[[noreturn]] inline void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "FUZZ FINDING at %s:%d: %s\n", file, line, what);
  std::fflush(stderr);
  std::abort();
}

// Equal bit patterns, or both NaN (decoders may return any NaN for a NaN code).
inline bool sameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace adaprec::fuzz

#define FUZZ_REQUIRE(cond) \
  do {                     \
    if (!(cond)) ::adaprec::fuzz::fail(__FILE__, __LINE__, #cond); \
  } while (0)
