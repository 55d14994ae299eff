// Which candidates a phase speculates (issue 19: the controller's overhead where compression cannot
// pay). A branch costs its steps and evaluations whether or not it is chosen, so a candidate that
// cannot be chosen for good reasons is not run:
//   not_faster  its steps are not shown to be at least ControllerConfig::minSpeedup faster than the
//               baseline's (fp32), or than those of a candidate with more bits per value that is not
//               pruned itself, with kFasterConfidence confidence given the step times' own spread:
//               compression that saves under that share of the time cannot repay its own
//               speculation, and a lossier format is not expected to learn more per step than a more
//               precise one (between nodes at 1 Gbit/s table2's step is table4's, and table2 was
//               chosen on its branch's noise in 5 of 6 regret runs, ending below fp32's accuracy).
//               The baseline itself is never pruned this way.
//   dominated   even a perfect branch (accuracy 1 at its planned horizon) would score a lower rate
//               (accuracy gained per second) than the lower bound (kDominanceZ sd below the predicted
//               mean, as the rule judges it: over the run branches' common seconds) of a branch already
//               run. Speculating fastest first lets the fast branches prune the slow. The ceiling is over
//               the candidate's planned horizon, not the rule's common seconds, over which a perfect
//               branch would always win.
//   bounded     a more precise branch already run caps the candidate: the branch of a candidate with
//               more bits per value, predicted over as many of this candidate's steps as the rule's
//               common seconds hold (this candidate's speed), scores no higher a rate than the best
//               branch run (predicted means, as the gain rule reads them). A lossier format is not
//               expected to learn more per step than a more precise one, so that is what it could score
//               at best in expectation, and its branch could win only on its own noise. A bound in
//               expectation, not at 95 % as dominated's: it prunes candidates that are close in speed,
//               where dominated never does. At 1 Gbit/s fp16, fp8s and table2 all pay against fp32
//               within 40 % of one another, and fp8s's branch (1.2 s) ran beside fp16's and table2's in
//               2 of 3 runs on 2026-12-07, each of which chose table2 (docs/results.md, "Branches
//               bounded by a more precise one"). Hence the branch order (branchOrder): the fastest
//               first, then most bits first.
//   stood_in    the baseline (fp32) only: a candidate whose one quantization moves a value by at most
//               kStandInRelativeError (fp16, 2^-11; not bf16's 2^-8, nor any block format) was
//               speculated, shown faster than fp32 (not pruned as not_faster). Its branch is fp32's
//               curve to within the noise of SGD itself (fp16 and fp32 ended 87.10 +- 0.86 and
//               87.25 +- 0.60 % in the regret benchmark's fixed runs), so fp32's branch would cost its
//               steps (the slowest of a phase: 25-35 % of the first phase at 1 Gbit/s) to learn nothing
//               new; fp32, slower on the same curve, could not be chosen. The risk-aware rule compares
//               with fp32 as the stand-in's curve at fp32's horizon and step time
//               (DecisionConfig::standIn).
// Step times are measured once per candidate (up to ControllerConfig::probeSteps, interleaved across
// the candidates, each sample the max over ranks) and replaced by the samples of every branch the
// candidate runs; every input is agreed, so every rank prunes alike. A candidate stops probing early
// once more samples could not change a verdict it takes part in (probeSettled): between nodes the
// slow formats' probes were most of the first phase's overhead (100 Mbit/s: fp32's, fp16's and fp8s's
// 3.6 s of 5.2 s), spent to confirm gaps of 1.5-5x where the verdicts weigh 10 %.
//
// Why a test and not a threshold on medians: on a shared machine three-step medians scatter by
// +-15 % where the true gap between fp32 and compression is ~5 %, so a fixed 10 % threshold was crossed
// by noise in a third of the regret benchmark's shared-memory runs, each paying a whole phase of
// speculation (docs/results.md, "Regret"). The test asks the samples themselves how sure the gap is.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "controller/phase_plan.hpp"

