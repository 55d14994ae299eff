// The closed forms the fast posterior rests on, each against brute-force numerical integration.
// (The model has no analytic gradients; these quadrature checks play the role of finite differences.)
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "model.hpp"

namespace ap = adaprec::predictor;
namespace d = adaprec::predictor::detail;

namespace {
// log of the integral of p(y | a, b) p(a) p(b | b >= 0) over a grid; also the posterior mean of b.
void bruteForce(const std::vector<double>& x, const std::vector<double>& y, double sigma, ap::Family family,
                const std::array<double, 2>& theta, const ap::ModelOptions& m, double& logEvidence,
                double& meanB, double& meanA) {
  const int n = 1201;
  const double aLo = m.startMean - 7 * m.startSd, aHi = m.startMean + 7 * m.startSd;
  const double bLo = 0, bHi = m.gainMean + 7 * m.gainSd;
  const double da = (aHi - aLo) / (n - 1), db = (bHi - bLo) / (n - 1);
  const double priorB = 0.5 * std::erfc(-(m.gainMean / m.gainSd) / std::sqrt(2.0));
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) g[i] = d::basis(family, theta, x[i]);
  double maxLog = -1e300;
  std::vector<double> logs(static_cast<std::size_t>(n) * n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const double a = aLo + i * da, b = bLo + j * db;
      double lp = -0.5 * std::pow((a - m.startMean) / m.startSd, 2) - std::log(m.startSd) - 0.5 * d::kLog2Pi;
      lp += -0.5 * std::pow((b - m.gainMean) / m.gainSd, 2) - std::log(m.gainSd) - 0.5 * d::kLog2Pi - std::log(priorB);
      for (std::size_t k = 0; k < x.size(); ++k) {
        const double r = y[k] - a - b * g[k];
        lp += -0.5 * r * r / (sigma * sigma) - std::log(sigma) - 0.5 * d::kLog2Pi;
      }
      logs[i * n + j] = lp;
      maxLog = std::max(maxLog, lp);
    }
  }
  double sum = 0, sumB = 0, sumA = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      // Trapezoid weights: half at the edges (b = 0 is an edge of the truncated prior).
      const double w = (i == 0 || i == n - 1 ? 0.5 : 1.0) * (j == 0 || j == n - 1 ? 0.5 : 1.0);
      const double p = w * std::exp(logs[i * n + j] - maxLog);
      sum += p;
      sumB += p * (bLo + j * db);
      sumA += p * (aLo + i * da);
    }
  }
  logEvidence = maxLog + std::log(sum * da * db);
  meanB = sumB / sum;
  meanA = sumA / sum;
}

void checkAgainstBruteForce(const std::vector<double>& y, double sigma) {
  const std::vector<double> x = {0.1, 0.25, 0.5, 0.75, 1.0};
  const ap::ModelOptions m;
  const std::array<double, 2> theta = d::familyTheta(ap::Family::kPow3, 0.4, 0.5);
  d::Sums s;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double g = d::basis(ap::Family::kPow3, theta, x[i]);
    const double w = 1 / (sigma * sigma);
    s.w += w; s.wg += w * g; s.wgg += w * g * g; s.wy += w * y[i]; s.wyg += w * g * y[i]; s.wyy += w * y[i] * y[i];
    s.count += 1;
    s.logVariance += std::log(sigma * sigma);
  }
  const d::CurveFit fit = d::curveEvidence(s, m);
  const d::CurveCoef coef = d::coefFromGaussian(fit.meanA, fit.meanB, fit.covAA, fit.covAB, fit.covBB);
  double logEvidence, meanB, meanA;
  bruteForce(x, y, sigma, ap::Family::kPow3, theta, m, logEvidence, meanB, meanA);
  INFO("closed form " << fit.logEvidence << " brute force " << logEvidence);
  CHECK(fit.logEvidence == Approx(logEvidence).margin(2e-3));
  CHECK(coef.muB == Approx(meanB).margin(2e-3));
  CHECK(coef.c0 + coef.r * coef.muB == Approx(meanA).margin(2e-3));
}
}  // namespace

