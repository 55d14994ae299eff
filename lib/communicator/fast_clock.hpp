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

// Seconds per tick of `ticks` measured against `seconds` (a reference clock in seconds) over at least
// `spanSeconds`. Each end reads the reference between two tick reads and keeps, of several tries, the
// one whose tick reads are closest together: a thread preempted between a reference read and a tick
// read (a loaded machine) would otherwise put the preemption into one clock only. Unbracketed, one
// such preemption of 100 ms at the start of a 2 ms calibration made every later time 50x too long.
template <typename Ticks, typename Seconds>
double calibrateSecondsPerTick(Ticks&& ticks, Seconds&& seconds, double spanSeconds) {
  struct Reading {
    double seconds;
    double ticks;
  };
  const auto read = [&] {
    Reading best{0.0, 0.0};
    std::uint64_t bestGap = ~std::uint64_t{0};
    for (int attempt = 0; attempt < 8; ++attempt) {
      const std::uint64_t before = ticks();
      const double now = seconds();
      const std::uint64_t after = ticks();
      const std::uint64_t gap = after >= before ? after - before : ~std::uint64_t{0};
      if (gap < bestGap) {
        bestGap = gap;
        best = {now, static_cast<double>(before) + 0.5 * static_cast<double>(gap)};
      }
    }
    return best;
  };
  const Reading start = read();
  while (seconds() - start.seconds < spanSeconds) {
  }
  const Reading end = read();
  return end.ticks > start.ticks ? (end.seconds - start.seconds) / (end.ticks - start.ticks) : 1e-9;
}

}  // namespace adaprec::detail