namespace adaprec::controller {

inline constexpr double kDominanceZ = 1.645;  // one-sided 95 %
inline constexpr const char* kPrunedNotFaster = "not_faster";
inline constexpr const char* kPrunedDominated = "dominated";
inline constexpr const char* kPrunedStoodIn = "stood_in";
inline constexpr const char* kPrunedBounded = "bounded";
// The most one quantization may move a value (relative) for a candidate to stand in for the baseline.
inline constexpr double kStandInRelativeError = 0x1p-11;
// not_faster's confidence (one-sided) that a candidate's step is at least minSpeedup faster.
inline constexpr double kFasterConfidence = 0.90;

// probeSettled: a test is settled when its gap is at least kSettledMargins times its margin and at least
// a step-time ratio of kSettledRatio beyond the threshold: the margin alone rests on a spread estimated
// from a few samples, and a candidate's one sample may carry a one-off cost (the run's first step took
// 1.27x the next ones at 100 Mbit/s, 2026-12-07).
inline constexpr double kSettledMargins = 2.0;
inline constexpr double kSettledRatio = 1.3;

// The one-sided kFasterConfidence quantile of Student's t with dof (> 0) degrees of freedom.
double fasterQuantile(double dof);

// True when candidate c's step is not shown to be at least config.minSpeedup faster than candidate
// `than`'s. samples: per candidate, its seconds per step (each > 0; empty: not measured, which only
// candidates other than c and `than` may be). The test is on log step times: each candidate's mean
// (its largest sample left out when it has >= 3: one-off costs such as a format's first use land on
// one step), the spread pooled over every measured candidate; c is faster when mean_c - mean_than
// plus fasterQuantile(dof) standard errors is at most log(1 - minSpeedup). With one sample per
// candidate (no spread to pool) it is the plain threshold on the means.
bool notShownFaster(const ControllerConfig& config, const std::vector<std::vector<double>>& samples, std::size_t c,
                    std::size_t than);

// Every candidate's not_faster verdict (true: pruned), from every candidate's samples (none empty):
// in order of bits per value, most first, each candidate is tested against the baseline and against
// every candidate with more bits per value not pruned before it. Never the baseline; a per-layer
// choice ("fastest", no bits of its own) only against the baseline.
std::vector<bool> notFasterVerdicts(const ControllerConfig& config, const std::vector<std::vector<double>>& samples);

// True when candidate c (at least one sample) needs no more probe steps: every not_faster test it can
// take part in (notFasterVerdicts' pairs: c against the baseline and the candidates with more bits per
// value, and as the reference of the others), with every candidate measured so far (empty: not yet),
// is settled (kSettledMargins, kSettledRatio). Never while no candidate has two samples (no spread).
bool probeSettled(const ControllerConfig& config, const std::vector<std::vector<double>>& samples, std::size_t c);

// True when candidate c (at least one sample) may probe beyond probeSteps, up to
// ControllerConfig::contestedProbeSteps: it and another candidate are both shown faster than the
// baseline (the measured baseline; never c itself), and a not_faster test between the two is not
// settled. Such a test decides which of two candidates that can both pay is speculated, between
// steps that are cheap, and a few samples cannot show a true gap near minSpeedup: at 100 Mbit/s
// table2's step was 12-19 % shorter than table4's in the medians, and in 3 of 7 runs table2 (the best
// fixed format) was pruned as not_faster after 2-3 samples each (docs/results.md). Where nothing is
// shown faster than the baseline (one node), no candidate probes longer.
bool probeContested(const ControllerConfig& config, const std::vector<std::vector<double>>& samples, std::size_t c);

// The median of step-time samples (not empty): a candidate's step time.
double median(std::vector<double> seconds);

// The candidates by step time, fastest first (ties: the config's order): the probe rounds after the
// first, and the start of branchOrder.
std::vector<std::size_t> speculationOrder(const std::vector<double>& secondsPerStep);

// The order to run the branches in: the fastest candidate not pruned (pruned[c] not empty; empty
// vector: none) first, whose branch can dominate the slow ones; then the others most bits per value
// first, a candidate that may stand in for the baseline before the baseline itself (mayStandIn), ties
// fastest first: a more precise branch run early bounds the lossier ones (bounded above), and a stand-in
// run before the baseline saves the baseline's branch. Per-layer choices (no bits) come last.
std::vector<std::size_t> branchOrder(const ControllerConfig& config, const std::vector<double>& secondsPerStep,
                                     const std::vector<std::string>& pruned);

// The highest rate a candidate could reach: from accuracy start to 1 in horizon steps of seconds each.
double rateCeiling(double startAccuracy, double horizonSteps, double secondsPerStep);

// Whether candidate c (not yet speculated: its observation has only secondsPerStep) still needs its
// branch, given the branches already run in phase as planPhase plans them (one plan serves both tests):
//   pruned kPrunedDominated: dominated above; never while no branch has run or when no branch is sure
//     to gain (a converged phase prunes nothing);
//   pruned kPrunedBounded, boundedBy the bounding candidate (the most precise one when several do):
//     bounded above; never when no branch gains, c has no bits of its own, no more precise branch has
//     run, c's own plan would shorten the common seconds, or any more precise branch run would score a
//     higher rate at c's speed than the best branch run;
//   pruned nullptr: run its branch.
struct BranchVerdict {
  const char* pruned = nullptr;
  std::size_t boundedBy = kNoBaseline;
};
BranchVerdict beforeBranch(const ControllerConfig& config, const PhaseMeasurements& phase, std::size_t c);

// Whether candidate i may stand in for the baseline (stood_in above): the baseline is fp32 and i a fixed
// element-wise format without error feedback whose one quantization moves a value by at most
// kStandInRelativeError (fp16).
bool mayStandIn(const ControllerConfig& config, std::size_t i);

// The one candidate a phase would choose whatever its branches showed, when pruning leaves no choice
// to make: the candidates not pruned (pruned[c] empty) are one, or they are the baseline and one
// candidate that may stand in for it and is faster (speculated first, nothing can dominate it, and its
// branch then stands in for the baseline's). kNoBaseline otherwise. Such a phase runs no branch and no
// evaluation (at 1 Gbit/s later phases had only fp16 left, and each spent 0.6-0.7 s of evaluations on a
// foregone choice; docs/results.md).
std::size_t soleCandidate(const ControllerConfig& config, const std::vector<std::string>& pruned,
                          const std::vector<double>& secondsPerStep);

// The candidate whose branch stands in for the baseline's in this phase (stood_in above): the first,
// in the config's order, that may stand in (a fixed element-wise format within kStandInRelativeError,
// not the baseline), is not pruned and has a branch (>= 2 points); kNoBaseline if none.
std::size_t standIn(const ControllerConfig& config, const PhaseMeasurements& phase);

inline bool isPruned(const PhaseMeasurements& phase, std::size_t c) {
  return !phase.pruned.empty() && !phase.pruned[c].empty();
}

}  // namespace adaprec::controller
