// The clock behind AllreduceStats::totalSeconds. A tiny allreduce takes a few hundred nanoseconds, and
// two clock_gettime calls would add a noticeable fraction of that to every call; on x86-64 the
// invariant time-stamp counter costs a few nanoseconds instead, scaled to seconds by a one-off
// calibration against steady_clock. Elsewhere it is steady_clock itself.
#pragma once

#include <cstdint>

namespace adaprec::detail {

std::uint64_t fastClockTicks();
// Seconds per tick (calibrated on first use, which the Communicator constructor triggers).
double fastClockSecondsPerTick();

inline double fastClockSeconds(std::uint64_t startTicks, std::uint64_t endTicks) {
  return endTicks > startTicks ? static_cast<double>(endTicks - startTicks) * fastClockSecondsPerTick()
                               : 0.0;
}

}  // namespace adaprec::detail
