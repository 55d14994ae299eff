#include "controller/precision_controller.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "adaprec/error.hpp"

namespace adaprec::controller {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

PrecisionController::PrecisionController(ControllerConfig config)
    : config_(std::move(config)), nextPhase_(config_.firstPhaseStep) {
  config_.check();
  config_.baseline();  // rejects "adaptive" and unknown formats
  for (const std::string& c : config_.candidates) specs_.push_back(parseFormatSpec(c));
}

void PrecisionController::apply(SpeculativeTrainer& trainer, std::size_t candidate, bool resetFeedback) {
  trainer.setFormat(specs_[candidate], config_.candidates[candidate], resetFeedback);
}

std::string PrecisionController::saveState() const {
  nlohmann::json j{{"next_phase", nextPhase_}, {"current", current_}, {"decisions", decisions_},
                   {"overhead_s", overheadSeconds_}};
  return j.dump();
}

void PrecisionController::loadState(const std::string& state, SpeculativeTrainer& trainer) {
  if (state.empty()) return;  // a fresh run
  nlohmann::json j = nlohmann::json::parse(state);
  nextPhase_ = j.at("next_phase").get<std::uint64_t>();
  current_ = j.at("current").get<std::size_t>();
  decisions_ = j.at("decisions").get<std::size_t>();
  overheadSeconds_ = j.at("overhead_s").get<double>();
  ADAPREC_CHECK(current_ < specs_.size(), ErrorCode::kMismatch, "checkpoint's controller state names candidate "
                                                                   << current_ << " of " << specs_.size());
  // The checkpoint restored the residuals of the run so far: clearing them would break bit-identity.
  apply(trainer, current_, false);
}

bool PrecisionController::beforeStep(SpeculativeTrainer& trainer) {
  // A phase needs room for its branches; near the end the current choice simply runs out.
  if (trainer.stepsDone() < nextPhase_ || trainer.stepsDone() + config_.speculativeSteps > trainer.totalSteps()) {
    return false;
  }
  runPhase(trainer);
  return true;
}

void PrecisionController::runPhase(SpeculativeTrainer& trainer) {
  const double phaseStart = now();
  PhaseMeasurements phase;
  phase.start = trainer.stepsDone();
  const std::uint64_t start = phase.start;
  const std::unique_ptr<TrainingState> base = trainer.snapshot();
  const ValidationResult baseEval = trainer.evaluate(config_.validationImages);
  std::vector<std::unique_ptr<TrainingState>> branchEnds;
  for (std::size_t c = 0; c < specs_.size(); ++c) {
    if (c > 0) trainer.restore(*base);
    apply(trainer, c);
    CandidateObservation obs;
    obs.name = config_.candidates[c];
    obs.steps.push_back(0);
    obs.accuracies.push_back(baseEval.accuracy);
    // The median step time: one-off costs (the first use of "fastest" measures every format) must not
    // count as the candidate's speed.
    std::vector<double> stepSeconds;
    const double branchStart = now();
    for (int k = 1; k <= config_.evalPoints; ++k) {
      const std::uint64_t until = start + config_.speculativeSteps * k / config_.evalPoints;
      const std::vector<double> seconds = trainer.train(until - trainer.stepsDone());
      stepSeconds.insert(stepSeconds.end(), seconds.begin(), seconds.end());
      obs.steps.push_back(static_cast<double>(trainer.stepsDone() - start));
      obs.accuracies.push_back(trainer.evaluate(config_.validationImages).accuracy);
    }
    // The slowest rank sets the pace of a synchronous step, and every rank must decide on the same numbers.
    obs.secondsPerStep = trainer.maxOverRanks(median(stepSeconds));
    phase.branchSeconds.push_back(trainer.maxOverRanks(now() - branchStart));
    phase.observations.push_back(std::move(obs));
    branchEnds.push_back(trainer.snapshot());
  }
  phase.speculationSeconds = trainer.maxOverRanks(now() - phaseStart);
  phase.remainingSteps = trainer.totalSteps() - start;
  phase.validationImages = baseEval.images;
  for (std::uint64_t s = 0; s <= phase.remainingSteps; ++s) {  // every horizon is within these
    phase.learningRates.push_back(trainer.learningRate(start + s));
  }
  const PhasePlan plan = planPhase(config_, phase);
  // Identical inputs give identical fits, but one agreement makes "every rank follows rank 0" explicit.
  std::uint64_t agreed[2] = {plan.decision.choice, plan.continuationSteps()};
  trainer.agree(agreed);
  current_ = static_cast<std::size_t>(agreed[0]);
  trainer.restore(*branchEnds[current_]);
  apply(trainer, current_);
  trainer.checkConsistency();
  // Not capped by the end of training: a run stopped early (--max-steps) and resumed with a later end
  // must keep the same phase boundaries.
  nextPhase_ = trainer.stepsDone() + agreed[1];
  ++decisions_;
  PhaseOutcome outcome;
  outcome.choice = current_;
  outcome.continuationSteps = agreed[1];
  outcome.phase = decisions_;
  outcome.epoch = trainer.epochAt(start);
  outcome.phaseSeconds = trainer.maxOverRanks(now() - phaseStart);
  outcome.overheadSeconds = outcome.phaseSeconds - phase.branchSeconds[current_];
  outcome.wallSeconds = trainer.wallSeconds();
  overheadSeconds_ += outcome.overheadSeconds;
  trainer.record(decisionRecord(config_, phase, plan, outcome).dump(), decisionSummary(config_, phase, plan, outcome));
}

void PrecisionController::finish(SpeculativeTrainer& trainer) {
  const double wall = trainer.wallSeconds();
  nlohmann::json j{{"event", "controller_summary"},
                   {"decisions", decisions_},
                   {"overhead_s", overheadSeconds_},
                   {"wall_s", wall},
                   {"overhead_fraction", overheadSeconds_ / std::max(1e-9, wall)}};
  char line[160];
  std::snprintf(line, sizeof line, "\ncontroller: %zu decisions, overhead %.1f s of %.1f s (%.1f%%)\n", decisions_,
                overheadSeconds_, wall, 100.0 * overheadSeconds_ / std::max(1e-9, wall));
  trainer.record(j.dump(), line);
}

}  // namespace adaprec::controller
