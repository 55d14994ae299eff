// --reduction auto (the default): whether overlapping the reduction with the backward pass pays on this
// job, measured on the job itself, as Horovod's autotuner measures its knobs. Overlap and sequential
// give bit-identical results (reduction_pipeline.hpp), so the probe costs no accuracy: after a few
// warm-up steps the trainer measures kPairs pairs, each a block of kBlockSteps sequential steps and
// then a block of kBlockSteps overlapped ones (same data shape, same formats, the machine's load of that
// moment; each block's first step untimed), agrees each pair's log time ratio across ranks (their
// mean), and keeps overlap for the rest of the run only when the pairs show it at least kMinOverlapGain
// faster at 90 % (one-sided t test on the log ratios but the smallest and the largest,
// stats/t_quantile.hpp), sequential otherwise: the extra thread must earn its place.
// Until 2026-12-08 a pair was one sequential and one overlapped step and a median ratio below 1 took
// overlap: between emulated nodes on 2 cores it did in about 40 % of the runs, on medians of 0.91-0.998,
// ran no faster than sequential afterwards (median steps within 2 %), and 2 of 16 such runs at 100
// Mbit/s ran 16 and 32 % slower for the rest of the run, no sequential one of 27 (docs/results.md,
// "--reduction auto and a slow overlap").
// A pair's steps are all of one format (the caller's key): pairing a step of one format with the next
// of another measured the formats, not the modes (the controller's interleaved probes: fp16 sequential
// and fp8s overlapped read as overlap saving 13 %); a step whose format differs from the pending pair's
// runs sequential and starts a new pair. The controller's phases (probes and
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
  // Steps per mode in a pair: a pair is kBlockSteps sequential steps, then kBlockSteps overlapped ones,
  // each block's first step untimed. Single alternating steps (until 2026-12-08) measured overlap
  // 7 % faster in a run at 100 Mbit/s where it then ran 3 % slower than sequential runs.
  static constexpr std::size_t kBlockSteps = 3;
  // Overlap must be shown at least this much faster: its extra thread costs over a whole run what a few
  // steps do not show. With blocks, runs between emulated nodes on 2 cores that took overlap on bounds
  // of 0.993 and 0.999 then trained 2-6 % slower than sequential runs beside them (docs/results.md,
  // "--reduction auto and a slow overlap"); a gain below this is not worth the risk where it is real.
  static constexpr double kMinOverlapGain = 0.03;

  // The mode the next step, of format `key`, runs in (sequential or overlap).
  ReductionMode nextMode(const std::string& key = "") const;
  // The step of format `key` that nextMode(key) returned took `seconds` (rank-local wall time of
  // Trainer::step).
  void record(double seconds, const std::string& key = "");
  // While paused, every step runs sequential (or the decided mode) and none is measured; a pair
  // pending when the pause begins is dropped when a step ran during the pause (its overlapped half
  // would run from another state), kept when none did.
  void pause(bool paused);
  // True once every pair is measured and no decision is taken yet: the caller agrees logRatios() across
  // ranks (each pair's mean) and calls decide() with them, on every rank at the same step.
  bool readyToDecide() const;
  // This rank's log(overlap time / sequential time) of each pair, in order.
  const std::vector<double>& logRatios() const { return logRatios_; }
  // Overlap is kept when the agreed pairs show it at least kMinOverlapGain faster (their smallest and
  // largest left out, the mean log ratio of the others plus the one-sided 90 % t quantile times its
  // standard error is below log(1 - kMinOverlapGain)), sequential otherwise. kPairs values.
  void decide(const std::vector<double>& agreedLogRatios);
  std::optional<ReductionMode> decided() const { return decided_; }
  // exp of the agreed pairs' mean log ratio (overlapped / sequential) and of its 90 % upper bound
  // (overlap when the bound is below 1 - kMinOverlapGain).
  std::optional<double> agreedRatio() const { return agreedRatio_; }
  std::optional<double> agreedRatioBound() const { return agreedRatioBound_; }

 private:
  std::size_t steps_ = 0;
  bool paused_ = false;
  struct Pair {
    std::string key;  // the format of its steps
    std::size_t steps = 0;
    double sequentialSeconds = 0, overlapSeconds = 0;  // its timed steps
  };
  std::optional<Pair> pair_;  // the pair being measured, if any
  std::vector<double> logRatios_;
  std::optional<ReductionMode> decided_;
  std::optional<double> agreedRatio_, agreedRatioBound_;
};

}  // namespace adaprec::trainer
