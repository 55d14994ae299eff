#include "controller/pruning.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "adaprec/error.hpp"
#include "adaprec/format.hpp"
#include "algorithm/error_model.hpp"
#include "stats/t_quantile.hpp"

namespace adaprec::controller {

static_assert(kFasterConfidence == stats::kOneSided90, "fasterQuantile is t's one-sided 90 % quantile");

double fasterQuantile(double dof) { return stats::tQuantile90(dof); }

double median(std::vector<double> seconds) {
  ADAPREC_CHECK_ARG(!seconds.empty(), "the median of no step times");
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  return n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
}

namespace {

// What the not_faster test needs of every candidate's samples, computed once per verdict set: each
// measured candidate's mean log step time (largest sample left out when it has >= 3) and count, and the
// spread pooled over all of them, each around its own mean.
struct LogStepTimes {
  std::vector<double> means, counts;
  double pooledVariance = 0, dof = 0;
};

LogStepTimes logStepTimes(const ControllerConfig& config, const std::vector<std::vector<double>>& samples) {
  ADAPREC_CHECK_ARG(samples.size() == config.candidates.size(),
                    samples.size() << " step-time sets for " << config.candidates.size() << " candidates");
  LogStepTimes t;
  t.means.assign(samples.size(), 0.0);
  t.counts.assign(samples.size(), 0.0);
  double squares = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].empty()) continue;
    std::vector<double> logs = samples[i];
    for (const double s : logs) {
      ADAPREC_CHECK_ARG(s > 0 && std::isfinite(s), "step time " << s << " of " << config.candidates[i] << " must be > 0");
    }
    if (logs.size() >= 3) logs.erase(std::max_element(logs.begin(), logs.end()));
    for (double& l : logs) l = std::log(l);
    t.counts[i] = static_cast<double>(logs.size());
    t.means[i] = std::accumulate(logs.begin(), logs.end(), 0.0) / t.counts[i];
    for (const double l : logs) squares += (l - t.means[i]) * (l - t.means[i]);
    t.dof += t.counts[i] - 1;
  }
  if (t.dof > 0) t.pooledVariance = squares / t.dof;
  return t;
}

// The test of c against `than` (both measured): c is shown faster when gap + margin <= 0.
double testGap(const ControllerConfig& config, const LogStepTimes& t, std::size_t c, std::size_t than) {
  return t.means[c] - t.means[than] - std::log1p(-config.minSpeedup);
}
double testMargin(const LogStepTimes& t, std::size_t c, std::size_t than) {
  if (t.dof <= 0) return 0;  // no spread to pool (one sample each): the plain threshold
  return fasterQuantile(t.dof) * std::sqrt(t.pooledVariance * (1 / t.counts[c] + 1 / t.counts[than]));
}

bool notShownFaster(const ControllerConfig& config, const LogStepTimes& t, std::size_t c, std::size_t than) {
  ADAPREC_CHECK_ARG(c < t.counts.size() && than < t.counts.size(), "candidate " << c << " or " << than << " of "
                                                                                 << t.counts.size());
  ADAPREC_CHECK_ARG(t.counts[c] > 0 && t.counts[than] > 0,
                    "no step time for " << config.candidates[t.counts[c] > 0 ? than : c]);
  return testGap(config, t, c, than) + testMargin(t, c, than) > 0;
}

// Bits per value of each candidate; 0 for a per-layer choice, which is compared with the baseline only.
std::vector<unsigned> candidateBits(const ControllerConfig& config) {
  std::vector<unsigned> bits(config.candidates.size(), 0);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const FormatSpec spec = parseFormatSpec(config.candidates[i]);
    if (spec.selection == Selection::kFixed) bits[i] = bitsPerElement(spec.format);
  }
  return bits;
}

// Whether notFasterVerdicts may test c against `than` (whether it does depends on `than` not being
// pruned itself).
bool mayBeTested(const std::vector<unsigned>& bits, std::size_t base, std::size_t c, std::size_t than) {
  if (c == base || c == than) return false;
  return than == base || (bits[c] > 0 && bits[than] > bits[c]);
}

}  // namespace

