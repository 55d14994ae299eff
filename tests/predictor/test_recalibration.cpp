// The recalibration map of predictive CDFs (Recalibration, Predictive::recalibrated) and the Beta
// distribution behind it: closed forms against quadrature, the map's interpolation, and learning it
// from runs whose model is deliberately too wide.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "model.hpp"
#include "prior_sampler.hpp"
#include "test_support.hpp"

namespace ap = adaprec::predictor;
namespace apd = adaprec::predictor::detail;
using adaprec::ErrorCode;

namespace {
using ap::test::codeOf;

ap::Predictive twoComponents() { return ap::Predictive({0.6, 0.4}, {0.72, 0.80}, {0.03, 0.05}); }
}  // namespace

TEST_CASE("Beta CDF, quantile and density agree with quadrature", "[predictor][recalibration]") {
  for (const auto& [a, b] : std::vector<std::pair<double, double>>{{2.0, 2.0}, {1.7, 2.4}, {0.6, 0.8}, {5.0, 1.3}}) {
    // Midpoint rule on 200000 cells (the density of a, b < 1 is integrable but unbounded at the ends).
    constexpr int kCells = 200000;
    double integral = 0;
    for (int i = 0; i < kCells; ++i) {
      const double x = (i + 0.5) / kCells;
      integral += std::exp(apd::betaLogPdf(x, a, b)) / kCells;
      if (i % 20000 == 19999) {
        const double edge = static_cast<double>(i + 1) / kCells;
        INFO("a " << a << " b " << b << " x " << edge);
        CHECK(apd::betaCdf(edge, a, b) == Approx(integral).margin(a < 1 || b < 1 ? 2e-3 : 1e-6));
      }
    }
    for (double p : {0.01, 0.05, 0.3, 0.5, 0.9, 0.99}) {
      CHECK(apd::betaCdf(apd::betaQuantile(p, a, b), a, b) == Approx(p).margin(1e-10));
    }
  }
  CHECK(apd::betaCdf(0.3, 1, 1) == Approx(0.3).margin(1e-14));  // the identity map
  CHECK(apd::betaCdf(0.5, 3, 3) == Approx(0.5).margin(1e-14));  // symmetric
}

TEST_CASE("fitBeta recovers the parameters of Beta samples", "[predictor][recalibration]") {
  std::mt19937_64 rng(7);
  std::gamma_distribution<double> ga(2.5, 1.0), gb(1.7, 1.0);
  std::vector<double> values;
  for (int i = 0; i < 20000; ++i) {
    const double x = ga(rng), y = gb(rng);
    values.push_back(x / (x + y));
  }
  const std::array<double, 2> ab = apd::fitBeta(values);
  CHECK(ab[0] == Approx(2.5).epsilon(0.05));
  CHECK(ab[1] == Approx(1.7).epsilon(0.05));
  CHECK(codeOf([] { apd::fitBeta({0.5}); }) == ErrorCode::kInvalidArgument);
  CHECK(codeOf([] { apd::fitBeta({0.5, 1.0}); }) == ErrorCode::kInvalidArgument);
}

TEST_CASE("a recalibrated predictive is the mapped distribution", "[predictor][recalibration]") {
  const ap::Predictive p = twoComponents();
  const ap::Predictive same = p.recalibrated(1, 1);
  CHECK(same.mean() == p.mean());
  CHECK(same.quantile(0.9) == p.quantile(0.9));
  CHECK(same.logDensity(0.75) == p.logDensity(0.75));
  const ap::Predictive q = p.recalibrated(2.2, 1.8);
  // Its density integrates to 1, to its CDF and to its mean and sd (midpoint rule).
  constexpr int kCells = 20000;
  double mass = 0, m1 = 0, m2 = 0;
  for (int i = 0; i < kCells; ++i) {
    const double y = (i + 0.5) / kCells;
    const double d = std::exp(q.logDensity(y)) / kCells;
    mass += d;
    m1 += y * d;
    m2 += y * y * d;
    if (i % 2000 == 1999) CHECK(q.cdf(static_cast<double>(i + 1) / kCells) == Approx(mass).margin(1e-4));
  }
  CHECK(mass == Approx(1.0).margin(1e-4));
  CHECK(q.mean() == Approx(m1).margin(1e-5));
  CHECK(q.sd() == Approx(std::sqrt(m2 - m1 * m1)).margin(1e-5));
  for (double level : {0.05, 0.5, 0.95}) CHECK(q.cdf(q.quantile(level)) == Approx(level).margin(1e-7));
  // a, b > 1 narrow the band; the CDF is the Beta CDF of the original's.
  CHECK(q.quantile(0.95) - q.quantile(0.05) < p.quantile(0.95) - p.quantile(0.05));
  CHECK(q.cdf(0.74) == Approx(apd::betaCdf(p.cdf(0.74), 2.2, 1.8)).margin(1e-12));
  CHECK(codeOf([&] { p.recalibrated(0, 1); }) == ErrorCode::kInvalidArgument);
  CHECK(codeOf([&] { p.recalibrated(1, std::nan("")); }) == ErrorCode::kInvalidArgument);
}

