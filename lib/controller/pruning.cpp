#include "controller/pruning.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "adaprec/error.hpp"

namespace adaprec::controller {

bool notFasterThanBaseline(const ControllerConfig& config, const std::vector<double>& secondsPerStep, std::size_t c) {
  const std::size_t base = config.baseline();
  ADAPREC_CHECK_ARG(secondsPerStep.size() == config.candidates.size() && c < secondsPerStep.size(),
                    secondsPerStep.size() << " step times for " << config.candidates.size() << " candidates");
  return c != base && secondsPerStep[c] > (1 - config.minSpeedup) * secondsPerStep[base];
}

std::vector<std::size_t> speculationOrder(const std::vector<double>& secondsPerStep) {
  std::vector<std::size_t> order(secondsPerStep.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return secondsPerStep[a] < secondsPerStep[b]; });
  return order;
}

double rateCeiling(double startAccuracy, double horizonSteps, double secondsPerStep) {
  return std::max(0.0, 1 - startAccuracy) / (horizonSteps * secondsPerStep);
}

bool dominated(const ControllerConfig& config, const PhaseMeasurements& phase, std::size_t c) {
  // Plan the phase as if only the branches run so far existed (c and the other unspeculated ones
  // marked pruned); its horizons are those planPhase would give now.
  PhaseMeasurements sofar = phase;
  sofar.pruned.resize(config.candidates.size());
  bool anyRun = false;
  for (std::size_t i = 0; i < sofar.observations.size(); ++i) {
    const bool run = sofar.pruned[i].empty() && sofar.observations[i].steps.size() >= 2;
    if (!run && sofar.pruned[i].empty()) sofar.pruned[i] = "pending";
    anyRun |= run;
  }
  if (!anyRun) return false;
  // Plan as if c's branch ran next: its own branch (speculativeSteps of its step time) is then not
  // abandoned speculation when it is chosen, and is when another one is. Without this a candidate met
  // only by its probe would be planned a longer continuation than the branches already run, and its
  // ceiling (rate at its horizon) would be too low.
  const double ownBranch = static_cast<double>(config.speculativeSteps) * phase.observations[c].secondsPerStep;
  sofar.speculationSeconds += std::max(0.0, ownBranch - sofar.branchSeconds[c]);
  sofar.branchSeconds[c] = std::max(sofar.branchSeconds[c], ownBranch);
  const PhasePlan plan = planPhase(config, sofar);
  double startAccuracy = 0;
  double bestLower = 0;  // rates below 0 gain nothing: they prune nothing
  for (std::size_t i = 0; i < plan.decision.verdicts.size(); ++i) {
    if (isPruned(sofar, i)) continue;
    const CandidateVerdict& v = plan.decision.verdicts[i];
    startAccuracy = sofar.observations[i].accuracies.front();
    bestLower = std::max(bestLower, (v.gain - kDominanceZ * v.predictedSd) / v.seconds);
  }
  if (bestLower <= 0) return false;
  return rateCeiling(startAccuracy, plan.decisionConfig.horizons[c], phase.observations[c].secondsPerStep) < bestLower;
}

}  // namespace adaprec::controller