TEST_CASE("closed-form evidence matches 2-D quadrature, increasing curve", "[predictor][model]") {
  checkAgainstBruteForce({0.21, 0.33, 0.45, 0.52, 0.55}, 0.05);
}

TEST_CASE("closed-form evidence and truncated b match quadrature when b straddles 0", "[predictor][model]") {
  // A slightly decreasing curve: the untruncated posterior of b is centred below 0.
  checkAgainstBruteForce({0.52, 0.50, 0.49, 0.50, 0.47}, 0.05);
}

TEST_CASE("bases are 0 at 0, non-decreasing and at most 1", "[predictor][model]") {
  for (ap::Family f : ap::allFamilies()) {
    for (double u : {0.05, 0.5, 0.95}) {
      const auto theta = d::familyTheta(f, u, 1 - u);
      double previous = d::basis(f, theta, 0.0);
      CHECK(previous == 0.0);
      for (double x = 0.01; x < 100; x *= 1.3) {
        const double g = d::basis(f, theta, x);
        INFO(ap::familyName(f) << " u=" << u << " x=" << x);
        CHECK(g >= previous);
        CHECK(g <= 1.0);
        previous = g;
      }
    }
  }
}

TEST_CASE("normal helpers are continuous across their branches and finite in the tails", "[predictor][model]") {
  // Past each branch point the shortcut must still match the direct formula (erfc is fine down to -37).
  for (double z : {-30.5, -33.0, -36.0}) CHECK(d::logNormalCdf(z) == Approx(std::log(d::normalCdf(z))).epsilon(1e-8));
  for (double z : {8.0001, 9.0, 12.0}) CHECK(d::logNormalCdf(z) == Approx(std::log(d::normalCdf(z))).margin(1e-15));
  CHECK(std::isfinite(d::logNormalCdf(-1e6)));
  double mean, var;
  for (double m : {-1e4, -40.0, -31.0, -29.0, -3.0, 0.0, 2.0, 50.0}) {
    d::truncatedMoments(m, 1.0, mean, var);
    INFO("m=" << m);
    CHECK(std::isfinite(mean));
    CHECK(std::isfinite(var));
    CHECK(mean >= 0);
    CHECK(var >= 0);
  }
  // Half-normal: mean sqrt(2/pi), variance 1 - 2/pi.
  d::truncatedMoments(0.0, 1.0, mean, var);
  CHECK(mean == Approx(std::sqrt(2 / M_PI)).epsilon(1e-12));
  CHECK(var == Approx(1 - 2 / M_PI).epsilon(1e-12));
  // Far below zero the truncated normal is nearly exponential with rate |m|/s^2.
  d::truncatedMoments(-40.0, 1.0, mean, var);
  CHECK(mean == Approx(1 / 40.0).epsilon(2e-3));
  CHECK(var == Approx(1 / 1600.0).epsilon(5e-3));
}