TEST_CASE("mapped moments hold for wide components on both sides of [0, 1]", "[predictor][recalibration]") {
  // The moments sum a tabulated Phi over every component (both of componentCdf's sides: a mean below
  // 0 reads the upper tail); components as wide as [0, 1] and far outside it.
  const ap::Predictive p({0.2, 0.5, 0.2, 0.1}, {-0.3, 0.55, 1.2, 0.9}, {0.25, 0.3, 0.2, 0.05});
  const ap::Predictive q = p.recalibrated(2.5, 2.0);
  constexpr int kCells = 20000;
  double m1 = 0, m2 = 0;
  for (int i = 0; i < kCells; ++i) {
    const double y = (i + 0.5) / kCells;
    const double d = std::exp(q.logDensity(y)) / kCells;
    m1 += y * d;
    m2 += y * y * d;
  }
  CHECK(q.mean() == Approx(m1).margin(1e-5));
  CHECK(q.sd() == Approx(std::sqrt(m2 - m1 * m1)).margin(1e-5));
}

TEST_CASE("mapped moments resolve a narrow bulk inside a wide span", "[predictor][recalibration]") {
  // Most of the mass within 0.001 of 0.32, components of little weight stretching the span to
  // [0, 0.44], so one of 40 cells over it holds the bulk; the map sharpens further. Mean and sd
  // against E[Y] = int (1 - F), E[Y^2] = int 2y (1 - F) on 200000 cells (a hostile pass: 40 cells
  // gave sd 0.0038 where it was 0.0088, and 0 where it was 0.002).
  const ap::Predictive p({0.95, 0.03, 0.02}, {0.32, 0.35, 0.05}, {0.001, 0.01, 0.02});
  for (const auto& [a, b] : std::vector<std::pair<double, double>>{{1, 1}, {3, 3}, {0.7, 1.4}, {6, 2}}) {
    const ap::Predictive q = p.recalibrated(a, b);
    constexpr int kCells = 200000;
    double m1 = 0, m2 = 0;
    for (int i = 0; i < kCells; ++i) {
      const double y = (i + 0.5) / kCells, survival = 1 - q.cdf(y);
      m1 += survival / kCells;
      m2 += 2 * y * survival / kCells;
    }
    const double sd = std::sqrt(m2 - m1 * m1);
    INFO("a " << a << " b " << b << " mean " << q.mean() << " vs " << m1 << ", sd " << q.sd() << " vs " << sd);
    CHECK(q.mean() == Approx(m1).margin(2e-5));
    CHECK(q.sd() == Approx(sd).epsilon(0.02));
  }
}

TEST_CASE("Recalibration interpolates in log fraction and is the identity at 1", "[predictor][recalibration]") {
  ap::Recalibration r;
  r.fractions = {0.1, 0.4};
  r.a = {2.0, 1.5};
  r.b = {3.0, 1.2};
  r.check();
  CHECK(r.at(0.05)[0] == 2.0);  // below the first: kept
  CHECK(r.at(0.1)[1] == Approx(3.0));
  CHECK(r.at(0.2)[0] == Approx(std::sqrt(2.0 * 1.5)));  // 0.2 is halfway between 0.1 and 0.4 in log
  CHECK(r.at(0.4)[1] == Approx(1.2));
  CHECK(r.at(std::sqrt(0.4))[0] == Approx(std::sqrt(1.5)));  // halfway to the identity at 1
  CHECK(r.at(1.0)[0] == 1.0);
  CHECK(r.at(3.0)[1] == 1.0);
  CHECK(ap::Recalibration{}.at(0.2)[0] == 1.0);
  ap::Recalibration bad = r;
  bad.fractions = {0.4, 0.1};
  CHECK(codeOf([&] { bad.check(); }) == ErrorCode::kInvalidArgument);
  bad = r;
  bad.a = {1.0};
  CHECK(codeOf([&] { bad.check(); }) == ErrorCode::kInvalidArgument);
  bad = r;
  bad.b[0] = -1;
  ap::ModelOptions model;
  model.recalibration = std::make_shared<ap::Recalibration>(bad);
  CHECK(codeOf([&] { ap::fitFast({{{0, 10}, {0.3, 0.4}, {}}}, model); }) == ErrorCode::kInvalidArgument);
  ap::RunPriorOptions options;
  options.recalibrationFractions = {0.5, 0.5};
  CHECK(codeOf([&] { options.check(); }) == ErrorCode::kInvalidArgument);
}

