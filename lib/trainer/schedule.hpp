// Learning-rate schedules. The peak rate follows the linear scaling rule (Goyal et al., "Accurate,
// Large Minibatch SGD"): lr = baseLr * globalBatch / referenceBatch. With warmup, the rate ramps
// linearly per step from baseLr (the rate that suits referenceBatch) to the peak over warmupEpochs,
// then the decay schedule runs on the peak:
//   const : peak
//   step  : peak * gamma^(number of milestones <= epoch)
//   poly  : peak * (1 - epoch / totalEpochs)^power          (Caffe's "poly")
//   cosine: peak * (1 + cos(pi * epoch / totalEpochs)) / 2
// Or, with --lr-schedule SPEC (lrSchedule), a schedule over global steps in the predictor's forms
// (predictor::LrSchedule: constant, cosine:TOTAL, cosine:TOTAL:WARMUP, poly:TOTAL:POWER,
// step:GAMMA:S1,..., file:PATH, one parser for adaprec-train, adaprec-predict and the C API):
//   peak * lr(step) / (the schedule's peak)
// It replaces the epoch-based decay and warmup: a kind other than const, warmupEpochs > 0 or
// milestones together with it are refused (the forms above express them in steps).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adaprec/predictor.hpp"

namespace adaprec::trainer {

struct ScheduleConfig {
  std::string kind = "const";
  double baseLr = 0.01;
  double referenceBatch = 0;  // 0: the global batch (no scaling)
  double globalBatch = 1;
  double warmupEpochs = 0;
  double totalEpochs = 1;
  std::vector<double> milestones;  // step: epochs at which the rate is multiplied by gamma
  double gamma = 0.1;
  double power = 2.0;
  std::string lrSchedule;  // a predictor::LrSchedule spec over global steps; empty: none (the kinds above)
  // Throws Error(kInvalidArgument) for an unknown kind, out-of-range values, a malformed lrSchedule or
  // one combined with the epoch-based decay or warmup; parses lrSchedule into `parsed`.
  void check();
  std::shared_ptr<const predictor::LrSchedule> parsed;  // lrSchedule, parsed by check()
};

// The rate at fractional epoch `epoch` (steps done / steps per epoch), without lrSchedule.
double learningRate(const ScheduleConfig& config, double epoch);
// The rate of update `step` (0-based global step): with lrSchedule (after check()), the peak times
// lr(step) / peak of the schedule; without, learningRate(config, step / stepsPerEpoch).
double learningRateAtStep(const ScheduleConfig& config, std::uint64_t step, std::uint64_t stepsPerEpoch);

// Valid kind names for --help and errors.
inline constexpr const char* kScheduleKinds = "const, step, poly, cosine";

}  // namespace adaprec::trainer
