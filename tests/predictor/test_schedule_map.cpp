// The schedule's default recalibration map (ModelOptions::scheduleRecalibration, docs/predictor.md "The
// default map"): applied to every prediction beyond the data of a fit whose schedule anneals, by the
// fast posterior and the MCMC reference alike; not without a schedule, with one that never anneals,
// when turned off, or when the fit has its own map or shape prior.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "adaprec/predictor.hpp"
#include "test_support.hpp"

namespace ap = adaprec::predictor;

namespace {
using ap::test::kEarly;
using ap::test::schedule;

void checkQuantiles(const ap::Predictive& got, const ap::Predictive& want) {
  for (double q : {0.05, 0.5, 0.95}) CHECK(got.quantile(q) == Approx(want.quantile(q)).epsilon(1e-12));
}

// The default predictive against the model's own one mapped by `map` at the prediction's reach from
// kEarly's last step (80) and its 8 points.
void checkMapped(const ap::Posterior& posterior, double step, const ap::Recalibration* map) {
  ap::PredictOptions own;
  own.recalibrated = false;
  const ap::Predictive raw = posterior.predictive(0, step, own);
  const ap::Predictive got = posterior.predictive(0, step);
  const ap::Predictive want =
      map == nullptr ? raw : raw.recalibrated(map->at(80 / step, 8)[0], map->at(80 / step, 8)[1]);
  checkQuantiles(got, want);
  CHECK(got.mean() == Approx(want.mean()).epsilon(1e-12));
}
}  // namespace

TEST_CASE("schedule map: the library's map is the documented one") {
  const ap::Recalibration& map = ap::scheduleRecalibration();
  REQUIRE(map.fractions == std::vector<double>{0.2, 0.4});
  // a, b > 1: it narrows the bands (they were too wide); at 0.4 it also shifts them up (b < a).
  for (std::size_t i = 0; i < 2; ++i) CHECK((map.a[i] > 1 && map.b[i] > 1));
  CHECK(map.b[1] < map.a[1]);
  // Identity at a reach of 1 (a prediction at the last observed step).
  CHECK(map.at(1.0) == std::array<double, 2>{1.0, 1.0});
}

TEST_CASE("schedule map: an annealing schedule maps every prediction beyond the data, narrower") {
  ap::ModelOptions model;
  model.lrSchedule = schedule("cosine:400");
  REQUIRE(model.appliedRecalibration() == &ap::scheduleRecalibration());
  const ap::Posterior posterior = ap::fitFast({kEarly}, model);
  for (double step : {100.0, 200.0, 400.0, 800.0}) {
    INFO(step);
    checkMapped(posterior, step, &ap::scheduleRecalibration());
  }
  ap::PredictOptions own;
  own.recalibrated = false;
  CHECK(posterior.predictive(0, 400).sd() < posterior.predictive(0, 400, own).sd());
  // Inside the data (reach 1 or more) nothing is mapped.
  checkMapped(posterior, 60, nullptr);
  checkMapped(posterior, 80, nullptr);
}

TEST_CASE("schedule map: a curve seen at fewer points than the map's own curves gets less of it") {
  // The default map was learned on curves evaluated 30 times a run: its sharpening, right for them,
  // put the final values of curves seen at one or two points outside the 90 % band (docs/predictor.md,
  // "Sparse curves"). Predicting step 400 from step 80 (reach 0.2) its curves had 6 points.
  const ap::Recalibration& map = ap::scheduleRecalibration();
  REQUIRE(map.pointsPerRun == 30);
  ap::ModelOptions model;
  model.lrSchedule = schedule("cosine:400");
  ap::PredictOptions own;
  own.recalibrated = false;
  // One point: the model's own predictive.
  const ap::Posterior one = ap::fitFast({{{80}, {0.62}, {1000}}}, model);
  checkQuantiles(one.predictive(0, 400), one.predictive(0, 400, own));
  // Three points: log a and log b at (3 - 1) / (6 - 1) of the map's, so a band between the two.
  const ap::Posterior three = ap::fitFast({{{20, 50, 80}, {0.52, 0.645, 0.675}, {1000, 1000, 1000}}}, model);
  const ap::Predictive raw = three.predictive(0, 400, own);
  const std::array<double, 2> full = map.at(0.2);
  checkQuantiles(three.predictive(0, 400), raw.recalibrated(std::pow(full[0], 0.4), std::pow(full[1], 0.4)));
  CHECK(three.predictive(0, 400).sd() < raw.sd());
  CHECK(three.predictive(0, 400).sd() > raw.recalibrated(full[0], full[1]).sd());
  // Six points or more: the map in full.
  const ap::Posterior six =
      ap::fitFast({{{30, 40, 50, 60, 70, 80}, {0.58, 0.62, 0.645, 0.66, 0.67, 0.675}, std::vector<double>(6, 1000)}}, model);
  checkQuantiles(six.predictive(0, 400), six.predictive(0, 400, own).recalibrated(full[0], full[1]));
}

TEST_CASE("schedule map: the MCMC reference applies the same map") {
  ap::ModelOptions model;
  model.lrSchedule = schedule("cosine:400");
  const ap::Posterior reference = ap::fitMcmc({kEarly}, model, ap::test::referenceMcmc(ap::McmcMethod::kCollapsed, 3));
  checkMapped(reference, 400, &ap::scheduleRecalibration());
}

TEST_CASE("schedule map: not without a schedule, with one that never anneals, when off, or with the fit's own") {
  ap::ModelOptions none;
  CHECK(none.appliedRecalibration() == nullptr);
  checkMapped(ap::fitFast({kEarly}, none), 400, nullptr);

  ap::ModelOptions constant;
  constant.lrSchedule = schedule("constant");
  CHECK(constant.appliedRecalibration() == nullptr);
  checkMapped(ap::fitFast({kEarly}, constant), 400, nullptr);

  ap::ModelOptions off;
  off.lrSchedule = schedule("cosine:400");
  off.scheduleRecalibration = false;
  CHECK(off.appliedRecalibration() == nullptr);
  checkMapped(ap::fitFast({kEarly}, off), 400, nullptr);

  ap::ModelOptions own;
  own.lrSchedule = schedule("cosine:400");
  auto map = std::make_shared<ap::Recalibration>();
  map->fractions = {0.5};
  map->a = {3.0};
  map->b = {1.5};
  map->counts = {20};
  own.recalibration = map;
  CHECK(own.appliedRecalibration() == map.get());
  checkMapped(ap::fitFast({kEarly}, own), 400, map.get());
}
