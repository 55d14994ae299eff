// The AdaPrec speculative precision controller (`--format adaptive`). Training alternates phases:
//   0. pruning (pruning.hpp): each candidate's step time is measured once (a few probe steps, fewer
//      once its verdicts are settled); a
//      candidate not enough faster than fp32, dominated by a faster branch already run, or bounded by
//      a more precise one, gets no branch; when only one candidate is left to choose (fp32, or fp16 standing in for it) the phase is
//      skipped (no branch, no evaluation, no decision) and training goes on in it;
//   1. speculative learning: from the current state, every remaining candidate (the fastest first, then most bits
//      first: pruning.hpp, branchOrder) trains a short branch
//      of speculativeSteps, evaluated evalPoints times on a fixed held-out validation subset, its
//      time per step measured (max over ranks);
//   2. prediction: the learning-curve predictor fits all branch curves jointly (shared start) and
//      predicts each candidate's validation accuracy at the end of branch + continuation, with its sd;
//   3. continuation: training goes on from the end of the chosen candidate's own branch (its
//      speculative steps are kept), in that precision, for at least continuationSteps and long enough
//      that the abandoned speculation is at most maxOverhead of the phase's time; then back to 1.
// Every candidate is judged over the continuation it would get (roughly the same number of seconds
// for all, hence more steps for a faster one; not equal: a slow candidate's own long branch shortens
// its continuation, so it is judged over fewer seconds, a higher rate on a concave curve: docs/trainer.md).
// Overhead = the abandoned branches + the evaluations + the fit; it is logged per decision and in total.
// The other branches' error-feedback residuals are dropped at every branch switch.
//
// It drives any trainer through SpeculativeTrainer (speculative_trainer.hpp); the decision itself is
// planPhase (phase_plan.hpp), which the C API exposes to trainers that run their own branches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adaprec/format.hpp"
#include "controller/phase_plan.hpp"
#include "controller/speculative_trainer.hpp"

namespace adaprec::controller {

class PrecisionController {
 public:
  explicit PrecisionController(ControllerConfig config);
  // Before every regular step: runs a phase when one is due. Returns true when it ran one (the state
  // to save in checkpoints changed).
  bool beforeStep(SpeculativeTrainer& trainer);
  // At the end of training: records the controller_summary.
  void finish(SpeculativeTrainer& trainer);
  // The controller's own state (JSON text) that travels in the trainer's checkpoints. loadState with
  // an empty text is a fresh run; otherwise it re-applies the saved choice, keeping the residuals the
  // checkpoint restored.
  std::string saveState() const;
  void loadState(const std::string& state, SpeculativeTrainer& trainer);
  double overheadSeconds() const { return overheadSeconds_; }
  std::size_t decisions() const { return decisions_; }
  std::size_t skippedPhases() const { return skippedPhases_; }

 private:
  void runPhase(SpeculativeTrainer& trainer);
  // A phase where pruning left one candidate to choose (soleCandidate: the baseline, or fp16 standing
  // in for it): training continues in it from resumeFrom (null: where it is; fromProbe: its probe,
  // whose residuals it keeps).
  void skipPhase(SpeculativeTrainer& trainer, const PhaseMeasurements& phase, double phaseStart, std::size_t choice,
                 const TrainingState* resumeFrom, bool fromProbe);
  // Switches every gradient to the candidate; resetFeedback clears the error-feedback residuals (at
  // branches and decisions), a resume keeps the ones its checkpoint restored.
  void apply(SpeculativeTrainer& trainer, std::size_t candidate, bool resetFeedback = true);
  void setStepSamples(std::size_t candidate, std::vector<double> samples);

  ControllerConfig config_;
  std::vector<FormatSpec> specs_;
  std::uint64_t nextPhase_ = 0;
  std::size_t current_ = 0;
  bool applied_ = false;  // whether a candidate was ever applied (before that, the trainer's fp32)
  std::size_t decisions_ = 0;
  std::size_t skippedPhases_ = 0;  // phases where pruning left one candidate (soleCandidate)
  // The back-off (ControllerConfig::maxContinuationDoublings): the last decision's choice and how many
  // decisions in a row up to it confirmed the choice before them (PhasePlan::confirmed).
  std::size_t lastChoice_ = kNoBaseline;
  unsigned repeats_ = 0;
  double overheadSeconds_ = 0;
  // Per candidate, agreed (pruning): the samples of its latest measurement (its probe steps or its
  // last branch; empty: not measured yet) and their median.
  std::vector<std::vector<double>> stepSamples_;
  std::vector<double> stepSeconds_;
};

}  // namespace adaprec::controller
