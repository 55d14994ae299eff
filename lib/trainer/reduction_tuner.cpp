#include "reduction_tuner.hpp"

#include <algorithm>

#include "adaprec/error.hpp"

namespace adaprec::trainer {

ReductionMode ReductionTuner::nextMode(const std::string& key) const {
  if (decided_) return *decided_;
  if (paused_ || steps_ < kWarmupSteps) return ReductionMode::kSequential;
  // The overlapped half of a pair follows a sequential step of the same format; anything else starts a pair.
  return pendingKey_ == key ? ReductionMode::kOverlap : ReductionMode::kSequential;
}

void ReductionTuner::record(double seconds, const std::string& key) {
  // A step during a pause breaks a pending pair (its overlapped half would run from another state).
  if (paused_) pendingKey_.reset();
  if (decided_ || paused_ || ratios_.size() == kPairs) return;
  if (steps_ < kWarmupSteps) {
    ++steps_;
    return;
  }
  ++steps_;
  if (pendingKey_ != key) {  // ran sequential (nextMode): the first half of a pair
    pendingKey_ = key;
    sequentialSeconds_ = seconds;
    return;
  }
  pendingKey_.reset();
  // A zero-length sequential step (a clock's resolution) carries no information.
  ratios_.push_back(sequentialSeconds_ > 0 ? seconds / sequentialSeconds_ : 1.0);
}

void ReductionTuner::pause(bool paused) {
  // The pause itself keeps a pending pair: the controller's hook pauses around its call before every
  // step, most of which run no phase (until 2026-12-07 every pause dropped the pair, so with --format
  // adaptive no pair was ever completed and auto never decided: sequential always). record() drops it
  // when a step runs during the pause.
  paused_ = paused;
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
