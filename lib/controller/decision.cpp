#include "decision.hpp"

#include <chrono>
#include <cmath>
#include <deque>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"

namespace adaprec::controller {

const char* decisionRuleName(DecisionRule rule) { return rule == DecisionRule::kRiskAware ? "risk" : "gain"; }

DecisionRule parseDecisionRule(const std::string& name) {
  if (name == "gain") return DecisionRule::kGainPerSecond;
  if (name == "risk") return DecisionRule::kRiskAware;
  ADAPREC_FAIL(ErrorCode::kInvalidArgument, "unknown decision rule '" << name << "' (valid: gain, risk)");
}

std::shared_ptr<const predictor::LrSchedule> phaseSchedule(const std::vector<double>& learningRates) {
  if (learningRates.empty()) return nullptr;
  bool constant = true;
  for (double lr : learningRates) constant = constant && lr == learningRates.front();
  // A constant rate (or all 0, past the end of a decay) is the model without a schedule: exactly, not
  // up to rounding, so that runs without a schedule decide as before.
  if (constant && std::isfinite(learningRates.front()) && learningRates.front() >= 0) return nullptr;
  std::vector<double> steps(learningRates.size());
  for (std::size_t i = 0; i < steps.size(); ++i) steps[i] = static_cast<double>(i);
  return std::make_shared<const predictor::LrSchedule>(predictor::LrSchedule::fromPoints(steps, learningRates));
}

namespace {

// P(X > 0) for X ~ N(mu, var); a point mass when var is 0.
double probabilityPositive(double mu, double var) {
  return var > 0 ? 0.5 * std::erfc(-mu / std::sqrt(2 * var)) : (mu > 0 ? 1.0 : 0.0);
}

// The last few fits and the moments predicted from them, on this thread. A phase asks about the same
// branches several times with the same inputs: dominance plans the phase before each candidate's
// branch (pruning.cpp) and the decision plans it once more, and a fit of a few short curves with a
// schedule (tens of thousands of components, each prediction a mapped integral over them) costs about
// 0.1 s of a core, 0.2-0.4 s with four ranks on two cores (at 100 Mbit/s the first phase fitted five
// times where two sets of curves were fitted). Keyed by every input exactly, so a hit returns what a
// new fit would: the fit and the predictions are deterministic.
class FitMemo {
 public:
  // The mean and sd of curve `curve` at `step` of the fit of (curves, learningRates).
  std::pair<double, double> moments(const std::vector<predictor::Curve>& curves, const std::vector<double>& learningRates,
                                    std::size_t curve, double step) {
    Entry& e = entry(curves, learningRates);
    for (const Moment& m : e.moments) {
      if (m.curve == curve && m.step == step) return {m.mean, m.sd};
    }
    const predictor::Predictive p = e.posterior.predictive(curve, step);
    e.moments.push_back({curve, step, p.mean(), p.sd()});
    return {p.mean(), p.sd()};
  }
  bool scheduleMapped(const std::vector<predictor::Curve>& curves, const std::vector<double>& learningRates) {
    return entry(curves, learningRates).mapped;
  }
  std::uint64_t fits() const { return fits_; }

 private:
  struct Moment {
    std::size_t curve;
    double step, mean, sd;
  };
  struct Entry {
    std::vector<predictor::Curve> curves;
    std::vector<double> learningRates;
    predictor::Posterior posterior;
    bool mapped = false;
    std::vector<Moment> moments;
  };
  static constexpr std::size_t kEntries = 4;
  std::deque<Entry> entries_;  // most recent first
  std::uint64_t fits_ = 0;

  static bool same(const std::vector<predictor::Curve>& a, const std::vector<predictor::Curve>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i].steps != b[i].steps || a[i].values != b[i].values || a[i].sampleCounts != b[i].sampleCounts) return false;
    }
    return true;
  }
  Entry& entry(const std::vector<predictor::Curve>& curves, const std::vector<double>& learningRates) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->learningRates == learningRates && same(it->curves, curves)) {
        if (it != entries_.begin()) {
          Entry hit = std::move(*it);
          entries_.erase(it);
          entries_.push_front(std::move(hit));
        }
        return entries_.front();
      }
    }
    predictor::ModelOptions model;
    model.lrSchedule = phaseSchedule(learningRates);
    predictor::Posterior posterior = predictor::fitFast(curves, model);
    ++fits_;
    entries_.push_front(Entry{curves, learningRates, std::move(posterior), model.appliedRecalibration() != nullptr, {}});
    if (entries_.size() > kEntries) entries_.pop_back();
    return entries_.front();
  }
};

FitMemo& fitMemo() {
  thread_local FitMemo memo;
  return memo;
}

}  // namespace

std::uint64_t decisionFits() { return fitMemo().fits(); }

double probabilityRateExceeds(const CandidateVerdict& a, const CandidateVerdict& b) {
  return probabilityPositive(a.gain / a.seconds - b.gain / b.seconds,
                             std::pow(a.predictedSd / a.seconds, 2) + std::pow(b.predictedSd / b.seconds, 2));
}