bool notShownFaster(const ControllerConfig& config, const std::vector<std::vector<double>>& samples, std::size_t c,
                    std::size_t than) {
  return notShownFaster(config, logStepTimes(config, samples), c, than);
}

std::vector<bool> notFasterVerdicts(const ControllerConfig& config, const std::vector<std::vector<double>>& samples) {
  const std::size_t n = config.candidates.size();
  const std::size_t base = config.baseline();
  const std::vector<unsigned> bits = candidateBits(config);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bits[a] > bits[b]; });
  const LogStepTimes times = logStepTimes(config, samples);
  std::vector<bool> pruned(n, false);
  for (const std::size_t c : order) {
    if (c == base) continue;
    pruned[c] = notShownFaster(config, times, c, base);
    for (std::size_t p = 0; p < n && !pruned[c]; ++p) {
      if (p != base && !pruned[p] && mayBeTested(bits, base, c, p)) pruned[c] = notShownFaster(config, times, c, p);
    }
  }
  return pruned;
}

namespace {

bool testSettled(const ControllerConfig& config, const LogStepTimes& t, std::size_t c, std::size_t than) {
  const double gap = std::abs(testGap(config, t, c, than));
  return gap >= kSettledMargins * testMargin(t, c, than) && gap >= std::log(kSettledRatio);
}

// Whether every test between c and d (both measured) that notFasterVerdicts may make is settled.
bool pairSettled(const ControllerConfig& config, const LogStepTimes& t, const std::vector<unsigned>& bits,
                 std::size_t base, std::size_t c, std::size_t d) {
  return !(mayBeTested(bits, base, c, d) && !testSettled(config, t, c, d)) &&
         !(mayBeTested(bits, base, d, c) && !testSettled(config, t, d, c));
}

}  // namespace

bool probeSettled(const ControllerConfig& config, const std::vector<std::vector<double>>& samples, std::size_t c) {
  const LogStepTimes t = logStepTimes(config, samples);
  ADAPREC_CHECK_ARG(c < t.counts.size() && t.counts[c] > 0, "candidate " << c << " has no step time to settle");
  if (t.dof <= 0) return false;
  const std::size_t base = config.baseline();
  const std::vector<unsigned> bits = candidateBits(config);
  for (std::size_t d = 0; d < t.counts.size(); ++d) {
    if (d == c || t.counts[d] == 0) continue;
    if (!pairSettled(config, t, bits, base, c, d)) return false;
  }
  return true;
}

