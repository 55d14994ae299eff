// --reduction auto (the default): whether overlapping the reduction with the backward pass pays on this
// job, measured on the job itself, as Horovod's autotuner measures its knobs. Overlap and sequential
// give bit-identical results (reduction_pipeline.hpp), so the probe costs no accuracy: after a few
// warm-up steps the trainer alternates the two modes step by step, pairs each overlapped step with the
// sequential step before it (same data shape, same formats, the machine's load of that moment), takes
// the median of the pairs' time ratios, agrees it across ranks, and keeps the faster mode for the rest of
// the run. Speculative branches of the controller run through the same steps; alternating within each
// branch treats every candidate alike.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "reduction_pipeline.hpp"

namespace adaprec::trainer {

class ReductionTuner {
 public:
  static constexpr std::size_t kWarmupSteps = 2;  // first allocations, caches, the calibration probe
  static constexpr std::size_t kPairs = 8;        // sequential/overlap pairs measured

  // The mode the next step runs in (sequential or overlap).
  ReductionMode nextMode() const;
  // The step that nextMode() returned took `seconds` (rank-local wall time of Trainer::step).
  void record(double seconds);
  // True once every pair is measured and no decision is taken yet: the caller agrees medianRatio()
  // across ranks and calls decide() with the agreed ratio, on every rank at the same step.
  bool readyToDecide() const;
  // This rank's median of overlap time / sequential time over the pairs.
  double medianRatio() const;
  // Overlap is kept when the agreed ratio is below 1 (strictly faster), sequential otherwise.
  void decide(double agreedRatio);
  std::optional<ReductionMode> decided() const { return decided_; }
  std::optional<double> agreedRatio() const { return agreedRatio_; }

 private:
  std::size_t steps_ = 0;
  double sequentialSeconds_ = 0;  // of the current pair
  std::vector<double> ratios_;
  std::optional<ReductionMode> decided_;
  std::optional<double> agreedRatio_;
};

}  // namespace adaprec::trainer
