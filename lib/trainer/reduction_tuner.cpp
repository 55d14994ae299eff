#include "reduction_tuner.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "adaprec/error.hpp"
#include "stats/t_quantile.hpp"

namespace adaprec::trainer {

static_assert(ReductionTuner::kPairs >= 4, "the test leaves two pairs out and needs two to spread");
static_assert(ReductionTuner::kBlockSteps >= 2, "a block's first step is not timed");

ReductionMode ReductionTuner::nextMode(const std::string& key) const {
  if (decided_) return *decided_;
  if (paused_ || steps_ < kWarmupSteps) return ReductionMode::kSequential;
  // A pair's first kBlockSteps steps run sequential, its next kBlockSteps overlapped, all of one
  // format; a step of another format starts a pair.
  if (!pair_ || pair_->key != key) return ReductionMode::kSequential;
  return pair_->steps < kBlockSteps ? ReductionMode::kSequential : ReductionMode::kOverlap;
}

void ReductionTuner::record(double seconds, const std::string& key) {
  // A step during a pause breaks a pending pair (its other steps would run from another state).
  if (paused_) pair_.reset();
  if (decided_ || paused_ || logRatios_.size() == kPairs) return;
  if (steps_ < kWarmupSteps) {
    ++steps_;
    return;
  }
  ++steps_;
  if (!pair_ || pair_->key != key) pair_ = Pair{key};  // ran sequential (nextMode): a pair's first step
  Pair& pair = *pair_;
  const std::size_t at = pair.steps++;
  // Each block's first step is not timed: it carries the switch from the other mode.
  if (at % kBlockSteps != 0) (at < kBlockSteps ? pair.sequentialSeconds : pair.overlapSeconds) += seconds;
  if (pair.steps < 2 * kBlockSteps) return;
  // A zero-length block (a clock's resolution) carries no information.
  const bool timed = pair.sequentialSeconds > 0 && pair.overlapSeconds > 0;
  logRatios_.push_back(timed ? std::log(pair.overlapSeconds / pair.sequentialSeconds) : 0.0);
  pair_.reset();
}

void ReductionTuner::pause(bool paused) {
  // The pause itself keeps a pending pair: the controller's hook pauses around its call before every
  // step, most of which run no phase (until 2026-12-07 every pause dropped the pair, so with --format
  // adaptive no pair was ever completed and auto never decided: sequential always). record() drops it
  // when a step runs during the pause.
  paused_ = paused;
}

bool ReductionTuner::readyToDecide() const { return !decided_ && logRatios_.size() == kPairs; }

void ReductionTuner::decide(const std::vector<double>& agreedLogRatios) {
  ADAPREC_CHECK(agreedLogRatios.size() == kPairs, ErrorCode::kInternal,
                agreedLogRatios.size() << " reduction timing pairs agreed, " << kPairs << " expected");
  // The smallest and the largest pair left out: a descheduled step on an oversubscribed host lands
  // on one pair (a 9x outlier moved the median not at all and would decide a mean alone).
  std::vector<double> kept = agreedLogRatios;
  std::sort(kept.begin(), kept.end());
  kept = std::vector<double>(kept.begin() + 1, kept.end() - 1);
  const double n = static_cast<double>(kept.size());
  const double mean = std::accumulate(kept.begin(), kept.end(), 0.0) / n;
  double squares = 0;
  for (const double r : kept) squares += (r - mean) * (r - mean);
  const double standardError = std::sqrt(squares / (n - 1) / n);
  const double bound = mean + stats::tQuantile90(n - 1) * standardError;
  agreedRatio_ = std::exp(mean);
  agreedRatioBound_ = std::exp(bound);
  decided_ = bound < std::log1p(-kMinOverlapGain) ? ReductionMode::kOverlap : ReductionMode::kSequential;
}

}  // namespace adaprec::trainer