bool probeContested(const ControllerConfig& config, const std::vector<std::vector<double>>& samples, std::size_t c) {
  const LogStepTimes t = logStepTimes(config, samples);
  ADAPREC_CHECK_ARG(c < t.counts.size() && t.counts[c] > 0, "candidate " << c << " has no step time to contest");
  const std::size_t base = config.baseline();
  if (t.dof <= 0 || c == base || t.counts[base] == 0 || notShownFaster(config, t, c, base)) return false;
  const std::vector<unsigned> bits = candidateBits(config);
  for (std::size_t d = 0; d < t.counts.size(); ++d) {
    if (d == c || d == base || t.counts[d] == 0 || notShownFaster(config, t, d, base)) continue;
    if (!pairSettled(config, t, bits, base, c, d)) return true;
  }
  return false;
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

bool mayStandIn(const ControllerConfig& config, std::size_t i) {
  const std::size_t base = config.baseline();
  if (i == base || !(parseFormatSpec(config.candidates[base]) == FormatSpec{})) return false;  // fp32 only
  const FormatSpec spec = parseFormatSpec(config.candidates[i]);
  if (spec.selection != Selection::kFixed || spec.errorFeedback) return false;
  const detail::FormatErrorModel model = detail::formatErrorModel(spec.format);
  return model.scale == detail::ErrorScale::kElement && model.relative <= kStandInRelativeError;
}

std::size_t soleCandidate(const ControllerConfig& config, const std::vector<std::string>& pruned,
                          const std::vector<double>& secondsPerStep) {
  const std::size_t n = config.candidates.size();
  ADAPREC_CHECK_ARG(pruned.size() == n && secondsPerStep.size() == n,
                    pruned.size() << " pruning marks and " << secondsPerStep.size() << " step times for " << n
                                  << " candidates");
  std::vector<std::size_t> left;
  for (std::size_t i = 0; i < n; ++i) {
    if (pruned[i].empty()) left.push_back(i);
  }
  if (left.size() == 1) return left[0];
  if (left.size() != 2) return kNoBaseline;
  const std::size_t base = config.baseline();
  const std::size_t other = left[0] == base ? left[1] : left[1] == base ? left[0] : kNoBaseline;
  if (other == kNoBaseline || !mayStandIn(config, other)) return kNoBaseline;
  // Speculated first only when strictly faster (speculationOrder keeps the config's order on ties).
  return secondsPerStep[other] < secondsPerStep[base] ? other : kNoBaseline;
}

std::size_t standIn(const ControllerConfig& config, const PhaseMeasurements& phase) {
  for (std::size_t i = 0; i < config.candidates.size() && i < phase.observations.size(); ++i) {
    if (isPruned(phase, i) || phase.observations[i].steps.size() < 2) continue;
    if (mayStandIn(config, i)) return i;
  }
  return kNoBaseline;
}

namespace {

// The phase as the rule would plan it if only the branches run so far existed (c and the other
// unspeculated candidates marked pending) and c's branch ran next; false while no branch has run.
bool planSoFar(const ControllerConfig& config, const PhaseMeasurements& phase, std::size_t c,
               PhaseMeasurements& sofar, PhasePlan& plan) {
  sofar = phase;
  sofar.pruned.resize(config.candidates.size());
  bool anyRun = false;
  for (std::size_t i = 0; i < sofar.observations.size(); ++i) {
    const bool run = sofar.pruned[i].empty() && sofar.observations[i].steps.size() >= 2;
    if (!run && sofar.pruned[i].empty()) sofar.pruned[i] = "pending";
    anyRun |= run;
  }
  if (!anyRun) return false;
  // c's own branch (speculativeSteps of its step time) is then not abandoned speculation when it is
  // chosen, and is when another one is. Without this a candidate met only by its probe would be
  // planned a longer continuation than the branches already run, and its ceiling (rate at its
  // horizon) would be too low.
  const double ownBranch = static_cast<double>(config.speculativeSteps) * phase.observations[c].secondsPerStep;
  sofar.speculationSeconds += std::max(0.0, ownBranch - sofar.branchSeconds[c]);
  sofar.branchSeconds[c] = std::max(sofar.branchSeconds[c], ownBranch);
  plan = planPhase(config, sofar);
  return true;
}

}  // namespace

namespace {

bool dominatedIn(const PhaseMeasurements& sofar, const PhasePlan& plan, std::size_t c) {
  double startAccuracy = 0;
  double bestLower = 0;  // rates below 0 gain nothing: they prune nothing
  for (std::size_t i = 0; i < plan.decision.verdicts.size(); ++i) {
    if (isPruned(sofar, i)) continue;
    const CandidateVerdict& v = plan.decision.verdicts[i];
    startAccuracy = sofar.observations[i].accuracies.front();
    bestLower = std::max(bestLower, (v.gain - kDominanceZ * v.predictedSd) / v.seconds);
  }
  if (bestLower <= 0) return false;
  return rateCeiling(startAccuracy, plan.decisionConfig.horizons[c], sofar.observations[c].secondsPerStep) < bestLower;
}

std::size_t boundedIn(const ControllerConfig& config, const PhaseMeasurements& sofar, const PhasePlan& plan,
                      std::size_t c) {
  const std::vector<unsigned> bits = candidateBits(config);
  if (bits[c] == 0) return kNoBaseline;
  // c judged as the rule would judge it beside the branches run: over their common seconds, in its own
  // steps. A plan of c's shorter than those seconds would shorten everyone's: no bound then.
  const double seconds = plan.judgedSeconds;
  const double secondsPerStep = sofar.observations[c].secondsPerStep;
  if (plan.decisionConfig.horizons[c] * secondsPerStep < seconds) return kNoBaseline;
  const double steps = seconds / secondsPerStep;
  // The run branches with their judged horizons: the same fit as the plan's (decide's memory).
  std::vector<std::size_t> run;
  std::vector<CandidateObservation> observed;
  DecisionConfig ask = plan.decisionConfig;
  ask.rule = DecisionRule::kGainPerSecond;
  ask.baseline = kNoBaseline;
  ask.standIn = kNoBaseline;
  ask.baselineRateCeiling = 0;
  ask.horizons.clear();
  double best = 0;  // rates below 0 gain nothing: they bound nothing
  for (std::size_t i = 0; i < plan.decision.verdicts.size(); ++i) {
    if (isPruned(sofar, i)) continue;
    const CandidateVerdict& v = plan.decision.verdicts[i];
    run.push_back(i);
    observed.push_back(sofar.observations[i]);
    ask.horizons.push_back(v.horizonSteps);
    best = std::max(best, v.gain / v.seconds);
  }
  if (best <= 0) return kNoBaseline;
  std::size_t by = kNoBaseline;
  for (std::size_t k = 0; k < run.size(); ++k) {
    const std::size_t p = run[k];
    if (bits[p] <= bits[c]) continue;
    if (steps <= observed[k].steps.back()) return kNoBaseline;
    DecisionConfig atC = ask;
    atC.horizons[k] = steps;
    const CandidateVerdict ceiling = decide(observed, atC).verdicts[k];
    if (ceiling.gain / seconds > best) return kNoBaseline;
    if (by == kNoBaseline || bits[p] > bits[by]) by = p;
  }
  return by;
}

}  // namespace

BranchVerdict beforeBranch(const ControllerConfig& config, const PhaseMeasurements& phase, std::size_t c) {
  BranchVerdict verdict;
  PhaseMeasurements sofar;
  PhasePlan plan;
  if (!planSoFar(config, phase, c, sofar, plan)) return verdict;
  if (dominatedIn(sofar, plan, c)) {
    verdict.pruned = kPrunedDominated;
  } else if ((verdict.boundedBy = boundedIn(config, sofar, plan, c)) != kNoBaseline) {
    verdict.pruned = kPrunedBounded;
  }
  return verdict;
}

std::vector<std::size_t> branchOrder(const ControllerConfig& config, const std::vector<double>& secondsPerStep,
                                     const std::vector<std::string>& pruned) {
  ADAPREC_CHECK_ARG(secondsPerStep.size() == config.candidates.size() &&
                        (pruned.empty() || pruned.size() == config.candidates.size()),
                    secondsPerStep.size() << " step times and " << pruned.size() << " pruning marks for "
                                          << config.candidates.size() << " candidates");
  std::vector<std::size_t> order = speculationOrder(secondsPerStep);
  const auto first = std::find_if(order.begin(), order.end(), [&](std::size_t i) { return pruned.empty() || pruned[i].empty(); });
  if (first == order.end()) return order;
  std::rotate(order.begin(), first, first + 1);
  const std::vector<unsigned> bits = candidateBits(config);
  const std::size_t base = config.baseline();
  const auto group = [&](std::size_t i) { return i != base && mayStandIn(config, i) ? 0 : 1; };
  std::stable_sort(order.begin() + 1, order.end(), [&](std::size_t a, std::size_t b) {
    if (group(a) != group(b)) return group(a) < group(b);
    return bits[a] > bits[b];
  });
  return order;
}

}  // namespace adaprec::controller
