// fitFast(): parameter recovery, shrinking uncertainty, monotone and bounded forecasts, small inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "adaprec/predictor.hpp"
#include "model.hpp"
#include "weighted_sums.hpp"

namespace ap = adaprec::predictor;
namespace d = adaprec::predictor::detail;

namespace {
// Curves a_c + b_c g(step / scale) + N(0, sigma^2) at steps 1..count (times 10).
std::vector<ap::Curve> synthetic(ap::Family family, const std::array<double, 2>& theta, double scale,
                                 const std::vector<double>& a, const std::vector<double>& b, double sigma,
                                 int count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, sigma);
  std::vector<ap::Curve> curves;
  for (std::size_t c = 0; c < a.size(); ++c) {
    ap::Curve curve;
    for (int i = 1; i <= count; ++i) {
      const double step = 10.0 * i;
      curve.steps.push_back(step);
      curve.values.push_back(std::clamp(a[c] + b[c] * d::basis(family, theta, step / scale) + noise(rng), 0.0, 1.0));
    }
    curves.push_back(std::move(curve));
  }
  return curves;
}

ap::Curve firstPoints(const ap::Curve& c, int m) {
  ap::Curve o;
  o.steps.assign(c.steps.begin(), c.steps.begin() + m);
  o.values.assign(c.values.begin(), c.values.begin() + m);
  return o;
}
}  // namespace

TEST_CASE("fitFast recovers the parameters of noisy pow3 curves", "[predictor][fast]") {
  const std::uint64_t seed = 11;
  INFO("seed " << seed);
  // theta given in the units of the fit's step scale (the last step, 600).
  const std::array<double, 2> theta = {0.3, 0.8};
  const std::vector<double> a = {0.20, 0.25, 0.15}, b = {0.60, 0.50, 0.55};
  const double sigma = 0.008;
  const auto curves = synthetic(ap::Family::kPow3, theta, 600.0, a, b, sigma, 60, seed);
  ap::ModelOptions model;
  model.families = {ap::Family::kPow3};
  ap::FastOptions fine;
  fine.grid2d = 24;
  fine.noiseGrid = 24;
  const ap::Posterior post = ap::fitFast(curves, model, fine);
  const auto params = post.familyParameterMean(ap::Family::kPow3);
  const ap::PosteriorSummary s = post.summary();
  INFO("kappa " << params[0] << " alpha " << params[1] << " noise " << s.noiseSdMean);
  CHECK(std::abs(std::log(params[0] / theta[0])) < std::log(1.6));
  CHECK(params[1] == Approx(theta[1]).margin(0.25));
  CHECK(s.noiseSdMean == Approx(sigma).epsilon(0.2));
  for (std::size_t c = 0; c < a.size(); ++c) {
    INFO("curve " << c << " start " << s.startMean[c] << " asymptote " << s.asymptoteMean[c] << " +- " << s.asymptoteSd[c]);
    CHECK(s.startMean[c] == Approx(a[c]).margin(0.03));
    CHECK(std::abs(s.asymptoteMean[c] - (a[c] + b[c])) < std::max(3 * s.asymptoteSd[c], 0.02));
  }

  // With every family in the mix the forecast of the latent curve at twice the window still covers the truth.
  const ap::Posterior all = ap::fitFast(curves);
  ap::PredictOptions latent;
  latent.observationNoise = false;
  for (std::size_t c = 0; c < a.size(); ++c) {
    const ap::Predictive p = all.predictive(c, 1200.0, latent);
    const double truth = a[c] + b[c] * d::basis(ap::Family::kPow3, theta, 2.0);
    INFO("curve " << c << " truth " << truth << " q005 " << p.quantile(0.005) << " q995 " << p.quantile(0.995));
    CHECK(p.quantile(0.005) <= truth);
    CHECK(truth <= p.quantile(0.995));
  }
}

TEST_CASE("predictive uncertainty shrinks as points are added", "[predictor][fast]") {
  // Average over seeds so that one lucky noise draw cannot reorder the widths.
  const std::vector<int> counts = {5, 10, 20, 40};
  std::vector<double> meanSd(counts.size(), 0.0);
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const auto full = synthetic(ap::Family::kWeibull, {0.5, 1.2}, 400.0, {0.1}, {0.7}, 0.01, 40, seed);
    for (std::size_t k = 0; k < counts.size(); ++k) {
      ap::ModelOptions model;
      model.stepScale = 400.0;  // one fixed prior for every cutoff: only the data differ
      const ap::Posterior post = ap::fitFast({firstPoints(full[0], counts[k])}, model);
      meanSd[k] += post.predict(0, 400.0).sd / 6;
    }
  }
  for (std::size_t k = 1; k < counts.size(); ++k) {
    INFO(counts[k - 1] << " points: sd " << meanSd[k - 1] << "; " << counts[k] << " points: sd " << meanSd[k]);
    CHECK(meanSd[k] < meanSd[k - 1]);
  }
  CHECK(meanSd.back() < 0.5 * meanSd.front());
}

