#include "policy/precision_controller.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "communicator/timeline.hpp"

namespace adaprec::policy {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The slowest rank sets the pace of a synchronous step, and every rank must decide on the same numbers.
double maxOverRanks(MPI_Comm comm, double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, comm);
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void ControllerConfig::check() const {
  ADAPREC_CHECK_ARG(!candidates.empty(), "the controller needs candidates");
  ADAPREC_CHECK_ARG(evalPoints >= 1 && speculativeSteps >= static_cast<std::uint64_t>(evalPoints),
                    "speculative steps " << speculativeSteps << " must be >= evaluation points " << evalPoints);
  ADAPREC_CHECK_ARG(continuationSteps >= 1 && validationImages >= 1, "continuation steps and validation images must be >= 1");
  ADAPREC_CHECK_ARG(maxOverhead > 0 && maxOverhead <= 1, "max overhead " << maxOverhead << " must be in (0, 1]");
}

PrecisionController::PrecisionController(ControllerConfig config)
    : config_(std::move(config)), nextPhase_(config_.firstPhaseStep) {
  config_.check();
  for (const std::string& c : config_.candidates) {
    FormatSpec spec = parseFormatSpec(c);
    ADAPREC_CHECK_ARG(spec.selection != Selection::kAdaptive, "'adaptive' cannot be its own candidate");
    specs_.push_back(spec);
  }
  // The risk-aware rule compares with fp32 when it is a candidate, else with the first one.
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i] == FormatSpec{}) {
      baseline_ = i;
      break;
    }
  }
}

void PrecisionController::apply(trainer::Trainer& trainer, std::size_t candidate, bool resetFeedback) {
  if (resetFeedback) trainer.reducer().resetErrorFeedback();
  trainer.reducer().setFormats(std::vector<FormatSpec>(trainer.model().layerRanges().size(), specs_[candidate]));
  trainer.setFormatLabel("adaptive:" + config_.candidates[candidate]);
}

void PrecisionController::saveState(trainer::Trainer& trainer) const {
  nlohmann::json j{{"next_phase", nextPhase_}, {"current", current_}, {"decisions", decisions_},
                   {"overhead_s", overheadSeconds_}};
  const std::string text = j.dump();
  trainer.controllerState().assign(text.begin(), text.end());
}

void PrecisionController::loadState(trainer::Trainer& trainer) {
  loaded_ = true;
  const auto& blob = trainer.controllerState();
  if (blob.empty()) return;  // a fresh run
  nlohmann::json j = nlohmann::json::parse(std::string(blob.begin(), blob.end()));
  nextPhase_ = j.at("next_phase").get<std::uint64_t>();
  current_ = j.at("current").get<std::size_t>();
  decisions_ = j.at("decisions").get<std::size_t>();
  overheadSeconds_ = j.at("overhead_s").get<double>();
  ADAPREC_CHECK(current_ < specs_.size(), ErrorCode::kMismatch, "checkpoint's controller state names candidate "
                                                                   << current_ << " of " << specs_.size());
  // The checkpoint restored the residuals of the run so far: clearing them would break bit-identity.
  apply(trainer, current_, false);
}

void PrecisionController::beforeStep(trainer::Trainer& trainer) {
  if (!loaded_) loadState(trainer);
  // A phase needs room for its branches; near the end the current choice simply runs out.
  if (trainer.stepsDone() < nextPhase_ || trainer.stepsDone() + config_.speculativeSteps > trainer.totalSteps()) {
    return;
  }
  runPhase(trainer);
  saveState(trainer);
}

