// libFuzzer harness: learning-rate schedule specs (LrSchedule::parse), as users type them into
// adaprec-predict --lr-schedule and adaprec-train --lr-schedule.
//
// Findings besides crashes and sanitizer reports: an exception other than adaprec::Error(kInvalid-
// Argument); an accepted schedule whose rate is negative, not finite or above its peak() at any step, a
// peak() that is not finite and positive, a spec() that does not parse to the same rates, or annealing
// areas that are not finite, negative, or decreasing with the step. `file:` specs are skipped: they
// name a file (its reader is the same as fromPoints', which the controller tests cover), and a fuzzer
// must not open arbitrary paths.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace adaprec;
  using predictor::LrSchedule;
  const std::string spec(reinterpret_cast<const char*>(data), size);
  if (spec.rfind("file:", 0) == 0) return 0;
  std::optional<LrSchedule> schedule;
  try {
    schedule = LrSchedule::parse(spec);
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kInvalidArgument);
    return 0;
  }
  const double peak = schedule->peak();
  FUZZ_REQUIRE(std::isfinite(peak) && peak > 0);
  const LrSchedule again = LrSchedule::parse(schedule->spec());
  const double probes[] = {0, 0.5, 1, 2, 3, 7, 10, 50, 99.5, 100, 1e3, 1e6, 1e12};  // steps are >= 0
  for (double step : probes) {
    const double lr = schedule->lrAt(step);
    FUZZ_REQUIRE(std::isfinite(lr) && lr >= 0 && lr <= peak * (1 + 1e-12));
    FUZZ_REQUIRE(again.lrAt(step) == lr);
  }
  std::array<double, 2> previous{0, 0};
  for (double step : {0.0, 1.0, 2.5, 17.0, 64.0}) {  // areas cost O(step)
    const std::array<double, 2> a = schedule->areas(step, predictor::kAnnealingMomentum);
    FUZZ_REQUIRE(std::isfinite(a[0]) && std::isfinite(a[1]) && a[0] >= 0 && a[1] >= 0);
    FUZZ_REQUIRE(a[0] >= previous[0] && a[1] >= previous[1]);
    previous = a;
  }
  return 0;
}
