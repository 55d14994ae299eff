// The AdaPrec speculative precision controller (`--format adaptive`). Training alternates phases:
//   1. speculative learning: from the current state, every candidate precision trains a short branch
//      of speculativeSteps, evaluated evalPoints times on a fixed held-out validation subset, its
//      time per step measured (max over ranks);
//   2. prediction: the learning-curve predictor fits all branch curves jointly (shared start) and
//      predicts each candidate's validation accuracy at the end of branch + continuation, with its sd;
//   3. continuation: training goes on from the end of the chosen candidate's own branch (its
//      speculative steps are kept), in that precision, for at least continuationSteps and long enough
//      that the abandoned speculation is at most maxOverhead of the phase's time; then back to 1.
// Every candidate is judged over the continuation it would get (the same number of seconds for all,
// hence more steps for a faster one), so "gain per second" compares candidates at equal wall time.
// Overhead = the abandoned branches + the evaluations + the fit; it is logged per decision and in total.
// The other branches' error-feedback residuals are dropped at every branch switch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adaprec/format.hpp"
#include "policy/decision.hpp"
#include "trainer/trainer.hpp"

namespace adaprec::policy {

struct ControllerConfig {
  std::vector<std::string> candidates = {"fp32", "fp16", "fp8s", "table4", "table2", "fastest"};
  std::uint64_t speculativeSteps = 30;    // per candidate branch
  int evalPoints = 3;                     // validation evaluations along each branch
  std::uint64_t continuationSteps = 300;  // after each decision
  // Steps trained in fp32 before the first speculative phase: branches of a model that has learnt
  // something predict more than those of an untrained one. 0: the first phase at step 0.
  std::uint64_t firstPhaseStep = 0;
  std::size_t validationImages = 1000;    // of the held-out validation set
  // Upper bound on the share of a phase's wall time spent on speculation that is thrown away (the
  // other candidates' branches, the evaluations): the continuation is lengthened beyond
  // continuationSteps until the abandoned seconds are at most this fraction of the phase. Where a
  // slow candidate's branch is expensive (fp32 on a slow network) the controller speculates less
  // often. 1 keeps the continuation at exactly continuationSteps (the original fixed phases).
  double maxOverhead = 0.25;
  DecisionRule rule = DecisionRule::kGainPerSecond;
  void check() const;
};

class PrecisionController final : public trainer::StepHook {
 public:
  explicit PrecisionController(ControllerConfig config);
  void beforeStep(trainer::Trainer& trainer) override;
  void finish(trainer::Trainer& trainer) override;
  double overheadSeconds() const { return overheadSeconds_; }
  std::size_t decisions() const { return decisions_; }

 private:
  void runPhase(trainer::Trainer& trainer);
  // Switches every layer to the candidate; resetFeedback clears the error-feedback residuals (at
  // branches and decisions), a resume keeps the ones its checkpoint restored.
  void apply(trainer::Trainer& trainer, std::size_t candidate, bool resetFeedback = true);
  void saveState(trainer::Trainer& trainer) const;
  void loadState(trainer::Trainer& trainer);

  ControllerConfig config_;
  std::vector<FormatSpec> specs_;
  std::size_t baseline_ = 0;
  bool loaded_ = false;
  std::uint64_t nextPhase_ = 0;
  std::size_t current_ = 0;
  std::size_t decisions_ = 0;
  double overheadSeconds_ = 0;
};

}  // namespace adaprec::policy
