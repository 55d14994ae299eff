#include "controller/precision_controller.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "adaprec/error.hpp"
#include "controller/pruning.hpp"

namespace adaprec::controller {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Each sample the maximum over ranks (the slowest rank sets a synchronous step's pace; every rank must
// prune on the same numbers).
std::vector<double> agreedSamples(SpeculativeTrainer& trainer, std::vector<double> seconds) {
  trainer.maxOverRanks(std::span<double>(seconds));
  return seconds;
}


// The controller state of a checkpoint (saveState's JSON; a checkpoint's CRC guards it against damage,
// not against a hand-edited or foreign state), every error an adaprec::Error.
nlohmann::json parseState(const std::string& state) {
  nlohmann::json j = nlohmann::json::parse(state, nullptr, false);
  ADAPREC_CHECK(j.is_object(), ErrorCode::kMismatch, "checkpoint's controller state is not a JSON object");
  return j;
}

// A count of the state: a whole number in [0, max] (not -1, not 2.7, not a string).
std::uint64_t stateCount(const nlohmann::json& j, const char* key, std::uint64_t max) {
  ADAPREC_CHECK(j.contains(key), ErrorCode::kMismatch, "checkpoint's controller state has no " << key);
  const nlohmann::json& v = j[key];
  ADAPREC_CHECK(v.is_number_unsigned() && v.get<std::uint64_t>() <= max, ErrorCode::kMismatch,
                "checkpoint's controller state: " << key << " " << v.dump() << " is not a whole number in [0, " << max
                                                   << "]");
  return v.get<std::uint64_t>();
}

bool validSeconds(double s, bool zeroAllowed) { return std::isfinite(s) && (s > 0 || (zeroAllowed && s == 0)); }
bool validSeconds(const std::vector<double>& v, bool zeroAllowed) {
  return std::all_of(v.begin(), v.end(), [&](double s) { return validSeconds(s, zeroAllowed); });
}

// Step times of the state (absent: empty), each finite and > 0 (a median of them paces the plans; 0 is
// "not measured" where zeroAllowed).
template <class T>
T stateSeconds(const nlohmann::json& j, const char* key, bool zeroAllowed) {
  if (!j.contains(key)) return T{};
  T v;
  try {
    v = j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    ADAPREC_FAIL(ErrorCode::kMismatch, "checkpoint's controller state: " << key << " is not a list of seconds");
  }
  bool ok = true;
  for (const auto& x : v) ok = ok && validSeconds(x, zeroAllowed);
  ADAPREC_CHECK(ok, ErrorCode::kMismatch, "checkpoint's controller state: " << key << " holds an invalid time");
  return v;
}

}  // namespace

PrecisionController::PrecisionController(ControllerConfig config)
    : config_(std::move(config)), nextPhase_(config_.firstPhaseStep) {
  config_.check();
  config_.baseline();  // rejects "adaptive" and unknown formats
  for (const std::string& c : config_.candidates) specs_.push_back(parseFormatSpec(c));
  stepSeconds_.assign(specs_.size(), 0.0);
  stepSamples_.assign(specs_.size(), {});
}

void PrecisionController::setStepSamples(std::size_t candidate, std::vector<double> samples) {
  stepSeconds_[candidate] = median(samples);
  stepSamples_[candidate] = std::move(samples);
}

void PrecisionController::apply(SpeculativeTrainer& trainer, std::size_t candidate, bool resetFeedback) {
  applied_ = true;
  trainer.setFormat(specs_[candidate], config_.candidates[candidate], resetFeedback);
}

std::string PrecisionController::saveState() const {
  nlohmann::json j{{"next_phase", nextPhase_},   {"current", current_},
                   {"decisions", decisions_},    {"skipped_phases", skippedPhases_},
                   {"overhead_s", overheadSeconds_}, {"step_samples_s", stepSamples_},
                   {"candidates", config_.candidates}};
  if (lastChoice_ != kNoBaseline) {  // the back-off's memory (absent: no decision yet)
    j["last_choice"] = lastChoice_;
    j["repeats"] = repeats_;
  }
  return j.dump();
}

void PrecisionController::loadState(const std::string& state, SpeculativeTrainer& trainer) {
  if (state.empty()) return;  // a fresh run
  const nlohmann::json j = parseState(state);
  // The state holds candidates by index: resumed with another --candidates (reordered, one dropped)
  // the same index is another format, and training would go on in it without a word. Absent from
  // checkpoints written before 2026-12-02: not checked.
  if (j.contains("candidates")) {
    ADAPREC_CHECK(j["candidates"].is_array() && j["candidates"].size() == config_.candidates.size() &&
                      std::equal(config_.candidates.begin(), config_.candidates.end(), j["candidates"].begin(),
                                 [](const std::string& a, const nlohmann::json& b) { return b.is_string() && b == a; }),
                  ErrorCode::kMismatch,
                  "the checkpoint was written with candidates " << j["candidates"].dump() << ", this run has "
                                                                << nlohmann::json(config_.candidates).dump()
                                                                << " (resume with the same --candidates, in the same order)");
  }
  const std::uint64_t steps = std::uint64_t{1} << 53;  // beyond, steps are not exact as doubles
  nextPhase_ = stateCount(j, "next_phase", steps);
  current_ = stateCount(j, "current", specs_.size() - 1);
  decisions_ = stateCount(j, "decisions", steps);
  ADAPREC_CHECK(j.contains("overhead_s") && j["overhead_s"].is_number() && j["overhead_s"].get<double>() >= 0,
                ErrorCode::kMismatch, "checkpoint's controller state: overhead_s " << j.value("overhead_s", nlohmann::json()).dump());
  overheadSeconds_ = j["overhead_s"].get<double>();
  // Absent from checkpoints written before pruning: the step times are then measured again.
  skippedPhases_ = j.contains("skipped_phases") ? stateCount(j, "skipped_phases", steps) : 0;
  // Absent from checkpoints written before the back-off: its count starts over at the next decision.
  lastChoice_ = j.contains("last_choice") ? stateCount(j, "last_choice", specs_.size() - 1) : kNoBaseline;
  // Counted up to --max-doublings (a run resumed with a lower one goes on from there).
  repeats_ = j.contains("repeats") ? static_cast<unsigned>(std::min<std::uint64_t>(
                                         stateCount(j, "repeats", 0xFFFFFFFFu), config_.maxContinuationDoublings))
                                   : 0;
  const auto samples = stateSeconds<std::vector<std::vector<double>>>(j, "step_samples_s", false);
  if (samples.size() == stepSamples_.size()) {
    for (std::size_t c = 0; c < samples.size(); ++c) {
      if (!samples[c].empty()) setStepSamples(c, samples[c]);
    }
  } else {  // written before the samples were kept: each median as one sample
    const auto saved = stateSeconds<std::vector<double>>(j, "step_s", true);
    for (std::size_t c = 0; c < saved.size() && saved.size() == stepSamples_.size(); ++c) {
      if (saved[c] > 0) setStepSamples(c, {saved[c]});
    }
  }
  // The checkpoint restored the residuals of the run so far: clearing them would break bit-identity.
  // Before the first phase nothing was chosen yet: the trainer's own format (fp32) stays.
  if (decisions_ + skippedPhases_ > 0) apply(trainer, current_, false);
}

bool PrecisionController::beforeStep(SpeculativeTrainer& trainer) {
  if (trainer.stepsDone() < nextPhase_ || !config_.phaseFits(trainer.stepsDone(), trainer.totalSteps())) {
    return false;
  }
  runPhase(trainer);
  return true;
}

void PrecisionController::runPhase(SpeculativeTrainer& trainer) {
  const double phaseStart = now();
  const std::size_t n = specs_.size();
  PhaseMeasurements phase;
  phase.start = trainer.stepsDone();
  const std::uint64_t start = phase.start;
  phase.observations.resize(n);
  phase.branchSeconds.assign(n, 0.0);
  phase.pruned.assign(n, "");
  phase.boundedBy.assign(n, "");
  phase.remainingSteps = trainer.totalSteps() - start;
  for (std::uint64_t s = 0; s <= phase.remainingSteps; ++s) {  // every horizon is within these
    phase.learningRates.push_back(trainer.learningRate(start + s));
  }
  const std::unique_ptr<TrainingState> base = trainer.snapshot();
  bool atBase = true;  // the trainer holds base's state
  std::vector<std::vector<double>> probeSamples(n);
  // 1. Pruning (pruning.hpp): a candidate met for the first time trains probeSteps steps to measure
  // its step time; they stay the start of its branch if it is speculated. The probes are interleaved,
  // one step of each candidate per round (each from its own state), so that a disturbance of the
  // machine lasting a few steps lands on several candidates' samples rather than on all of one
  // candidate's: probed back to back, a 0.6 s disturbance during fp32's three steps made compression
  // look 25 % faster on shared memory, and a phase that should have been skipped speculated
  // (docs/results.md, "Regret"). The first round goes in the candidates' order, the others fastest
  // first, and a candidate whose verdicts more samples could not change stops (probeSettled): the
  // fast ones' second samples give the spread that lets the slow ones stop after one. Each sample is
  // agreed as it is taken, so every rank probes the same steps.
  std::vector<std::unique_ptr<TrainingState>> probed(n);
  if (config_.prune) {
    const std::uint64_t firstEvaluation = config_.speculativeSteps / config_.evalPoints;  // probe steps end by then
    const std::uint64_t probe = std::min(config_.probeSteps, firstEvaluation);
    // Beyond `probe` only while contested (probeContested): two candidates that can both pay, whose
    // test against each other is not settled.
    const std::uint64_t contestedProbe = std::max(probe, std::min(config_.contestedProbeSteps, firstEvaluation));
    std::vector<double> probeSeconds(n, 0.0);
    // Every candidate's samples so far: an earlier phase's where it was measured, else this probe's.
    const auto samplesSoFar = [&] {
      std::vector<std::vector<double>> samples = stepSamples_;
      for (std::size_t c = 0; c < n; ++c) {
        if (stepSeconds_[c] == 0) samples[c] = probeSamples[c];
      }
      return samples;
    };
    std::vector<std::size_t> order(n);
    for (std::size_t c = 0; c < n; ++c) order[c] = c;
    std::vector<std::vector<double>> stepsSoFar(n);  // this phase's probe steps, sampled or not
    for (std::uint64_t round = 0; round < contestedProbe; ++round) {
      if (round > 0) {  // fastest first, by every step of this probe (an earlier phase's median)
        std::vector<double> seconds = stepSeconds_;
        for (std::size_t c = 0; c < n; ++c) {
          if (seconds[c] == 0) seconds[c] = median(stepsSoFar[c]);
        }
        order = speculationOrder(seconds);
      }
      for (const std::size_t c : order) {
        const std::size_t taken = stepsSoFar[c].size();
        if (stepSeconds_[c] > 0 || taken >= contestedProbe) continue;
        if (!probeSamples[c].empty() && (taken >= probe ? !probeContested(config_, samplesSoFar(), c)
                                                        : probeSettled(config_, samplesSoFar(), c))) {
          continue;
        }
        const double probeStart = now();
        if (round == 0) {
          if (!atBase) trainer.restore(*base);
          apply(trainer, c);
        } else {
          trainer.restore(*probed[c]);
          apply(trainer, c, false);  // the probe's own residuals
        }
        // The phase's first step is not a sample: it carries the run's one-off costs (1.6x the next
        // steps on shared memory, 1.25x at 100 Mbit/s, 2026-12-07), and a candidate may settle on one
        // sample. It orders the next rounds like any other step.
        const bool warmUp = atBase && probe >= 2;
        const std::vector<double> seconds = agreedSamples(trainer, trainer.train(1));
        if (!warmUp) probeSamples[c].insert(probeSamples[c].end(), seconds.begin(), seconds.end());
        stepsSoFar[c].insert(stepsSoFar[c].end(), seconds.begin(), seconds.end());
        probed[c] = trainer.snapshot();
        probeSeconds[c] += now() - probeStart;
        atBase = false;
      }
    }
    for (std::size_t c = 0; c < n; ++c) {
      if (stepSeconds_[c] > 0) continue;
      setStepSamples(c, probeSamples[c]);  // each agreed when taken
      phase.branchSeconds[c] = trainer.maxOverRanks(probeSeconds[c]);
    }
    const std::vector<bool> notFaster = notFasterVerdicts(config_, stepSamples_);
    for (std::size_t c = 0; c < n; ++c) {
      if (notFaster[c]) phase.pruned[c] = kPrunedNotFaster;
    }
    phase.pruningStepSeconds = stepSeconds_;
    phase.pruningStepSamples = stepSamples_;
  }
  for (std::size_t c = 0; c < n; ++c) {
    phase.observations[c].name = config_.candidates[c];
    phase.observations[c].secondsPerStep = stepSeconds_[c];
  }
  const std::size_t baseline = config_.baseline();
  const std::size_t sole = config_.prune ? soleCandidate(config_, phase.pruned, stepSeconds_) : kNoBaseline;
  if (sole != kNoBaseline) {
    if (sole != baseline && phase.pruned[baseline].empty()) phase.pruned[baseline] = kPrunedStoodIn;
    if (probed[sole]) {
      skipPhase(trainer, phase, phaseStart, sole, probed[sole].get(), true);
    } else {
      skipPhase(trainer, phase, phaseStart, sole, atBase ? nullptr : base.get(), false);
    }
    return;
  }
  // 2. Speculation in branchOrder (the fastest first, then most bits first), each candidate from the
  // phase's start (or its probe's end).
  if (!atBase) trainer.restore(*base);
  atBase = true;
  const ValidationResult baseEval = trainer.evaluate(config_.validationImages);
  phase.validationImages = baseEval.images;
  std::vector<std::unique_ptr<TrainingState>> branchEnds(n);
  for (const std::size_t c : branchOrder(config_, stepSeconds_, phase.pruned)) {
    if (config_.prune) phase.speculationOrder.push_back(config_.candidates[c]);
    if (isPruned(phase, c)) continue;
    if (config_.prune && c == baseline && standIn(config_, phase) != kNoBaseline) {
      phase.pruned[c] = kPrunedStoodIn;
      continue;
    }
    if (config_.prune) {
      if (const BranchVerdict verdict = beforeBranch(config_, phase, c); verdict.pruned != nullptr) {
        phase.pruned[c] = verdict.pruned;
        if (verdict.boundedBy != kNoBaseline) phase.boundedBy[c] = config_.candidates[verdict.boundedBy];
        continue;
      }
    }
    if (probed[c]) {
      trainer.restore(*probed[c]);
    } else if (!atBase) {
      trainer.restore(*base);
    }
    apply(trainer, c, !probed[c]);  // a probed branch keeps its residuals
    CandidateObservation& obs = phase.observations[c];
    obs.steps.push_back(0);
    obs.accuracies.push_back(baseEval.accuracy);
    const double branchStart = now();
    // The branch's evaluations are speculation, not training: a run without the controller makes no
    // such evaluation, so they count as overhead even in the chosen branch (until 2026-12-07 its two
    // evaluations were counted as its training, and overhead_s and the bound on it left them out).
    double branchEvaluationSeconds = 0;
    std::vector<double> branchSamples = probeSamples[c];  // a probed branch's first steps are its probe's
    for (int k = 1; k <= config_.evalPoints; ++k) {
      const std::uint64_t until = start + config_.speculativeSteps * k / config_.evalPoints;
      const std::vector<double> seconds = trainer.train(until - trainer.stepsDone());
      branchSamples.insert(branchSamples.end(), seconds.begin(), seconds.end());
      obs.steps.push_back(static_cast<double>(trainer.stepsDone() - start));
      const double evaluationStart = now();
      obs.accuracies.push_back(trainer.evaluate(config_.validationImages).accuracy);
      branchEvaluationSeconds += now() - evaluationStart;
    }
    // The median step time: one-off costs (the first use of "fastest" measures every format) must not
    // count as the candidate's speed. The slowest rank sets the pace of a synchronous step, and every
    // rank must decide on the same numbers.
    const std::vector<double> agreed = agreedSamples(trainer, branchSamples);
    obs.secondsPerStep = median(agreed);
    if (config_.prune) setStepSamples(c, agreed);
    phase.branchSeconds[c] += trainer.maxOverRanks(now() - branchStart - branchEvaluationSeconds);
    branchEnds[c] = trainer.snapshot();
    atBase = false;
    phase.speculationSeconds = trainer.maxOverRanks(now() - phaseStart);
  }
  phase.previousChoice = lastChoice_;
  phase.previousRepeats = repeats_;
  const PhasePlan plan = planPhase(config_, phase);
  // Identical inputs give identical fits, but one agreement makes "every rank follows rank 0" explicit.
  std::uint64_t agreed[2] = {plan.decision.choice, plan.continuationSteps()};
  trainer.agree(agreed);
  current_ = static_cast<std::size_t>(agreed[0]);
  repeats_ = plan.confirmed ? std::min(repeats_ + 1, config_.maxContinuationDoublings) : 0;
  lastChoice_ = current_;
  ADAPREC_CHECK(branchEnds[current_] != nullptr, ErrorCode::kMismatch,
                "the agreed choice " << config_.candidates[current_] << " was not speculated on this rank");
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

void PrecisionController::skipPhase(SpeculativeTrainer& trainer, const PhaseMeasurements& phase, double phaseStart,
                                    std::size_t b, const TrainingState* resumeFrom, bool fromProbe) {
  // Only b is left (soleCandidate): no branch, no evaluation, no decision. Training goes on in b from
  // its probe's end (its probe steps are training, not overhead) or from the phase's start.
  if (resumeFrom != nullptr) trainer.restore(*resumeFrom);
  // Residuals: a probe's are its own; the phase's start had the current format's.
  if (fromProbe) {
    apply(trainer, b, false);
  } else if (current_ != b || !applied_) {  // before the first phase the trainer runs fp32
    apply(trainer, b, true);
  }
  current_ = b;
  nextPhase_ = trainer.stepsDone() + config_.continuationSteps;
  ++skippedPhases_;
  const double phaseSeconds = trainer.maxOverRanks(now() - phaseStart);
  const double overhead = phaseSeconds - phase.branchSeconds[b];
  overheadSeconds_ += overhead;
  nlohmann::json cands = nlohmann::json::array();
  std::string pruned;
  const std::size_t base = config_.baseline();
  for (std::size_t c = 0; c < specs_.size(); ++c) {
    nlohmann::json x{{"name", config_.candidates[c]}, {"step_s", stepSeconds_[c]}, {"samples_s", stepSamples_[c]}};
    if (isPruned(phase, c)) {
      x["pruned"] = phase.pruned[c];
      if (phase.pruned[c] == kPrunedStoodIn) {
        x["stand_in"] = config_.candidates[b];
      } else {
        pruned += (pruned.empty() ? "" : ", ") + config_.candidates[c];
      }
    }
    cands.push_back(x);
  }
  nlohmann::json j{{"event", "speculation_skipped"}, {"step", phase.start},        {"epoch", trainer.epochAt(phase.start)},
                   {"wall_s", trainer.wallSeconds()}, {"choice", config_.candidates[b]}, {"phase_s", phaseSeconds},
                   {"overhead_s", overhead},          {"min_speedup", config_.minSpeedup}, {"candidates", cands}};
  char line[640];
  if (b == base) {
    std::snprintf(line, sizeof line,
                  "\nstep %llu: speculation skipped, no candidate is shown %.0f%% faster than %s or a more precise one "
                  "(%s); overhead %.1f s\n",
                  static_cast<unsigned long long>(phase.start), 100 * config_.minSpeedup, config_.candidates[b].c_str(),
                  pruned.c_str(), overhead);
  } else {
    std::snprintf(line, sizeof line,
                  "\nstep %llu: speculation skipped, only %s is left (it stands in for %s; not shown %.0f%% faster: "
                  "%s); overhead %.1f s\n",
                  static_cast<unsigned long long>(phase.start), config_.candidates[b].c_str(),
                  config_.candidates[base].c_str(), 100 * config_.minSpeedup, pruned.empty() ? "none" : pruned.c_str(),
                  overhead);
  }
  trainer.record(j.dump(), line);
}

void PrecisionController::finish(SpeculativeTrainer& trainer) {
  const double wall = trainer.wallSeconds();
  nlohmann::json j{{"event", "controller_summary"},
                   {"decisions", decisions_},
                   {"skipped_phases", skippedPhases_},
                   {"overhead_s", overheadSeconds_},
                   {"wall_s", wall},
                   {"overhead_fraction", overheadSeconds_ / std::max(1e-9, wall)}};
  char line[160];
  std::snprintf(line, sizeof line, "\ncontroller: %zu decisions, %zu phases skipped, overhead %.1f s of %.1f s (%.1f%%)\n",
                decisions_, skippedPhases_, overheadSeconds_, wall, 100.0 * overheadSeconds_ / std::max(1e-9, wall));
  trainer.record(j.dump(), line);
}

}  // namespace adaprec::controller
