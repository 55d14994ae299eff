#include "controller/phase_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "adaprec/error.hpp"
#include "adaprec/format.hpp"
#include "controller/pruning.hpp"

namespace adaprec::controller {

std::string ControllerConfig::candidateList() const {
  std::string joined;
  for (const std::string& name : candidates) joined += (joined.empty() ? "" : ",") + name;
  return joined;
}

void ControllerConfig::check() const {
  ADAPREC_CHECK_ARG(!candidates.empty(), "the controller needs candidates");
  ADAPREC_CHECK_ARG(evalPoints >= 1 && speculativeSteps >= static_cast<std::uint64_t>(evalPoints),
                    "speculative steps " << speculativeSteps << " must be >= evaluation points " << evalPoints);
  ADAPREC_CHECK_ARG(continuationSteps >= 1 && validationImages >= 1, "continuation steps and validation images must be >= 1");
  ADAPREC_CHECK_ARG(maxOverhead > 0 && maxOverhead <= 1, "max overhead " << maxOverhead << " must be in (0, 1]");
  ADAPREC_CHECK_ARG(minSpeedup >= 0 && minSpeedup < 1, "min speedup " << minSpeedup << " must be in [0, 1)");
  ADAPREC_CHECK_ARG(probeSteps >= 1, "probe steps must be >= 1");
  ADAPREC_CHECK_ARG(maxContinuationDoublings <= 20, "at most 20 continuation doublings, got " << maxContinuationDoublings);
}

std::size_t ControllerConfig::baseline() const {
  std::size_t base = candidates.size();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const FormatSpec spec = parseFormatSpec(candidates[i]);
    ADAPREC_CHECK_ARG(spec.selection != Selection::kAdaptive, "'adaptive' cannot be its own candidate");
    // The risk-aware rule compares with fp32 when it is a candidate, else with the first one.
    if (base == candidates.size() && spec == FormatSpec{}) base = i;
  }
  return base == candidates.size() ? 0 : base;
}

