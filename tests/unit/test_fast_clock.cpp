// The time-stamp counter's calibration (lib/communicator/fast_clock.hpp) on a simulated clock: a
// thread preempted between a reference read and a tick read must not put the preemption into one
// clock only, and the real calibration must agree with steady_clock over a measured interval.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>

#include "communicator/fast_clock.hpp"

using adaprec::detail::calibrateSecondsPerTick;

namespace {

// True time in seconds; a 3 GHz counter; every read costs time; one reference read is followed by a
// preemption of `pauseSeconds` (the `pauseAt`-th reference read, counting from 1).
struct SimulatedMachine {
  double now = 1000.0;
  int referenceReads = 0;
  int pauseAt = 0;
  double pauseSeconds = 0.0;

  std::uint64_t ticks() {
    now += 10e-9;
    return static_cast<std::uint64_t>(now * 3e9);
  }
  double seconds() {
    now += 20e-9;
    const double value = now;
    if (++referenceReads == pauseAt) now += pauseSeconds;
    return value;
  }
};

double calibrate(SimulatedMachine& machine) {
  return calibrateSecondsPerTick([&] { return machine.ticks(); }, [&] { return machine.seconds(); }, 0.002);
}

}  // namespace

TEST_CASE("the counter's calibration is exact on an undisturbed clock", "[fast_clock]") {
  SimulatedMachine machine;
  CHECK(calibrate(machine) == Approx(1.0 / 3e9).epsilon(1e-4));
}

TEST_CASE("a preemption between a reference read and a tick read does not skew the calibration",
          "[fast_clock]") {
  // 100 ms lost right after the first reference read, or after the first read of the end: read
  // unbracketed, the first gave 51x the true seconds per tick.
  for (const int pauseAt : {1, 2, 5}) {
    SimulatedMachine machine;
    machine.pauseAt = pauseAt;
    machine.pauseSeconds = 0.1;
    CAPTURE(pauseAt);
    CHECK(calibrate(machine) == Approx(1.0 / 3e9).epsilon(1e-3));
  }
  // A pause inside the span moves both clocks alike.
  SimulatedMachine machine;
  machine.pauseAt = 20;
  machine.pauseSeconds = 0.1;
  CHECK(calibrate(machine) == Approx(1.0 / 3e9).epsilon(1e-3));
}

TEST_CASE("the calibrated counter agrees with steady_clock over a sleep", "[fast_clock]") {
  // A preemption between a counter read and a clock read lengthens one interval only, so of five
  // tries one must agree within 10 %.
  using Clock = std::chrono::steady_clock;
  double closest = 0.0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::uint64_t ticks0 = adaprec::detail::fastClockTicks();
    const Clock::time_point t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const Clock::time_point t1 = Clock::now();
    const std::uint64_t ticks1 = adaprec::detail::fastClockTicks();
    const double ratio = adaprec::detail::fastClockSeconds(ticks0, ticks1) /
                         std::chrono::duration<double>(t1 - t0).count();
    if (std::abs(ratio - 1.0) < std::abs(closest - 1.0)) closest = ratio;
  }
  CHECK(closest == Approx(1.0).epsilon(0.1));
}
