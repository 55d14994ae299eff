// The headroom gain prior (ModelOptions::gainHeadroomSd): every fit turns it into the fixed half-normal
// prior it stands for on the given curves, and that prior pulls forecasts below the ceiling of 1.
#include <catch2/catch.hpp>
#include <cmath>

#include "adaprec/predictor.hpp"
#include "model.hpp"

namespace ap = adaprec::predictor;

namespace {
// Two branches of one checkpoint at 0.8 that rise for a few evaluations (n = 500).
std::vector<ap::Curve> branches(double start) {
  std::vector<ap::Curve> curves(2);
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i <= 5; ++i) {
      curves[c].steps.push_back(10.0 * i);
      curves[c].values.push_back(std::min(1.0, start + 0.012 * i - 0.004 * c + (i % 2 ? 0.003 : 0.0)));
      curves[c].sampleCounts.push_back(500);
    }
  }
  return curves;
}

ap::ModelOptions fixedPrior(double sd) {
  ap::ModelOptions m;
  m.gainHeadroomSd = 0;
  m.gainMean = 0;
  m.gainSd = sd;
  return m;
}
}  // namespace

TEST_CASE("the headroom gain prior is the fixed prior with sd = scale x (1 - mean first value)", "[predictor][gain]") {
  const std::vector<ap::Curve> curves = branches(0.8);
  const double firstMean = (curves[0].values[0] + curves[1].values[0]) / 2;
  const ap::ModelOptions model;  // defaults: headroom prior
  REQUIRE(model.gainHeadroomSd > 0);
  const ap::ModelOptions resolved = ap::detail::resolveGainPrior(model, curves);
  CHECK(resolved.gainMean == 0);
  CHECK(resolved.gainSd == Approx(model.gainHeadroomSd * (1 - firstMean)).epsilon(1e-12));
  CHECK(resolved.gainHeadroomSd == 0);
  const ap::ModelOptions fixed = fixedPrior(resolved.gainSd);
  for (double step : {60.0, 300.0}) {
    for (std::size_t c = 0; c < curves.size(); ++c) {
      const ap::Prediction a = ap::fitFast(curves, model).predict(c, step);
      const ap::Prediction b = ap::fitFast(curves, fixed).predict(c, step);
      CHECK(a.mean == b.mean);
      CHECK(a.sd == b.sd);
      ap::McmcOptions mcmc;
      mcmc.iterations = 300;
      mcmc.burnIn = 100;
      const ap::Prediction m = ap::fitMcmc(curves, model, mcmc).predict(c, step);
      const ap::Prediction n = ap::fitMcmc(curves, fixed, mcmc).predict(c, step);
      CHECK(m.mean == n.mean);
      CHECK(m.sd == n.sd);
    }
  }
}

TEST_CASE("the headroom is floored and gainHeadroomSd = 0 keeps the fixed prior", "[predictor][gain]") {
  std::vector<ap::Curve> full = branches(1.0);  // first values at the ceiling
  const ap::ModelOptions resolved = ap::detail::resolveGainPrior(ap::ModelOptions{}, full);
  CHECK(resolved.gainSd == Approx(ap::ModelOptions{}.gainHeadroomSd * ap::kMinHeadroom));
  const ap::Prediction p = ap::fitFast(full).predict(0, 200);
  CHECK(std::isfinite(p.mean));
  CHECK(std::isfinite(p.sd));
  ap::ModelOptions fixed;
  fixed.gainHeadroomSd = 0;
  const ap::ModelOptions same = ap::detail::resolveGainPrior(fixed, full);
  CHECK(same.gainMean == fixed.gainMean);
  CHECK(same.gainSd == fixed.gainSd);
}

TEST_CASE("less headroom, less predicted gain", "[predictor][gain]") {
  // Steadily rising branches leave the far future to the prior: with the checkpoint at 0.8 the headroom
  // prior (sd 0.14) expects far less gain than the fixed N(0.3, 0.4^2) and places less mass near 1.
  const std::vector<ap::Curve> curves = branches(0.8);
  ap::ModelOptions wide;
  wide.gainHeadroomSd = 0;  // gainMean 0.3, gainSd 0.4
  const ap::Prediction headroom = ap::fitFast(curves).predict(0, 1000);
  const ap::Prediction fixed = ap::fitFast(curves, wide).predict(0, 1000);
  INFO("headroom " << headroom.mean << " +- " << headroom.sd << ", fixed " << fixed.mean << " +- " << fixed.sd);
  CHECK(headroom.mean < fixed.mean);
  CHECK(headroom.q95 < fixed.q95);
  CHECK(headroom.q95 < 1.0);
}
