// Learning-rate schedules. The peak rate follows the linear scaling rule (Goyal et al., "Accurate,
// Large Minibatch SGD"): lr = baseLr * globalBatch / referenceBatch. With warmup, the rate ramps
// linearly per step from baseLr (the rate that suits referenceBatch) to the peak over warmupEpochs,
// then the decay schedule runs on the peak:
//   const : peak
//   step  : peak * gamma^(number of milestones <= epoch)
//   poly  : peak * (1 - epoch / totalEpochs)^power          (Caffe's "poly")
//   cosine: peak * (1 + cos(pi * epoch / totalEpochs)) / 2
#pragma once

#include <string>
#include <vector>

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
  // Throws Error(kInvalidArgument) for an unknown kind or out-of-range values.
  void check() const;
};

// The rate at fractional epoch `epoch` (steps done / steps per epoch).
double learningRate(const ScheduleConfig& config, double epoch);

// Valid kind names for --help and errors.
inline constexpr const char* kScheduleKinds = "const, step, poly, cosine";

}  // namespace adaprec::trainer
