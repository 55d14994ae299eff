#include "schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "adaprec/error.hpp"

namespace adaprec::trainer {

void ScheduleConfig::check() {
  parsed.reset();
  if (!lrSchedule.empty()) {
    ADAPREC_CHECK_ARG(kind == "const" && warmupEpochs == 0 && milestones.empty(),
                      "--lr-schedule replaces --schedule, --warmup and --milestones (got --schedule "
                          << kind << ", --warmup " << warmupEpochs << ", " << milestones.size()
                          << " milestone(s)); give the decay in --lr-schedule alone");
    parsed = std::make_shared<const predictor::LrSchedule>(predictor::LrSchedule::parse(lrSchedule));
  }
  ADAPREC_CHECK_ARG(kind == "const" || kind == "step" || kind == "poly" || kind == "cosine",
                    "unknown schedule '" << kind << "' (valid: " << kScheduleKinds << ")");
  ADAPREC_CHECK_ARG(baseLr > 0 && std::isfinite(baseLr), "learning rate " << baseLr << " must be > 0");
  ADAPREC_CHECK_ARG(referenceBatch >= 0 && globalBatch >= 1, "reference batch " << referenceBatch
                                                                               << ", global batch " << globalBatch);
  ADAPREC_CHECK_ARG(warmupEpochs >= 0 && totalEpochs > 0, "warmup " << warmupEpochs << ", epochs " << totalEpochs);
  ADAPREC_CHECK_ARG(gamma > 0 && power > 0, "gamma " << gamma << ", power " << power);
  bool increasing = true;
  for (std::size_t i = 0; i < milestones.size(); ++i) {
    increasing &= std::isfinite(milestones[i]) && milestones[i] > 0 && (i == 0 || milestones[i] > milestones[i - 1]);
  }
  if (!increasing) {
    std::ostringstream list;
    for (std::size_t i = 0; i < milestones.size(); ++i) list << (i ? "," : "") << milestones[i];
    ADAPREC_FAIL(ErrorCode::kInvalidArgument, "--milestones must be increasing epochs > 0, got " << list.str());
  }
}

namespace {
// The linear scaling rule: the rate for the real global batch.
double peakRate(const ScheduleConfig& c) {
  const double reference = c.referenceBatch > 0 ? c.referenceBatch : c.globalBatch;
  return c.baseLr * c.globalBatch / reference;
}
}  // namespace

double learningRateAtStep(const ScheduleConfig& c, std::uint64_t step, std::uint64_t stepsPerEpoch) {
  if (!c.lrSchedule.empty()) {
    ADAPREC_CHECK_ARG(c.parsed && c.parsed->spec() == c.lrSchedule,
                      "lr schedule '" << c.lrSchedule << "' used before ScheduleConfig::check()");
    return peakRate(c) * (c.parsed->lrAt(static_cast<double>(step)) / c.parsed->peak());
  }
  return learningRate(c, static_cast<double>(step) / static_cast<double>(stepsPerEpoch));
}

double learningRate(const ScheduleConfig& c, double epoch) {
  const double peak = peakRate(c);
  if (epoch < c.warmupEpochs) return c.baseLr + (peak - c.baseLr) * (epoch / c.warmupEpochs);
  const double progress = std::clamp(epoch / c.totalEpochs, 0.0, 1.0);
  if (c.kind == "step") {
    double lr = peak;
    for (double m : c.milestones) lr *= epoch >= m ? c.gamma : 1.0;
    return lr;
  }
  if (c.kind == "poly") return peak * std::pow(1.0 - progress, c.power);
  if (c.kind == "cosine") return peak * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return peak;
}

}  // namespace adaprec::trainer