TEST_CASE("Recalibration fades toward the identity for a curve sparser than its own", "[predictor][recalibration]") {
  ap::Recalibration r;
  r.fractions = {0.2, 0.4};
  r.a = {4.0, 2.0};
  r.b = {2.0, 3.0};
  r.pointsPerRun = 30;
  r.check();
  // In full from the points its own curves had by that reach (30 x 0.2 = 6, 30 x 0.4 = 12) on.
  CHECK(r.at(0.2, 6) == r.at(0.2));
  CHECK(r.at(0.2, 100) == r.at(0.2));
  CHECK(r.at(0.4, 12) == r.at(0.4));
  // One point (or none): the identity.
  CHECK(r.at(0.2, 1) == std::array<double, 2>{1.0, 1.0});
  CHECK(r.at(0.4, 0) == std::array<double, 2>{1.0, 1.0});
  // Between: log a and log b scaled by (points - 1) / (N - 1).
  CHECK(r.at(0.2, 3)[0] == Approx(std::pow(4.0, 2.0 / 5.0)));
  CHECK(r.at(0.2, 3)[1] == Approx(std::pow(2.0, 2.0 / 5.0)));
  CHECK(r.at(0.4, 4)[1] == Approx(std::pow(3.0, 3.0 / 11.0)));
  // Below the first fraction the first map holds, and fewer points are needed for it in full.
  CHECK(r.at(0.1, 3) == r.at(0.1));
  CHECK(r.at(0.1, 2)[0] == Approx(std::pow(4.0, 1.0 / 2.0)));
  // Without a known density the map applies in full whatever the points.
  ap::Recalibration unknown = r;
  unknown.pointsPerRun = 0;
  CHECK(unknown.at(0.2, 1) == unknown.at(0.2));
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    unknown.pointsPerRun = bad;
    CHECK(codeOf([&] { unknown.check(); }) == ErrorCode::kInvalidArgument);
  }
}

TEST_CASE("a recalibration learned from runs narrows a model that is too wide", "[predictor][recalibration]") {
  // Runs with evaluation noise sd 0.005, fitted by a model whose noise cannot go below 0.03: its bands
  // are too wide, the PITs of the runs' final values pile up in the middle, and the learned map must
  // bring the coverage of new runs' final values down towards the nominal 90%.
  ap::ModelOptions truth;
  truth.noiseMin = 0.004;
  truth.noiseMax = 0.006;
  truth.sharedNoiseSds = {0};
  const std::vector<double> steps = [] {
    std::vector<double> s;
    for (int i = 0; i <= 20; ++i) s.push_back(50.0 * i);
    return s;
  }();
  auto draws = [&](int first, int count) {
    std::vector<std::vector<ap::Curve>> runs;
    for (int seed = first; seed < first + count; ++seed) {
      std::mt19937_64 rng(seed);
      runs.push_back(apd::samplePrior(truth, 3, steps, steps.back(), rng).curves);
    }
    return runs;
  };
  ap::ModelOptions wide;
  wide.noiseMin = 0.03;
  ap::RunPriorOptions options;
  options.recalibrationFractions = {0.2};
  const ap::ModelOptions learned = ap::learnPriorFromRuns(draws(100, 30), wide, {}, options);
  REQUIRE(learned.recalibration);
  const ap::Recalibration& map = *learned.recalibration;
  REQUIRE(map.counts.size() == 1);
  CHECK(map.counts[0] == 90);
  INFO("map at 0.2: Beta(" << map.a[0] << ", " << map.b[0] << ")");
  CHECK(map.a[0] > 1.5);
  CHECK(map.b[0] > 1.5);

  ap::ModelOptions raw = learned;
  raw.recalibration.reset();
  int inRaw = 0, inMapped = 0, total = 0;
  for (const auto& run : draws(5000, 40)) {
    const std::vector<ap::Curve> early = ap::test::firstPoints(run, 5);
    const ap::Posterior mapped = ap::fitFast(early, learned), plain = ap::fitFast(early, raw);
    for (std::size_t c = 0; c < run.size(); ++c) {
      const double y = run[c].values.back();
      const ap::Predictive a = mapped.predictive(c, steps.back()), b = plain.predictive(c, steps.back());
      inMapped += y >= a.quantile(0.05) && y <= a.quantile(0.95);
      inRaw += y >= b.quantile(0.05) && y <= b.quantile(0.95);
      ++total;
      // At an observed step the map does not apply.
      CHECK(mapped.predictive(c, steps[4]).cdf(0.5) == plain.predictive(c, steps[4]).cdf(0.5));
    }
  }
  INFO("90% coverage of new runs' final values: raw " << static_cast<double>(inRaw) / total << ", recalibrated "
                                                      << static_cast<double>(inMapped) / total << " of " << total);
  CHECK(inRaw > inMapped);
  CHECK(static_cast<double>(inMapped) / total > 0.78);
  CHECK(static_cast<double>(inMapped) / total < 0.97);
}
