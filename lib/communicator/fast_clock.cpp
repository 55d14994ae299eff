#include "communicator/fast_clock.hpp"

#include <chrono>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace adaprec::detail {

#if defined(__x86_64__)

std::uint64_t fastClockTicks() { return __rdtsc(); }

double fastClockSecondsPerTick() {
  static const double secondsPerTick = calibrateSecondsPerTick(
      [] { return static_cast<std::uint64_t>(__rdtsc()); },
      [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); },
      0.002);
  return secondsPerTick;
}

#else

std::uint64_t fastClockTicks() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

double fastClockSecondsPerTick() { return 1e-9; }

#endif

}  // namespace adaprec::detail
