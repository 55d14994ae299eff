// The default recalibration of schedule-aware predictions (ModelOptions::scheduleRecalibration). The
// numbers are measured, not chosen: `adaprec-schedule-bench --check-default-map` with the 77 annealed
// curves of bench/predictor refits them from this model's own PITs and fails when they moved (a test
// runs it), so a model change that shifts the bands makes them stale loudly. How they were evaluated,
// on those curves and once on 24 curves of a network they were not learned from: docs/predictor.md.
#include "adaprec/predictor.hpp"

namespace adaprec::predictor {

const Recalibration& scheduleRecalibration() {
  static const Recalibration map = [] {
    Recalibration r;
    r.fractions = {0.2, 0.4};
    r.a = {2.5674, 2.1612};
    r.b = {2.5533, 1.8321};
    r.counts = {77, 77};
    r.pointsPerRun = 30;  // the 77 curves' evaluations per run (30 or 31; --check-default-map checks it)
    r.check();
    return r;
  }();
  return map;
}

const Recalibration* ModelOptions::appliedRecalibration() const {
  if (recalibration) return recalibration.get();
  const bool byDefault = lrSchedule && !lrSchedule->neverAnneals() && scheduleRecalibration && !shapePrior;
  return byDefault ? &adaprec::predictor::scheduleRecalibration() : nullptr;  // qualified: the member of that name is a flag
}

}  // namespace adaprec::predictor
