// One phase's decision from its measurements, shared by every user of the controller: adaprec-train
// (through PrecisionController) and the C API (any trainer that measures its own branches). Given each
// candidate branch's validation curve, seconds per step and wall seconds, it sets each candidate's
// continuation (at least continuationSteps, and long enough that the abandoned speculation is at most
// maxOverhead of the phase), predicts each candidate at the end of its own continuation, applies the
// rule (decision.hpp), and writes the decision record adaprec-train logs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controller/decision.hpp"

namespace adaprec::controller {

struct ControllerConfig {
  // Not "fastest" (still allowed): it picks each layer's format by speed alone, between nodes table1
  // without error feedback for the large layers, and its branch learnt nothing in every seed of the
  // regret benchmark at 1 Gbit/s and 100 Mbit/s while its first use measured every format on the link
  // (5-10 s of overhead per run; docs/results.md, "Regret"). The Python driver's default too.
  std::vector<std::string> candidates = {"fp32", "fp16", "fp8s", "table4", "table2"};
  std::uint64_t speculativeSteps = 30;    // per candidate branch
  int evalPoints = 3;                     // validation evaluations along each branch
  std::uint64_t continuationSteps = 300;  // after each decision
  // Steps trained before the first speculative phase (adaprec-train: in fp32, --spec-start): branches
  // of a model that has learnt something predict more than those of an untrained one. 0: the first
  // phase at step 0.
  std::uint64_t firstPhaseStep = 0;
  std::size_t validationImages = 1000;    // of the held-out validation set
  // Upper bound on the share of a phase's wall time spent on speculation that is thrown away (the
  // other candidates' branches, the evaluations): the continuation is lengthened beyond
  // continuationSteps until the abandoned seconds are at most this fraction of the phase. Where a
  // slow candidate's branch is expensive (fp32 on a slow network) the controller speculates less
  // often. 1 keeps the continuation at exactly continuationSteps (the original fixed phases).
  // 0.1 since 2026-12-07 (0.25 before): the share of the time a user gives up to the controller is
  // what the regret goal allows it (within 1.10x the best fixed format); at 100 Mbit/s a 936-step run
  // spent 15.6 s on a second phase that confirmed the first, 15 % of its time on the controller in all
  // (docs/results.md, "The bound on the overhead").
  double maxOverhead = 0.1;
  // Back-off: a decision that confirms the previous decision's choice (keeps it, or switches to a
  // candidate not clearly better: kClearImprovement) doubles its continuation (after the rule, which
  // still compares candidates over their planned continuations), again for each decision in a row
  // that confirms, at most this many times (2^3 = 8x); a clear switch starts over. A long run whose choice is settled then
  // speculates ever less often instead of spending up to maxOverhead of every phase (at 100 Mbit/s a
  // phase's abandoned branches cost 14-19 s, and late phases flip between table4 and table2 on noise).
  // 0: none; never with maxOverhead 1 (fixed phases).
  unsigned maxContinuationDoublings = 3;
  DecisionRule rule = DecisionRule::kGainPerSecond;
  // Pruning by measured step time (pruning.hpp): a candidate is speculated only when its steps are at
  // least minSpeedup faster than the baseline's, and only while even a perfect branch of it could
  // still outscore the branches already run. Off: every candidate is speculated at every phase.
  bool prune = true;
  double minSpeedup = 0.10;
  // Steps each candidate trains, the first time the controller meets it, to measure its step time.
  // They are the start of its branch when it is speculated (at most speculativeSteps / evalPoints).
  std::uint64_t probeSteps = 3;
  // At most this many (when more than probeSteps) for a candidate while its test against another
  // candidate that can pay is not settled (pruning.hpp, probeContested). <= probeSteps: never longer.
  std::uint64_t contestedProbeSteps = 6;
  void check() const;
  // The candidates comma-separated ("fp32,fp16,..."): adaprec-train's --candidates form, and the C API's
  // AdaPrec_ControllerDefaultCandidates.
  std::string candidateList() const;
  // Whether a phase beginning at `step` has room for its branches before training ends at totalSteps
  // (near the end the current choice simply runs out; adaprec-train warns when the first one cannot).
  bool phaseFits(std::uint64_t step, std::uint64_t totalSteps) const { return step + speculativeSteps <= totalSteps; }
  // The index of fp32 among the candidates (the risk-aware rule's baseline), else 0. Throws
  // Error(kInvalidArgument) for a candidate that is no format or is "adaptive".
  std::size_t baseline() const;
};

// What one phase measured (every number already agreed across ranks).
struct PhaseMeasurements {
  std::uint64_t start = 0;           // absolute step the branches started from
  std::uint64_t remainingSteps = 0;  // steps from start to the end of training (caps the horizons)
  double speculationSeconds = 0;     // wall time of all branches and evaluations
  std::uint64_t validationImages = 0;
  // One per candidate, in the config's order. A pruned candidate has only its name and secondsPerStep.
  std::vector<CandidateObservation> observations;
  // Per candidate: "" when speculated, else why not (pruning.hpp: "not_faster", "dominated", "bounded",
  // "stood_in"); empty:
  // every candidate was speculated.
  std::vector<std::string> pruned;
  // Per candidate pruned as "bounded": the branch that bounded it (pruning.hpp, beforeBranch); else empty.
  std::vector<std::string> boundedBy;
  // With pruning: the candidates in the order they were considered for a branch (for the record: a
  // dominance verdict depends on the branches run before it).
  std::vector<std::string> speculationOrder;
  // With pruning: each candidate's seconds per step before this phase's branches, which the
  // not_faster verdicts used (a branch then replaces its own with its median).
  std::vector<double> pruningStepSeconds;
  std::vector<std::vector<double>> pruningStepSamples;  // the samples behind them (the test's input)
  // Wall time of each candidate's branch: its probe and branch steps, not its evaluations (which are
  // in speculationSeconds only: overhead whichever branch is chosen).
  std::vector<double> branchSeconds;
  std::vector<double> learningRates;               // from phase-relative step 0; empty: unknown
  // The previous decision's choice (kNoBaseline: none yet) and how many decisions in a row up to it
  // confirmed the choice before them (PhasePlan::confirmed; 0: none): the back-off
  // (ControllerConfig::maxContinuationDoublings).
  std::size_t previousChoice = kNoBaseline;
  unsigned previousRepeats = 0;
};

// A switch from the previous choice is clear (it resets the back-off) when the chosen candidate's rate
// beats the previous choice's with at least this probability (probabilityRateExceeds).
inline constexpr double kClearImprovement = 0.90;

// The longest continuation planPhase gives (2^53 steps: exact as a double, and far beyond any run).
inline constexpr double kMaxContinuationSteps = 9007199254740992.0;

struct PhasePlan {
  DecisionConfig decisionConfig;
  Decision decision;
  std::vector<double> continuations;  // per candidate, steps after its branch
  // The previous decision's choice kept, or left for a candidate not clearly better (kClearImprovement):
  // the back-off counts it.
  bool confirmed = false;
  unsigned doublings = 0;             // of the chosen continuation by the back-off
  // The seconds over which the rule judged every speculated candidate (the shortest planned horizon in
  // seconds; decisionConfig.horizons are the planned ones, the verdicts' horizonSteps the judged ones).
  double judgedSeconds = 0;
  std::uint64_t continuationSteps() const {
    return static_cast<std::uint64_t>(continuations[decision.choice]);
  }
};

// Fits the speculated candidates and chooses among them; a pruned candidate gets its continuation and
// horizon but no prediction (NaN). Throws Error(kInvalidArgument) on malformed measurements (see
// decide()) or when every candidate was pruned.
PhasePlan planPhase(const ControllerConfig& config, const PhaseMeasurements& phase);

// How the phase ended, for its record.
struct PhaseOutcome {
  std::size_t choice = 0;               // the agreed choice (rank 0's)
  std::uint64_t continuationSteps = 0;  // the agreed continuation
  std::size_t phase = 0;                // 1 for the first decision
  double epoch = 0;                     // of the phase's start
  double wallSeconds = 0;               // of the trainer when the phase ended
  double phaseSeconds = 0;              // the phase's wall time (branches + evaluations + restore)
  double overheadSeconds = 0;           // phaseSeconds minus the chosen branch's (its steps only)
};

// The `"event":"decision"` record (one JSON object) and the one-line human summary of a decision.
nlohmann::json decisionRecord(const ControllerConfig& config, const PhaseMeasurements& phase,
                              const PhasePlan& plan, const PhaseOutcome& outcome);
std::string decisionSummary(const ControllerConfig& config, const PhaseMeasurements& phase, const PhasePlan& plan,
                            const PhaseOutcome& outcome);

}  // namespace adaprec::controller
