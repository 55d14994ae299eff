// The schedule-aware model (ModelOptions::lrSchedule): `constant` is today's model, an annealing schedule
// lifts the forecast of a run seen before its annealing, and the parts that do not support it say so.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "model.hpp"
#include "prior_sampler.hpp"
#include "test_support.hpp"

namespace ap = adaprec::predictor;

using ap::test::kEarly;
using ap::test::schedule;

TEST_CASE("schedule model: constant is the model without a schedule") {
  ap::ModelOptions constant;
  constant.lrSchedule = schedule("constant");
  const ap::Posterior a = ap::fitFast({kEarly}, ap::ModelOptions{});
  const ap::Posterior b = ap::fitFast({kEarly}, constant);
  for (double step : {80.0, 200.0, 400.0}) {
    const ap::Prediction pa = a.predict(0, step), pb = b.predict(0, step);
    CHECK(pb.mean == Approx(pa.mean).epsilon(1e-9));
    CHECK(pb.sd == Approx(pa.sd).epsilon(1e-9));
    CHECK(pb.q95 == Approx(pa.q95).epsilon(1e-9));
  }
}

TEST_CASE("schedule model: the rates' scale does not matter, up to double's range") {
  // Rates near 1e307 summed over 200 steps exceed double's range: the model reads the areas scaled by a
  // power of two (ratios unchanged bit for bit); before, the fit failed with "component 0 is not finite".
  std::vector<double> steps, unit, huge, tiny;
  for (int s = 0; s <= 400; s += 20) {
    steps.push_back(s);
    const double lr = 0.5 * (1 + std::cos(3.141592653589793 * s / 400));
    unit.push_back(lr);
    huge.push_back(std::ldexp(lr, 1020));  // ~1e307
    tiny.push_back(std::ldexp(lr, -1020));
  }
  const auto predictWith = [&](const std::vector<double>& rates) {
    ap::ModelOptions model;
    model.lrSchedule = std::make_shared<const ap::LrSchedule>(ap::LrSchedule::fromPoints(steps, rates));
    return ap::fitFast({kEarly}, model).predict(0, 350);
  };
  const ap::Prediction a = predictWith(unit), b = predictWith(huge), c = predictWith(tiny);
  REQUIRE(std::isfinite(a.mean));
  CHECK(b.mean == a.mean);
  CHECK(b.sd == a.sd);
  // 2^-1020 makes the rates near the cosine's end subnormal, where they keep fewer bits: the same
  // prediction to rounding, not bit for bit.
  CHECK(c.mean == Approx(a.mean).epsilon(1e-12));
  CHECK(c.q95 == Approx(a.q95).epsilon(1e-12));
}

TEST_CASE("schedule model: the data see the forward area and the annealing area") {
  ap::ModelOptions model;
  model.lrSchedule = schedule("step:0.5:40");
  model.annealingMomentum = 0.0;
  const ap::detail::Data data = ap::detail::prepareData({kEarly}, model);
  // stepScale 80: S1(80) = 40 + 20 = 60; S2(s) = 0.5 after step 40 (momentum 0: the decrease itself).
  REQUIRE(data.forwardScale == Approx(60.0));
  CHECK(data.basisX[3] == Approx(40.0 / 60));
  CHECK(data.basisX[7] == Approx(1.0));
  CHECK(data.annealing[3] == 0.0);
  CHECK(data.annealing[7] == Approx(0.5 / 60));
  REQUIRE(data.annealingGains.size() == 3);
  for (std::size_t i = 1; i < 3; ++i) CHECK(data.annealingGains[i] > data.annealingGains[i - 1]);
  // Without a schedule: the step itself and no annealing term.
  const ap::detail::Data plain = ap::detail::prepareData({kEarly}, ap::ModelOptions{});
  CHECK(plain.basisX == plain.distinctX);
  CHECK(plain.annealingGains == std::vector<double>{0.0});
}

TEST_CASE("schedule model: a run seen before its annealing is forecast higher and wider at the end") {
  // 20% of a cosine run: without the schedule the curve looks saturated; with it, most of the rate's area
  // and all of its annealing are still ahead.
  ap::ModelOptions model;
  model.lrSchedule = schedule("cosine:400");
  const ap::Prediction plain = ap::fitFast({kEarly}, ap::ModelOptions{}).predict(0, 400);
  const ap::Prediction annealed = ap::fitFast({kEarly}, model).predict(0, 400);
  INFO("plain " << plain.mean << " [" << plain.q05 << ", " << plain.q95 << "], annealed " << annealed.mean << " ["
                << annealed.q05 << ", " << annealed.q95 << "]");
  CHECK(annealed.mean > plain.mean + 0.005);
  CHECK(annealed.q95 > plain.q95);
  // Inside the observed window the two agree closely (the warp is mild before the annealing).
  const ap::Prediction plainIn = ap::fitFast({kEarly}, ap::ModelOptions{}).predict(0, 60);
  const ap::Prediction annealedIn = ap::fitFast({kEarly}, model).predict(0, 60);
  CHECK(std::abs(plainIn.mean - annealedIn.mean) < 0.01);
}