Decision decide(const std::vector<CandidateObservation>& candidates, const DecisionConfig& config) {
  ADAPREC_CHECK_ARG(!candidates.empty(), "the controller needs at least one candidate");
  const bool hasBaseline = config.baseline != kNoBaseline;
  ADAPREC_CHECK_ARG(!hasBaseline || config.baseline < candidates.size(), "baseline index " << config.baseline);
  const bool hasStandIn = !hasBaseline && config.standIn != kNoBaseline;
  ADAPREC_CHECK_ARG(hasBaseline || hasStandIn ||
                        (std::isfinite(config.baselineRateCeiling) && config.baselineRateCeiling >= 0),
                    "without a baseline branch the baseline's rate ceiling must be >= 0, not "
                        << config.baselineRateCeiling);
  ADAPREC_CHECK_ARG(!hasStandIn || (config.standIn < candidates.size() && std::isfinite(config.standInHorizon) &&
                                    config.standInHorizon > 0 && std::isfinite(config.standInSecondsPerStep) &&
                                    config.standInSecondsPerStep > 0),
                    "stand-in " << config.standIn << " of " << candidates.size() << " candidates, horizon "
                                << config.standInHorizon << ", seconds per step " << config.standInSecondsPerStep);
  const auto start = std::chrono::steady_clock::now();
  ADAPREC_CHECK_ARG(config.horizons.empty() || config.horizons.size() == candidates.size(),
                    config.horizons.size() << " horizons for " << candidates.size() << " candidates");
  auto horizonOf = [&config](std::size_t i) { return config.horizons.empty() ? config.horizonSteps : config.horizons[i]; };
  std::vector<predictor::Curve> curves;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const CandidateObservation& c = candidates[i];
    ADAPREC_CHECK_ARG(c.steps.size() == c.accuracies.size() && c.steps.size() >= 2 && c.steps.front() == 0,
                      "candidate " << c.name << ": needs >= 2 points starting at step 0");
    ADAPREC_CHECK_ARG(c.secondsPerStep > 0 && std::isfinite(c.secondsPerStep),
                      "candidate " << c.name << ": seconds per step " << c.secondsPerStep);
    ADAPREC_CHECK_ARG(horizonOf(i) > c.steps.back(), "candidate " << c.name << ": horizon " << horizonOf(i)
                                                                   << " is not beyond the observed steps");
    predictor::Curve curve{c.steps, c.accuracies, {}};
    if (config.validationImages > 0) curve.sampleCounts.assign(c.steps.size(), config.validationImages);
    curves.push_back(std::move(curve));
  }
  FitMemo& memo = fitMemo();
  Decision d;
  if (const auto schedule = phaseSchedule(config.learningRates)) d.lrSchedule = schedule->spec();
  d.scheduleMap = memo.scheduleMapped(curves, config.learningRates);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    // Mean and sd only: the rules read nothing else, and the quantiles predict() adds cost more than
    // the fit when the schedule's map applies (each a search over tens of thousands of components).
    const auto [mean, sd] = memo.moments(curves, config.learningRates, i, horizonOf(i));
    CandidateVerdict v;
    v.name = candidates[i].name;
    v.horizonSteps = horizonOf(i);
    v.predictedMean = mean;
    v.predictedSd = sd;
    v.gain = mean - candidates[i].accuracies.front();
    v.seconds = horizonOf(i) * candidates[i].secondsPerStep;
    d.verdicts.push_back(v);
  }
  // The baseline judged by the stand-in's curve at the baseline's own horizon and step time.
  CandidateVerdict standInBase;
  if (hasStandIn) {
    const auto [mean, sd] = memo.moments(curves, config.learningRates, config.standIn, config.standInHorizon);
    standInBase.predictedMean = mean;
    standInBase.predictedSd = sd;
    standInBase.gain = mean - candidates[config.standIn].accuracies.front();
    standInBase.seconds = config.standInHorizon * config.standInSecondsPerStep;
  }
  const CandidateVerdict* base = hasBaseline ? &d.verdicts[config.baseline] : hasStandIn ? &standInBase : nullptr;
  for (CandidateVerdict& v : d.verdicts) {
    // Rates (accuracy per second) as normals: mean gain / seconds, sd / seconds; an unspeculated
    // baseline's rate is its ceiling, exactly.
    if (&v == base) {
      v.probabilityBeatsBaseline = 0.5;
    } else if (base) {
      v.probabilityBeatsBaseline = probabilityRateExceeds(v, *base);
    } else {
      v.probabilityBeatsBaseline = probabilityPositive(v.gain / v.seconds - config.baselineRateCeiling,
                                                       std::pow(v.predictedSd / v.seconds, 2));
    }
    v.score = config.rule == DecisionRule::kRiskAware ? v.probabilityBeatsBaseline : v.gain / v.seconds;
  }
  bool anyGain = false;
  for (const CandidateVerdict& v : d.verdicts) anyGain |= v.gain > 0;
  d.choice = hasBaseline ? config.baseline : 0;
  for (std::size_t i = 0; i < d.verdicts.size(); ++i) {
    const CandidateVerdict& v = d.verdicts[i];
    const CandidateVerdict& best = d.verdicts[d.choice];
    const bool better = anyGain ? v.score > best.score : v.predictedMean > best.predictedMean;
    if (better) d.choice = i;
  }
  d.fitSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return d;
}

}  // namespace adaprec::controller
