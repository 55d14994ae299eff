#include "controller/pruning.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "adaprec/error.hpp"
#include "adaprec/format.hpp"

namespace adaprec::controller {

static_assert(kFasterConfidence == 0.90, "fasterQuantile's table is for one-sided 90 %");

double fasterQuantile(double dof) {
  ADAPREC_CHECK_ARG(dof > 0, "t quantile with " << dof << " degrees of freedom");
  // t(0.90, dof) for dof 1..10; beyond, the Cornish-Fisher expansion around the normal quantile
  // (within 0.001 of the exact value from dof 10 on).
  static constexpr double kTable[] = {3.0777, 1.8856, 1.6377, 1.5332, 1.4759, 1.4398, 1.4149, 1.3968, 1.3830, 1.3722};
  if (dof <= 10) return kTable[static_cast<std::size_t>(std::ceil(dof)) - 1];
  const double z = 1.2815516;  // the normal's 90 % quantile
  const double z3 = z * z * z;
  return z + (z3 + z) / (4 * dof) + (5 * z3 * z * z + 16 * z3 + 3 * z) / (96 * dof * dof);
}

namespace {

// Log step times of one candidate for the test: its largest sample left out when it has >= 3.
std::vector<double> testLogs(std::vector<double> seconds) {
  if (seconds.size() >= 3) seconds.erase(std::max_element(seconds.begin(), seconds.end()));
  for (double& s : seconds) s = std::log(s);
  return seconds;
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

}  // namespace

bool notShownFaster(const ControllerConfig& config, const std::vector<std::vector<double>>& samples, std::size_t c,
                    std::size_t than) {
  ADAPREC_CHECK_ARG(samples.size() == config.candidates.size() && c < samples.size() && than < samples.size(),
                    samples.size() << " step-time sets for " << config.candidates.size() << " candidates");
  ADAPREC_CHECK_ARG(!samples[c].empty() && !samples[than].empty(),
                    "no step time for " << config.candidates[samples[c].empty() ? c : than]);
  double squares = 0;  // pooled over every measured candidate, each around its own mean
  double dof = 0;
  std::vector<double> means(samples.size(), 0.0);
  std::vector<double> counts(samples.size(), 0.0);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].empty()) continue;
    for (const double s : samples[i]) {
      ADAPREC_CHECK_ARG(s > 0 && std::isfinite(s), "step time " << s << " of " << config.candidates[i] << " must be > 0");
    }
    const std::vector<double> logs = testLogs(samples[i]);
    means[i] = mean(logs);
    counts[i] = static_cast<double>(logs.size());
    for (const double l : logs) squares += (l - means[i]) * (l - means[i]);
    dof += counts[i] - 1;
  }
  double margin = 0;  // no spread to pool (one sample each): the plain threshold
  if (dof > 0) margin = fasterQuantile(dof) * std::sqrt(squares / dof * (1 / counts[c] + 1 / counts[than]));
  return means[c] - means[than] + margin > std::log1p(-config.minSpeedup);
}

std::vector<bool> notFasterVerdicts(const ControllerConfig& config, const std::vector<std::vector<double>>& samples) {
  const std::size_t n = config.candidates.size();
  const std::size_t base = config.baseline();
  // Bits per value; 0 for a per-layer choice, which is compared with the baseline only.
  std::vector<unsigned> bits(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const FormatSpec spec = parseFormatSpec(config.candidates[i]);
    if (spec.selection == Selection::kFixed) bits[i] = bitsPerElement(spec.format);
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bits[a] > bits[b]; });
  std::vector<bool> pruned(n, false);
  for (const std::size_t c : order) {
    if (c == base) continue;
    pruned[c] = notShownFaster(config, samples, c, base);
    for (std::size_t p = 0; p < n && !pruned[c] && bits[c] > 0; ++p) {
      if (p != base && !pruned[p] && bits[p] > bits[c]) pruned[c] = notShownFaster(config, samples, c, p);
    }
  }
  return pruned;
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