TEST_CASE("Predictive: truncated mixture moments, quantiles, density and CRPS", "[predictor][model]") {
  SECTION("a Gaussian well inside [0, 1]") {
    const ap::Predictive p({1.0}, {0.5}, {0.05});
    CHECK(p.mean() == Approx(0.5).margin(1e-12));
    CHECK(p.sd() == Approx(0.05).epsilon(1e-9));
    CHECK(p.quantile(0.95) == Approx(0.5 + 0.05 * 1.6448536269514722).margin(1e-8));
    CHECK(p.cdf(p.quantile(0.3)) == Approx(0.3).margin(1e-8));
    CHECK(p.logDensity(0.5) == Approx(-std::log(0.05) - 0.5 * d::kLog2Pi).margin(1e-9));
    // Gaussian CRPS at the mean: sigma (2 phi(0) - 1/sqrt(pi)).
    CHECK(p.crps(0.5) == Approx(0.05 * (2 * 0.3989422804014327 - 1 / std::sqrt(M_PI))).epsilon(2e-3));
  }
  SECTION("a component centred on the bound keeps its inner half") {
    const ap::Predictive p({1.0}, {1.0}, {0.1});
    CHECK(p.mean() == Approx(1 - 0.1 * 2 * 0.3989422804014327).epsilon(1e-9));
    CHECK(p.quantile(0.5) == Approx(1 - 0.1 * 0.6744897501960817).margin(1e-8));
  }
  SECTION("mixture density integrates to 1 on [0, 1]") {
    const ap::Predictive p({0.3, 0.7}, {0.2, 0.9}, {0.05, 0.2});
    double integral = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) integral += std::exp(p.logDensity((i + 0.5) / n)) / n;
    CHECK(integral == Approx(1.0).epsilon(1e-6));
    CHECK(p.cdf(p.quantile(0.05)) == Approx(0.05).margin(1e-8));
    CHECK(p.quantile(0.05) < p.quantile(0.5));
  }
  SECTION("a component far below 0 keeps a CDF inside [0, 1] (its upper tail), so quantiles stay near 0") {
    // Mean -0.5, sd 0.06: P(X > 0) = Phi(-8.33) ~ 4e-17. Phi(z) - Phi(alpha) cancelled to 0 there while
    // the mass did not, so the CDF was 0 on [0, 1) and every quantile 1 (adaprec-predict before the
    // first observation printed mean 0.0001 with q05 = q95 = 1).
    const ap::Predictive p({1.0}, {-0.5}, {0.06});
    const double q05 = p.quantile(0.05), q50 = p.quantile(0.5), q95 = p.quantile(0.95);
    INFO(q05 << " " << q50 << " " << q95 << " mean " << p.mean());
    CHECK(0 < q05);
    CHECK(q05 < q50);
    CHECK(q50 < q95);
    CHECK(q95 < 0.05);
    CHECK(p.mean() < 0.05);
    CHECK(p.cdf(q50) == Approx(0.5).margin(1e-6));
    // Mixed with a component inside: the far one's weight barely counts, and nothing is NaN.
    const ap::Predictive mixed({0.5, 0.5}, {-0.5, 0.5}, {0.06, 0.05});
    CHECK(mixed.quantile(0.5) == Approx(0.5).margin(1e-6));
  }
  SECTION("all mass outside [0, 1] degrades to a point mass, never NaN") {
    const ap::Predictive p({1.0}, {5.0}, {0.01});
    CHECK(p.mean() == 1.0);
    CHECK(p.sd() == 0.0);
    CHECK(p.quantile(0.5) == 1.0);
    CHECK(std::isfinite(p.logDensity(0.5)));
  }
}

TEST_CASE("BasisTable equals basis() on the distinct steps of curves with different steps", "[predictor][model]") {
  // Two curves sharing some steps (and step 0): the table is indexed through each point's xIndex.
  std::vector<ap::Curve> curves(2);
  curves[0].steps = {0, 10, 20, 30, 40};
  curves[0].values = {0.1, 0.2, 0.3, 0.35, 0.4};
  curves[1].steps = {5, 10, 30, 45};
  curves[1].values = {0.1, 0.2, 0.3, 0.4};
  const d::Data data = d::prepareData(curves, ap::ModelOptions{});
  REQUIRE(data.distinctX.size() == 7);
  d::BasisTable table(data.distinctX);
  // Walk kappa outer, alpha inner like fitFast, then revisit a kappa: the cache must follow.
  for (ap::Family family : ap::allFamilies()) {
    for (double u0 : {0.1, 0.5, 0.9, 0.5}) {
      for (double u1 : {0.05, 0.6, 0.95}) {
        const std::array<double, 2> theta = d::familyTheta(family, u0, u1);
        const std::vector<double>& g = table.values(family, theta);
        for (std::size_t c = 0; c < curves.size(); ++c) {
          for (std::size_t i = 0; i < data.curves[c].x.size(); ++i) {
            const double expected = d::basis(family, theta, data.curves[c].x[i]);
            INFO(ap::familyName(family) << " kappa " << theta[0] << " alpha " << theta[1] << " x " << data.curves[c].x[i]);
            CHECK(g[static_cast<std::size_t>(data.curves[c].xIndex[i])] == Approx(expected).margin(1e-14));
          }
        }
      }
    }
  }
}