TEST_CASE("schedule model: curves seen only at step 0 get no annealing term") {
  // Their window is one arbitrary step; the annealing regressor over it grew with the schedule and put
  // the forecast at the truncation at 1 (0.94 +- 0.036 from 0.3 at step 0, a hostile pass).
  ap::ModelOptions cosine;
  cosine.lrSchedule = schedule("cosine:1000");
  ap::ModelOptions flat = cosine;
  flat.annealingHeadroomSd = 0;  // no annealing term
  const ap::Curve start{{0}, {0.3}, {}};
  const ap::Prediction got = ap::fitFast({start}, cosine).predict(0, 1000);
  const ap::Prediction want = ap::fitFast({start}, flat).predict(0, 1000);
  CHECK(got.mean == Approx(want.mean).epsilon(1e-12));
  CHECK(got.q05 == Approx(want.q05).epsilon(1e-12));
  CHECK(got.q95 == Approx(want.q95).epsilon(1e-12));
  CHECK(got.sd > 0.1);  // the prior's width: nothing was seen of the run
  // One step beyond 0 observed is a window: the term is back.
  const ap::Curve two{{0, 10}, {0.3, 0.35}, {}};
  CHECK(ap::fitFast({two}, cosine).predict(0, 1000).mean != Approx(ap::fitFast({two}, flat).predict(0, 1000).mean));
}

TEST_CASE("schedule model: branches at common steps (the shared products) agree with the dense path") {
  // Two branches at the same steps and counts take the symmetric path, where every annealing node's
  // sums come from one product per theta (SharedThetaProducts); a count differing by 0.01 % makes the
  // layout non-symmetric, so the same fit runs the dense joint regression per annealing node.
  ap::ModelOptions model;
  model.lrSchedule = schedule("cosine:400");
  ap::Curve second = kEarly;
  for (double& v : second.values) v += 0.02;
  const ap::Posterior symmetric = ap::fitFast({kEarly, second}, model);
  REQUIRE(ap::detail::prepareData({kEarly, second}, model).symmetric);
  second.sampleCounts.back() = 1000.1;
  REQUIRE_FALSE(ap::detail::prepareData({kEarly, second}, model).symmetric);
  const ap::Posterior dense = ap::fitFast({kEarly, second}, model);
  for (std::size_t c = 0; c < 2; ++c) {
    for (double step : {100.0, 400.0}) {
      const ap::Prediction a = symmetric.predict(c, step), b = dense.predict(c, step);
      INFO("curve " << c << " step " << step << ": " << a.mean << " +- " << a.sd << " vs " << b.mean << " +- " << b.sd);
      CHECK(a.mean == Approx(b.mean).margin(1e-3));
      CHECK(a.sd == Approx(b.sd).margin(1e-3));
      CHECK(a.q95 == Approx(b.q95).margin(2e-3));
    }
  }
}

TEST_CASE("schedule model: unsupported combinations and bad options are refused") {
  ap::ModelOptions model;
  model.lrSchedule = schedule("cosine:400");
  ap::McmcOptions ensemble;
  ensemble.method = ap::McmcMethod::kEnsemble;
  model.sharedNoiseSds = {0.0};  // what the ensemble requires, so that the schedule is what it refuses
  std::string message;
  CHECK(ap::test::codeOf([&] { ap::fitMcmc({kEarly}, model, ensemble); }, &message) ==
        adaprec::ErrorCode::kInvalidArgument);
  CHECK(message.find("ensemble MCMC does not support a learning-rate schedule") != std::string::npos);
  CHECK(ap::test::codeOf([&] { ap::fitFast({kEarly}, [&] { auto m = model; m.annealingNodes = 0; return m; }()); }) ==
        adaprec::ErrorCode::kInvalidArgument);
  CHECK(ap::test::codeOf([&] { ap::fitFast({kEarly}, [&] { auto m = model; m.annealingMomentum = 1; return m; }()); }) ==
        adaprec::ErrorCode::kInvalidArgument);
  // A rate that is 0 over the whole observed window (warm-up from 0, one point at step 0 and the scale 0).
  ap::ModelOptions warm;
  warm.lrSchedule = schedule("cosine:400:100");
  warm.stepScale = 0.5;
  CHECK(ap::test::codeOf([&] { ap::fitFast({ap::Curve{{0.0}, {0.5}, {}}}, warm); }, &message) ==
        adaprec::ErrorCode::kInvalidArgument);
  CHECK(message.find("the learning rate is 0 up to step") != std::string::npos);
}
