#include "communicator/fast_clock.hpp"

#include <chrono>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace adaprec::detail {

#if defined(__x86_64__)

std::uint64_t fastClockTicks() { return __rdtsc(); }

double fastClockSecondsPerTick() {
  static const double secondsPerTick = [] {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now();
    const std::uint64_t c0 = __rdtsc();
    Clock::time_point t1 = t0;
    while (t1 - t0 < std::chrono::milliseconds(2)) t1 = Clock::now();
    const std::uint64_t c1 = __rdtsc();
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    return c1 > c0 ? seconds / static_cast<double>(c1 - c0) : 1e-9;
  }();
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