PhasePlan planPhase(const ControllerConfig& config, const PhaseMeasurements& phase) {
  ADAPREC_CHECK_ARG(phase.observations.size() == config.candidates.size() &&
                        phase.branchSeconds.size() == config.candidates.size(),
                    phase.observations.size() << " branches for " << config.candidates.size() << " candidates");
  ADAPREC_CHECK_ARG(phase.pruned.empty() || phase.pruned.size() == config.candidates.size(),
                    phase.pruned.size() << " pruning marks for " << config.candidates.size() << " candidates");
  PhasePlan plan;
  DecisionConfig& dc = plan.decisionConfig;
  dc.rule = config.rule;
  dc.baseline = config.baseline();
  // Each candidate's continuation: at least continuationSteps, and as many seconds as keep the
  // speculation it leaves abandoned (everything but its own branch) within maxOverhead of the phase:
  //   abandoned <= F * (abandoned + ownBranch + continuation)  <=  continuation >= abandoned * (1-F)/F.
  // Its prediction is for where that continuation really ends (cut short by the end of training).
  const double F = config.maxOverhead;
  for (std::size_t c = 0; c < phase.observations.size(); ++c) {
    ADAPREC_CHECK_ARG(phase.observations[c].secondsPerStep > 0 && std::isfinite(phase.observations[c].secondsPerStep),
                      "candidate " << config.candidates[c] << ": seconds per step " << phase.observations[c].secondsPerStep);
    const double abandoned = std::max(0.0, phase.speculationSeconds - phase.branchSeconds[c]);
    // At most kMaxContinuationSteps: a tiny maxOverhead or step time must not overflow the step count
    // (the C API returned a continuation of 0 for 1e20 steps).
    plan.continuations.push_back(std::min(
        kMaxContinuationSteps, std::max(static_cast<double>(config.continuationSteps),
                                        std::ceil(abandoned * (1 - F) / F / phase.observations[c].secondsPerStep))));
    const double end = std::min(static_cast<double>(config.speculativeSteps) + plan.continuations[c],
                                static_cast<double>(phase.remainingSteps));
    dc.horizons.push_back(std::max(static_cast<double>(config.speculativeSteps + 1), end));
  }
  dc.horizonSteps = *std::max_element(dc.horizons.begin(), dc.horizons.end());
  dc.validationImages = static_cast<double>(phase.validationImages);
  dc.learningRates = phase.learningRates;
  // The fit and the rule see the speculated candidates only; an unspeculated baseline enters the
  // risk-aware rule as the ceiling of its rate, or, stood in for, as its stand-in's curve (pruning.hpp).
  std::vector<std::size_t> speculated;
  std::vector<CandidateObservation> observed;
  for (std::size_t c = 0; c < phase.observations.size(); ++c) {
    if (isPruned(phase, c)) continue;
    speculated.push_back(c);
    observed.push_back(phase.observations[c]);
  }
  ADAPREC_CHECK_ARG(!speculated.empty(), "every candidate was pruned: nothing to decide on");
  // The rule judges every speculated candidate over the same seconds: the shortest of their planned
  // horizons (branch + continuation, in seconds), each candidate that many seconds of its own steps
  // ahead (at least one step past its branch). Judged over its own planned horizon, a slow candidate,
  // whose long branch leaves less abandoned speculation and so a shorter continuation, was judged over
  // fewer seconds, and on a concave curve a shorter time is a higher mean rate: at 100 Mbit/s that
  // chose fp16 (53.5 s) over fp8s and table4 (about 60 s), which win at equal seconds (docs/results.md).
  // The shortest, so that no candidate is predicted beyond the horizon it was planned (nor beyond the
  // end of training, which caps the plans). Dominance (pruning.cpp) still bounds a candidate by a perfect
  // branch over its own planned horizon: at equal seconds a perfect branch would win every time.
  plan.judgedSeconds = std::numeric_limits<double>::infinity();
  for (std::size_t c : speculated) {
    plan.judgedSeconds = std::min(plan.judgedSeconds, dc.horizons[c] * phase.observations[c].secondsPerStep);
  }
  const auto judgedHorizon = [&](std::size_t c) {
    return std::max(static_cast<double>(config.speculativeSteps + 1),
                    std::min(dc.horizons[c], plan.judgedSeconds / phase.observations[c].secondsPerStep));
  };
  DecisionConfig fitConfig = dc;
  fitConfig.horizons.clear();
  for (std::size_t c : speculated) fitConfig.horizons.push_back(judgedHorizon(c));
  const auto base = std::find(speculated.begin(), speculated.end(), dc.baseline);
  fitConfig.baseline = base == speculated.end() ? kNoBaseline : static_cast<std::size_t>(base - speculated.begin());
  const std::size_t stoodIn = !isPruned(phase, dc.baseline) || phase.pruned[dc.baseline] != kPrunedStoodIn
                                  ? kNoBaseline
                                  : standIn(config, phase);
  ADAPREC_CHECK_ARG(!isPruned(phase, dc.baseline) || phase.pruned[dc.baseline] != kPrunedStoodIn || stoodIn != kNoBaseline,
                    config.candidates[dc.baseline] << " is marked " << kPrunedStoodIn << " but no branch stands in for it");
  if (stoodIn != kNoBaseline) {
    fitConfig.standIn = static_cast<std::size_t>(std::find(speculated.begin(), speculated.end(), stoodIn) - speculated.begin());
    fitConfig.standInHorizon = judgedHorizon(dc.baseline);  // fp32 judged as it would be if run
    fitConfig.standInSecondsPerStep = phase.observations[dc.baseline].secondsPerStep;
  } else if (fitConfig.baseline == kNoBaseline) {
    fitConfig.baselineRateCeiling = rateCeiling(observed.front().accuracies.front(), dc.horizons[dc.baseline],
                                                phase.observations[dc.baseline].secondsPerStep);
  }
  const Decision fitted = decide(observed, fitConfig);
  plan.decision.choice = speculated[fitted.choice];
  // The end of training would cut the next phase's continuation short of the bound (a phase like this
  // one: the same branches abandoned) when what is left after this one cannot hold another: then the
  // chosen continuation runs to the end instead, and no phase speculates beyond maxOverhead. (At 1
  // Gbit/s second phases 100-130 steps before the end of a 296-step run cost 3-6 s, 30-40 % of what was
  // left; at 100 Mbit/s one began 21 steps before the end.) Only the chosen one, after the rule: the
  // rule compares candidates over equal seconds within their plans, and a fast candidate's horizon
  // stretched to the end would let slow branches escape dominance (judged over their planned horizons).
  double& chosen = plan.continuations[plan.decision.choice];
  // The back-off, after the rule: the previous choice confirmed (kept, or left for a candidate that is
  // not clearly better), the continuation doubles (once more for every decision in a row before that
  // confirmed too), so that a settled run speculates ever less often.
  const std::size_t previous = phase.previousChoice;
  if (previous == plan.decision.choice) {
    plan.confirmed = true;
  } else if (previous < phase.observations.size() && !isPruned(phase, previous)) {
    const CandidateVerdict& now = fitted.verdicts[fitted.choice];
    const CandidateVerdict& before =
        fitted.verdicts[static_cast<std::size_t>(std::find(speculated.begin(), speculated.end(), previous) - speculated.begin())];
    plan.confirmed = probabilityRateExceeds(now, before) < kClearImprovement;
  }
  if (F < 1 && plan.confirmed) {
    plan.doublings = std::min(phase.previousRepeats + 1, config.maxContinuationDoublings);
    chosen = std::min(kMaxContinuationSteps, std::ldexp(chosen, static_cast<int>(plan.doublings)));
  }
  const double remaining = static_cast<double>(phase.remainingSteps);
  if (F < 1 && 2 * (static_cast<double>(config.speculativeSteps) + chosen) > remaining) {
    chosen = std::max(chosen, remaining - static_cast<double>(config.speculativeSteps));
  }
  plan.decision.fitSeconds = fitted.fitSeconds;
  plan.decision.lrSchedule = fitted.lrSchedule;
  plan.decision.scheduleMap = fitted.scheduleMap;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (std::size_t c = 0, k = 0; c < phase.observations.size(); ++c) {
    if (k < speculated.size() && speculated[k] == c) {
      plan.decision.verdicts.push_back(fitted.verdicts[k++]);
      continue;
    }
    CandidateVerdict v;
    v.name = config.candidates[c];
    v.horizonSteps = dc.horizons[c];
    v.seconds = v.horizonSteps * phase.observations[c].secondsPerStep;
    v.predictedMean = v.predictedSd = v.gain = v.score = v.probabilityBeatsBaseline = nan;
    plan.decision.verdicts.push_back(v);
  }
  return plan;
}

