// The controller's decision rule, separate from the training loop so that it can be tested on
// constructed cases. Input: for each candidate precision, its speculative branch's validation curve
// (all branches start from the same state at step 0 of the phase) and its measured time per step.
// The predictor fits all curves jointly (under the trainer's learning-rate schedule when its rates are
// not constant: DecisionConfig::learningRates) and predicts each candidate's accuracy at its horizon
// H_c (end of its branch + the continuation phase; one H for all, or per candidate). Rules:
//   gain-per-second (the original AdaPrec):  score_c = (E[acc_c(H_c)] - acc(0)) / (H_c * secondsPerStep_c)
//   risk-aware: P(gain_c / time_c > gain_b / time_b) for the baseline b (fp32), with the predictive
//               distributions approximated as independent normals; the baseline scores 0.5, so a
//               candidate is chosen only if it is more likely than not to beat the baseline's rate.
// When no candidate is predicted to gain anything (a converged phase), the highest predicted accuracy
// wins instead of the slowest loser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace adaprec::predictor {
class LrSchedule;
}

namespace adaprec::controller {

enum class DecisionRule { kGainPerSecond, kRiskAware };

inline constexpr std::size_t kNoBaseline = static_cast<std::size_t>(-1);

struct CandidateObservation {
  std::string name;
  std::vector<double> steps;       // phase-relative, strictly increasing, starting at 0 (shared start)
  std::vector<double> accuracies;  // validation accuracy at those steps
  double secondsPerStep = 0;       // measured (max over ranks), > 0
};

struct CandidateVerdict {
  std::string name;
  double horizonSteps = 0;                    // phase-relative step the prediction is for
  double predictedMean = 0, predictedSd = 0;  // accuracy at the horizon
  double gain = 0;                            // predictedMean - accuracy at step 0
  double seconds = 0;                         // horizon * secondsPerStep
  double score = 0;                           // the rule's score (larger is better)
  double probabilityBeatsBaseline = 0.5;      // P(rate_c > rate_baseline)
};

struct Decision {
  std::size_t choice = 0;
  std::vector<CandidateVerdict> verdicts;
  double fitSeconds = 0;
  std::string lrSchedule = "none";  // the predictor's schedule: "none" or "points:N" (phaseSchedule)
  // Whether the predictions went through the schedule's default recalibration map
  // (predictor::ModelOptions::scheduleRecalibration: a schedule that anneals).
  bool scheduleMap = false;
};

struct DecisionConfig {
  DecisionRule rule = DecisionRule::kGainPerSecond;
  double horizonSteps = 0;      // phase-relative step to predict at (> last observed step)
  // Per candidate, replacing horizonSteps when not empty: the controller gives every candidate the same
  // continuation *time*, so a faster candidate is judged over more steps (its own continuation).
  std::vector<double> horizons;
  std::size_t baseline = 0;     // index of the baseline candidate (fp32) for the risk-aware rule
  // kNoBaseline: the baseline was not speculated (pruning.hpp: it cannot win); the risk-aware rule then
  // compares every candidate with this ceiling on the baseline's rate (accuracy per second), which
  // makes each probability a lower bound of the one against the baseline's own branch.
  double baselineRateCeiling = 0;
  // With baseline == kNoBaseline: a speculated candidate whose curve stands in for the baseline's
  // (pruning.hpp, kPrunedStoodIn), or kNoBaseline. The risk-aware rule then compares with the
  // baseline as that candidate's curve predicted at standInHorizon, run at the baseline's
  // standInSecondsPerStep, instead of the ceiling.
  std::size_t standIn = kNoBaseline;
  double standInHorizon = 0, standInSecondsPerStep = 0;
  double validationImages = 0;  // images behind each accuracy (binomial noise in the fit); 0: unknown
  // The trainer's learning rate at phase-relative steps 0, 1, ... up to the largest horizon (empty:
  // not given; beyond the last one the last rate holds). When the rates are not all equal, the
  // predictor fits the schedule-aware model with them as its schedule (phaseSchedule); when empty or
  // all equal, the model without a schedule, exactly.
  std::vector<double> learningRates;
};

// The schedule decide() gives the predictor for these phase-relative rates (rate i at step i): none
// (nullptr) when they are empty or all equal (a constant rate: the model without a schedule), else
// predictor::LrSchedule::fromPoints over steps 0..n-1. kInvalidArgument for a negative or non-finite rate.
std::shared_ptr<const predictor::LrSchedule> phaseSchedule(const std::vector<double>& learningRates);

// P(a's rate > b's rate), each rate (gain / seconds) a normal with sd predictedSd / seconds, the two
// independent: the risk-aware rule's approximation.
double probabilityRateExceeds(const CandidateVerdict& a, const CandidateVerdict& b);

// Throws Error(kInvalidArgument) on malformed observations (no candidates, unequal starts, ...).
// Remembers the last few fits and predictions on the calling thread, keyed by every input exactly (a
// phase plans itself before each branch and again to decide: decision.cpp), so a repeated call costs
// no fit and returns what a new fit would.
Decision decide(const std::vector<CandidateObservation>& candidates, const DecisionConfig& config);

const char* decisionRuleName(DecisionRule rule);
DecisionRule parseDecisionRule(const std::string& name);  // "gain" | "risk"

// How many fits decide() has run on this thread (a call its memory answers runs none): for tests.
std::uint64_t decisionFits();

}  // namespace adaprec::controller