void PrecisionController::runPhase(trainer::Trainer& trainer) {
  const double phaseStart = now();
  const std::uint64_t start = trainer.stepsDone();
  const trainer::TrainerSnapshot base = trainer.snapshot();
  const trainer::Evaluation baseEval = trainer.evaluateValidation(config_.validationImages);
  std::vector<CandidateObservation> observations;
  std::vector<trainer::TrainerSnapshot> branchEnds;
  std::vector<double> branchSeconds;
  for (std::size_t c = 0; c < specs_.size(); ++c) {
    if (c > 0) trainer.restore(base, trainer::RestoreMode::kBranch);
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
      while (trainer.stepsDone() < until) {
        const double t0 = now();
        trainer.step();
        stepSeconds.push_back(now() - t0);
      }
      obs.steps.push_back(static_cast<double>(trainer.stepsDone() - start));
      obs.accuracies.push_back(trainer.evaluateValidation(config_.validationImages).accuracy);
    }
    obs.secondsPerStep = maxOverRanks(trainer.comm(), median(stepSeconds));
    branchSeconds.push_back(maxOverRanks(trainer.comm(), now() - branchStart));
    observations.push_back(std::move(obs));
    branchEnds.push_back(trainer.snapshot());
  }
  DecisionConfig dc;
  dc.rule = config_.rule;
  dc.baseline = baseline_;
  // Each candidate's continuation: at least continuationSteps, and as many seconds as keep the
  // speculation it leaves abandoned (everything but its own branch) within maxOverhead of the phase:
  //   abandoned <= F * (abandoned + ownBranch + continuation)  <=  continuation >= abandoned * (1-F)/F.
  // Its prediction is for where that continuation really ends (cut short by the end of training).
  const double speculationSeconds = maxOverRanks(trainer.comm(), now() - phaseStart);
  const std::uint64_t remaining = trainer.totalSteps() - start;
  const double F = config_.maxOverhead;
  std::vector<double> continuations;
  for (std::size_t c = 0; c < observations.size(); ++c) {
    const double abandoned = std::max(0.0, speculationSeconds - branchSeconds[c]);
    continuations.push_back(std::max(static_cast<double>(config_.continuationSteps),
                                     std::ceil(abandoned * (1 - F) / F / observations[c].secondsPerStep)));
    const double end = std::min(static_cast<double>(config_.speculativeSteps) + continuations[c], static_cast<double>(remaining));
    dc.horizons.push_back(std::max(static_cast<double>(config_.speculativeSteps + 1), end));
  }
  dc.horizonSteps = *std::max_element(dc.horizons.begin(), dc.horizons.end());
  dc.validationImages = static_cast<double>(baseEval.images);
  Decision decision = decide(observations, dc);
  // Identical inputs give identical fits, but one broadcast makes "every rank follows rank 0" explicit.
  unsigned long long plan[2] = {decision.choice, static_cast<unsigned long long>(continuations[decision.choice])};
  MPI_Bcast(plan, 2, MPI_UNSIGNED_LONG_LONG, 0, trainer.comm());
  current_ = static_cast<std::size_t>(plan[0]);
  trainer.restore(branchEnds[current_], trainer::RestoreMode::kBranch);
  apply(trainer, current_);
  trainer.checkConsistency();
  // Not capped by the end of training: a run stopped early (--max-steps) and resumed with a later end
  // must keep the same phase boundaries.
  nextPhase_ = trainer.stepsDone() + plan[1];
  ++decisions_;
  const double phaseSeconds = maxOverRanks(trainer.comm(), now() - phaseStart);
  const double overhead = phaseSeconds - branchSeconds[current_];
  overheadSeconds_ += overhead;

  nlohmann::json j;
  j["event"] = "decision";
  j["phase"] = decisions_;
  j["step"] = start;
  j["epoch"] = static_cast<double>(start) / trainer.stepsPerEpoch();
  j["wall_s"] = trainer.wallSeconds();
  j["rule"] = decisionRuleName(config_.rule);
  j["horizon_steps"] = dc.horizons[current_];  // the chosen candidate's prediction step (phase-relative)
  j["continuation_steps"] = plan[1];
  j["speculation_s"] = speculationSeconds;
  j["max_overhead"] = config_.maxOverhead;
  j["validation_images"] = baseEval.images;
  j["choice"] = config_.candidates[current_];
  j["phase_s"] = phaseSeconds;
  j["overhead_s"] = overhead;
  j["fit_s"] = decision.fitSeconds;
  nlohmann::json cands = nlohmann::json::array();
  for (std::size_t c = 0; c < observations.size(); ++c) {
    const CandidateVerdict& v = decision.verdicts[c];
    nlohmann::json x;
    x["name"] = v.name;
    x["step_s"] = observations[c].secondsPerStep;
    nlohmann::json points = nlohmann::json::array();
    for (std::size_t p = 0; p < observations[c].steps.size(); ++p) {
      points.push_back({start + static_cast<std::uint64_t>(observations[c].steps[p]), observations[c].accuracies[p]});
    }
    x["curve"] = points;
    x["predicted_mean"] = v.predictedMean;
    x["predicted_sd"] = v.predictedSd;
    x["predicted_step"] = start + static_cast<std::uint64_t>(v.horizonSteps);
    x["branch_s"] = branchSeconds[c];
    x["gain"] = v.gain;
    x["score"] = v.score;
    x["p_beats_baseline"] = v.probabilityBeatsBaseline;
    cands.push_back(x);
  }
  j["candidates"] = cands;
  trainer.logLine(j.dump());
  // The decision on this rank's allreduce timeline (ADAPREC_TIMELINE, docs/timeline.md), where it lands
  // between the allreduce calls of the branches and of the continuation.
  if (const std::string path = CommunicatorOptions::fromEnvironment().timelinePath; !path.empty()) {
    nlohmann::json args{{"phase", decisions_}, {"step", start}, {"choice", config_.candidates[current_]}};
    for (std::size_t c = 0; c < observations.size(); ++c) {
      args["candidates"].push_back({{"name", decision.verdicts[c].name},
                                    {"predicted_mean", decision.verdicts[c].predictedMean},
                                    {"predicted_sd", decision.verdicts[c].predictedSd},
                                    {"chosen", c == current_}});
    }
    detail::Timeline::open(path, trainer.rank())->instant("decision", args.dump());
  }
  if (trainer.rank() == 0 && trainer.config().progress) {
    std::fprintf(stderr, "\ndecision %zu at step %llu (epoch %.2f): ", decisions_, static_cast<unsigned long long>(start),
                 j["epoch"].get<double>());
    for (const CandidateVerdict& v : decision.verdicts) {
      std::fprintf(stderr, "%s %.4f+-%.4f (%.3g/s) ", v.name.c_str(), v.predictedMean, v.predictedSd, v.score);
    }
    std::fprintf(stderr, "-> %s (phase %.1f s, overhead %.1f s)\n", config_.candidates[current_].c_str(), phaseSeconds,
                 overhead);
  }
}

void PrecisionController::finish(trainer::Trainer& trainer) {
  saveState(trainer);
  nlohmann::json j{{"event", "controller_summary"},
                   {"decisions", decisions_},
                   {"overhead_s", overheadSeconds_},
                   {"wall_s", trainer.wallSeconds()},
                   {"overhead_fraction", overheadSeconds_ / std::max(1e-9, trainer.wallSeconds())}};
  trainer.logLine(j.dump());
  if (trainer.rank() == 0 && trainer.config().progress) {
    std::fprintf(stderr, "\ncontroller: %zu decisions, overhead %.1f s of %.1f s (%.1f%%)\n", decisions_,
                 overheadSeconds_, trainer.wallSeconds(), 100.0 * overheadSeconds_ / std::max(1e-9, trainer.wallSeconds()));
  }
}

}  // namespace adaprec::policy