nlohmann::json decisionRecord(const ControllerConfig& config, const PhaseMeasurements& phase,
                              const PhasePlan& plan, const PhaseOutcome& outcome) {
  const std::uint64_t start = phase.start;
  nlohmann::json j;
  j["event"] = "decision";
  j["phase"] = outcome.phase;
  j["step"] = start;
  j["epoch"] = outcome.epoch;
  j["wall_s"] = outcome.wallSeconds;
  j["rule"] = decisionRuleName(config.rule);
  j["horizon_steps"] = plan.decisionConfig.horizons[outcome.choice];  // the chosen candidate's planned horizon (phase-relative)
  j["judged_s"] = plan.judgedSeconds;  // every speculated candidate predicted this many of its seconds ahead
  j["continuation_steps"] = outcome.continuationSteps;
  j["continuation_doublings"] = plan.doublings;  // by the back-off
  j["confirmed"] = plan.confirmed;  // the previous choice kept, or not clearly beaten
  j["speculation_s"] = phase.speculationSeconds;
  j["max_overhead"] = config.maxOverhead;
  j["validation_images"] = phase.validationImages;
  j["choice"] = config.candidates[outcome.choice];
  j["phase_s"] = outcome.phaseSeconds;
  j["overhead_s"] = outcome.overheadSeconds;
  j["fit_s"] = plan.decision.fitSeconds;
  j["lr_schedule"] = plan.decision.lrSchedule;  // the predictor's schedule ("none": the model without one)
  j["schedule_map"] = plan.decision.scheduleMap;  // its predictions through the schedule's default map
  if (!phase.speculationOrder.empty()) {  // pruning was on
    j["speculation_order"] = phase.speculationOrder;
    j["min_speedup"] = config.minSpeedup;
  }
  nlohmann::json cands = nlohmann::json::array();
  for (std::size_t c = 0; c < phase.observations.size(); ++c) {
    const CandidateVerdict& v = plan.decision.verdicts[c];
    const CandidateObservation& o = phase.observations[c];
    nlohmann::json x;
    x["name"] = v.name;
    x["step_s"] = o.secondsPerStep;
    if (!phase.pruningStepSeconds.empty()) x["pruning_step_s"] = phase.pruningStepSeconds[c];
    if (!phase.pruningStepSamples.empty()) x["pruning_samples_s"] = phase.pruningStepSamples[c];
    if (isPruned(phase, c)) {  // measured, never speculated: its step time and why
      x["pruned"] = phase.pruned[c];
      if (phase.pruned[c] == kPrunedStoodIn) x["stand_in"] = config.candidates[standIn(config, phase)];
      if (c < phase.boundedBy.size() && !phase.boundedBy[c].empty()) x["bounded_by"] = phase.boundedBy[c];
      x["branch_s"] = phase.branchSeconds[c];
      cands.push_back(x);
      continue;
    }
    nlohmann::json points = nlohmann::json::array();
    for (std::size_t p = 0; p < o.steps.size(); ++p) {
      points.push_back({start + static_cast<std::uint64_t>(o.steps[p]), o.accuracies[p]});
    }
    x["curve"] = points;
    x["predicted_mean"] = v.predictedMean;
    x["predicted_sd"] = v.predictedSd;
    x["predicted_step"] = start + static_cast<std::uint64_t>(v.horizonSteps);
    x["branch_s"] = phase.branchSeconds[c];
    x["gain"] = v.gain;
    x["score"] = v.score;
    x["p_beats_baseline"] = v.probabilityBeatsBaseline;
    cands.push_back(x);
  }
  j["candidates"] = cands;
  return j;
}

