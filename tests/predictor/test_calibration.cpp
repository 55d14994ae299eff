// Calibration over many seeds on curves drawn from the model's own prior (self-consistency: if the
// quadrature, truncation and mixture are right, held-out observations fall inside the 50% and 90%
// central intervals at those rates, up to binomial error).
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "adaprec/predictor.hpp"
#include "prior_sampler.hpp"
#include "test_support.hpp"

namespace ap = adaprec::predictor;

TEST_CASE("fast posterior intervals are calibrated on prior draws", "[predictor][calibration]") {
  constexpr int kDraws = 400;
  constexpr int kObserved = 8;
  std::vector<double> steps;
  for (int i = 0; i < 24; ++i) steps.push_back(25.0 * i);  // from 0: the headroom prior reads the first values
  ap::test::Coverage coverage;
  for (int seed = 0; seed < kDraws; ++seed) {
    std::mt19937_64 rng(1000 + seed);
    const auto draw = ap::detail::samplePrior(ap::ModelOptions{}, 2, steps, steps[kObserved - 1], rng);
    const ap::Posterior post = ap::fitFast(ap::test::firstPoints(draw.curves, kObserved));
    for (std::size_t c = 0; c < draw.curves.size(); ++c) {
      coverage.add(post.predictive(c, steps.back()), draw.curves[c].values.back());
    }
  }
  const double c50 = coverage.c50(), c90 = coverage.c90();
  INFO("seeds 1000.." << 1000 + kDraws - 1 << ": coverage 50% " << c50 << ", 90% " << c90 << " of " << coverage.total);
  // Binomial sd: 2.5% at 50%, 1.1% at 90% (800 forecasts, two per draw, correlated within a draw).
  CHECK(c50 > 0.42);
  CHECK(c50 < 0.58);
  CHECK(c90 > 0.86);
  CHECK(c90 < 0.94);
}
