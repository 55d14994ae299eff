#include "reduction_tuner.hpp"

#include <algorithm>

#include "adaprec/error.hpp"

namespace adaprec::trainer {

ReductionMode ReductionTuner::nextMode() const {
  if (decided_) return *decided_;
  if (steps_ < kWarmupSteps) return ReductionMode::kSequential;
  return (steps_ - kWarmupSteps) % 2 == 0 ? ReductionMode::kSequential : ReductionMode::kOverlap;
}

void ReductionTuner::record(double seconds) {
  if (decided_ || ratios_.size() == kPairs) return;
  const bool probing = steps_ >= kWarmupSteps;
  const bool overlapped = probing && (steps_ - kWarmupSteps) % 2 == 1;
  ++steps_;
  if (!probing) return;
  if (!overlapped) {
    sequentialSeconds_ = seconds;
  } else if (sequentialSeconds_ > 0) {
    ratios_.push_back(seconds / sequentialSeconds_);
  } else {
    ratios_.push_back(1.0);  // a zero-length sequential step (a clock's resolution): no information
  }
}

bool ReductionTuner::readyToDecide() const { return !decided_ && ratios_.size() == kPairs; }

double ReductionTuner::medianRatio() const {
  ADAPREC_CHECK(!ratios_.empty(), ErrorCode::kInternal, "no reduction timing pairs measured");
  std::vector<double> sorted = ratios_;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

void ReductionTuner::decide(double agreedRatio) {
  agreedRatio_ = agreedRatio;
  decided_ = agreedRatio < 1.0 ? ReductionMode::kOverlap : ReductionMode::kSequential;
}

}  // namespace adaprec::trainer