std::string decisionSummary(const ControllerConfig& config, const PhaseMeasurements& phase, const PhasePlan& plan,
                            const PhaseOutcome& outcome) {
  std::string line;
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, "\ndecision %zu at step %llu (epoch %.2f): ", outcome.phase,
                static_cast<unsigned long long>(phase.start), outcome.epoch);
  line = buffer;
  for (std::size_t c = 0; c < plan.decision.verdicts.size(); ++c) {
    const CandidateVerdict& v = plan.decision.verdicts[c];
    if (isPruned(phase, c)) {
      std::snprintf(buffer, sizeof buffer, "%s pruned (%s) ", v.name.c_str(), phase.pruned[c].c_str());
    } else {
      std::snprintf(buffer, sizeof buffer, "%s %.4f+-%.4f (%.3g/s) ", v.name.c_str(), v.predictedMean, v.predictedSd,
                    v.score);
    }
    line += buffer;
  }
  std::snprintf(buffer, sizeof buffer, "-> %s (phase %.1f s, overhead %.1f s%s)\n", config.candidates[outcome.choice].c_str(),
                outcome.phaseSeconds, outcome.overheadSeconds,
                plan.doublings > 0 ? ("; confirmed: continuation x" + std::to_string(1u << plan.doublings)).c_str() : "");
  return line + buffer;
}

}  // namespace adaprec::controller
