// --reduction auto (the default): whether overlapping the reduction with the backward pass pays on this
// job, measured on the job itself, as Horovod's autotuner measures its knobs. Overlap and sequential
// give bit-identical results (reduction_pipeline.hpp), so the probe costs no accuracy: after a few
// warm-up steps the trainer alternates the two modes step by step, pairs each overlapped step with the
// sequential step before it (same data shape, same formats, the machine's load of that moment), takes
// the median of the pairs' time ratios, agrees it across ranks, and keeps the faster mode for the rest of
// the run. A pair is two consecutive steps of the same format (the caller's key): pairing a step of one
// format with the next of another measured the formats, not the modes (the controller's interleaved
// probes: fp16 sequential and fp8s overlapped read as overlap saving 13 %); a step whose format differs
// from the pending step's runs sequential and starts a new pair. The controller's phases (probes and
// branches) pause the tuner: before its decision they all run sequential, after it in the chosen mode,
// alike for every candidate, and no pair is taken from them (until 2026-12-02 the first branch hosted
// the pairs: half its steps overlapped, while later branches ran in one mode, so the first candidate's
// step-time samples, which the controller's pruning compares, mixed both modes and the others' did not).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "reduction_pipeline.hpp"

namespace adaprec::trainer {

class ReductionTuner {
 public:
  static constexpr std::size_t kWarmupSteps = 2;  // first allocations, caches, the calibration probe
  static constexpr std::size_t kPairs = 8;        // sequential/overlap pairs measured

  // The mode the next step, of format `key`, runs in (sequential or overlap).
  ReductionMode nextMode(const std::string& key = "") const;
  // The step of format `key` that nextMode(key) returned took `seconds` (rank-local wall time of
  // Trainer::step).
  void record(double seconds, const std::string& key = "");
  // While paused, every step runs sequential (or the decided mode) and none is measured; a pair
  // pending when the pause begins is dropped when a step ran during the pause (its overlapped half
  // would run from another state), kept when none did.
  void pause(bool paused);
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
  bool paused_ = false;
  std::optional<std::string> pendingKey_;  // the format of the current pair's sequential step, if any
  double sequentialSeconds_ = 0;            // of the current pair
  std::vector<double> ratios_;
  std::optional<ReductionMode> decided_;
  std::optional<double> agreedRatio_;
};

}  // namespace adaprec::trainer
