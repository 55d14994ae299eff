// Which candidates a phase speculates (issue 19: the controller's overhead where compression cannot
// pay). A branch costs its steps and evaluations whether or not it is chosen, so a candidate that
// cannot be chosen for good reasons is not run:
//   not_faster  its measured step is not at least ControllerConfig::minSpeedup faster than the
//               baseline's (fp32): compression that saves under that share of the time cannot repay
//               its own speculation, and a lossy format is not expected to learn more per step than
//               fp32. The baseline itself is never pruned this way.
//   dominated   even a perfect branch (accuracy 1 at its horizon) would score a lower rate (accuracy
//               gained per second) than the lower bound (kDominanceZ sd below the predicted mean) of a
//               branch already run. Speculating fastest first lets the fast branches prune the slow.
// Step times are measured once per candidate (ControllerConfig::probeSteps, interleaved across the
// candidates, the median, max over ranks) and
// refreshed by every branch the candidate runs; every input is agreed, so every rank prunes alike.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "controller/phase_plan.hpp"

namespace adaprec::controller {

inline constexpr double kDominanceZ = 1.645;  // one-sided 95 %
inline constexpr const char* kPrunedNotFaster = "not_faster";
inline constexpr const char* kPrunedDominated = "dominated";

// True when candidate c's step (secondsPerStep[c], > 0) is not at least config.minSpeedup faster than
// the baseline's; never for the baseline.
bool notFasterThanBaseline(const ControllerConfig& config, const std::vector<double>& secondsPerStep, std::size_t c);

// The order to speculate the candidates in: by step time, fastest first (ties: the config's order).
std::vector<std::size_t> speculationOrder(const std::vector<double>& secondsPerStep);

// The highest rate a candidate could reach: from accuracy start to 1 in horizon steps of seconds each.
double rateCeiling(double startAccuracy, double horizonSteps, double secondsPerStep);

// True when candidate c (not yet speculated: its observation has only secondsPerStep) is dominated by
// the branches already run in phase, as planPhase plans them. False while no branch has run or when
// no branch is sure to gain (a converged phase prunes nothing).
bool dominated(const ControllerConfig& config, const PhaseMeasurements& phase, std::size_t c);

inline bool isPruned(const PhaseMeasurements& phase, std::size_t c) {
  return !phase.pruned.empty() && !phase.pruned[c].empty();
}

}  // namespace adaprec::controller