TEST_CASE("forecast curve mean is monotone in the step and everything stays in [0, 1]", "[predictor][fast]") {
  // Curves that saturate near 0.95, where the truncation at 1 matters most.
  const auto curves = synthetic(ap::Family::kLogPower, {0.4, 2.0}, 300.0, {0.1, 0.12}, {0.85, 0.8}, 0.02, 15, 3);
  const ap::Posterior post = ap::fitFast(curves);
  for (std::size_t c = 0; c < curves.size(); ++c) {
    double previous = -1, previousMean = -1;
    for (double step = 0; step <= 3000; step += 25) {
      const ap::Prediction p = post.predict(c, step);
      INFO("curve " << c << " step " << step << " curveMean " << p.curveMean << " mean " << p.mean);
      CHECK(p.curveMean >= previous - 1e-12);
      // The truncated mean may dip near 1 (documented), but only by a small amount per step.
      CHECK(p.mean >= previousMean - 0.005);
      CHECK(p.mean <= 1.0);
      previous = p.curveMean;
      previousMean = p.mean;
      CHECK(p.q05 >= 0.0);
      CHECK(p.q95 <= 1.0);
      CHECK(p.q05 <= p.q50);
      CHECK(p.q50 <= p.q95);
    }
  }
}

TEST_CASE("two or three points give a wide, finite answer", "[predictor][fast]") {
  const std::vector<std::vector<ap::Curve>> inputs = {
      {{{100, 200}, {0.30, 0.40}, {}}},
      {{{100, 200, 300}, {0.30, 0.40, 0.45}, {}}},
      {{{0}, {0.1}, {}}},                                  // a single point at step 0
      {{{10, 20, 30}, {0.0, 0.0, 0.0}, {}}},               // stuck at zero
      {{{10, 20, 30}, {1.0, 1.0, 1.0}, {50, 50, 50}}},     // saturated, with counts
      {{{10, 20}, {0.5, 0.2}, {}}},                        // decreasing
  };
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const ap::Posterior post = ap::fitFast(inputs[k]);
    for (double step : {0.0, 300.0, 3000.0, 1e7}) {
      const ap::Prediction p = post.predict(0, step);
      INFO("input " << k << " step " << step << " mean " << p.mean << " sd " << p.sd);
      CHECK(std::isfinite(p.mean));
      CHECK(std::isfinite(p.sd));
      CHECK(p.mean >= 0);
      CHECK(p.mean <= 1);
      CHECK(p.q05 <= p.q95);
    }
  }
  // From two points the forecast far out must stay uncertain.
  const ap::Prediction far = ap::fitFast(inputs[0]).predict(0, 2000.0);
  CHECK(far.q95 - far.q05 > 0.15);
}

TEST_CASE("sample counts: the binomial noise and its scale lambda are learned", "[predictor][fast]") {
  const std::uint64_t seed = 5;
  INFO("seed " << seed);
  // Truly binomial evaluations (n = 100, independent draws) and near noise-free ones, both fitted with n = 100.
  auto smooth = synthetic(ap::Family::kPow3, {0.2, 1.0}, 300.0, {0.3}, {0.5}, 0.001, 30, seed);
  ap::Curve binomial = smooth[0];
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < binomial.values.size(); ++i) {
    const double p = 0.3 + 0.5 * d::basis(ap::Family::kPow3, {0.2, 1.0}, binomial.steps[i] / 300.0);
    binomial.values[i] = std::binomial_distribution<int>(100, p)(rng) / 100.0;
  }
  binomial.sampleCounts.assign(binomial.steps.size(), 100.0);
  const ap::Posterior without = ap::fitFast(smooth);
  smooth[0].sampleCounts.assign(smooth[0].steps.size(), 100.0);
  const ap::Posterior withSmooth = ap::fitFast(smooth);
  const ap::Posterior withBinomial = ap::fitFast({binomial});
  const double lambdaSmooth = withSmooth.summary().binomialScaleMean;
  const double lambdaBinomial = withBinomial.summary().binomialScaleMean;
  const double sdWithout = without.predict(0, 300.0).sd;
  const double sdSmooth = withSmooth.predict(0, 300.0).sd;
  const double sdBinomial = withBinomial.predict(0, 300.0).sd;
  INFO("lambda smooth " << lambdaSmooth << " binomial " << lambdaBinomial << "; sd without counts " << sdWithout
                        << ", smooth with counts " << sdSmooth << ", binomial " << sdBinomial);
  CHECK(lambdaSmooth < 0.4);
  CHECK(lambdaBinomial > 0.6);
  // Binomial sd at p ~ 0.75, n = 100: 0.043. lambda >= 0.25 keeps at least half of it in the band.
  CHECK(sdBinomial > 0.035);
  CHECK(sdSmooth > 0.02);
  CHECK(sdSmooth < sdBinomial);
  CHECK(sdWithout < 0.02);
}

TEST_CASE("weightedSums: every row and padded column, each sum in step order", "[fast]") {
  // Rows around the kernel's block of 8 (none, a remainder, blocks and a remainder), and column
  // counts of one and three vectors.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> value(-2.0, 2.0);
  for (std::size_t rows : {1, 5, 8, 15, 75}) {
    for (std::size_t columns : {d::kWeightedSumsLanes, 3 * d::kWeightedSumsLanes}) {
      const std::size_t steps = 30;
      std::vector<double> weights(rows * steps), basis(steps * columns), out(rows * columns, -1.0);
      for (double& w : weights) w = value(rng);
      for (double& b : basis) b = value(rng);
      d::weightedSums(weights.data(), rows, steps, basis.data(), columns, out.data());
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < columns; ++c) {
          double expected = 0;
          for (std::size_t s = 0; s < steps; ++s) expected += weights[r * steps + s] * basis[s * columns + c];
          INFO("rows " << rows << " columns " << columns << " at (" << r << ", " << c << ")");
          REQUIRE(out[r * columns + c] == expected);  // the same adds in the same order: the same bits
        }
      }
    }
  }
}
