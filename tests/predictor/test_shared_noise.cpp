// The noise term shared by all curves observed at one step (s_t ~ N(0, tau^2)): its closed forms against
// a dense Gaussian and against each other, tau recovered from synthetic curves, and the predictive
// variance of a later step including tau^2.
#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "adaprec/predictor.hpp"
#include "model.hpp"

namespace ap = adaprec::predictor;
namespace d = adaprec::predictor::detail;

namespace {
// Curves a_c + b_c pow3(step / 300) + s_t + N(0, sigma^2), step = 10 t, t = 1..count; s_t common to all.
std::vector<ap::Curve> sharedNoiseCurves(const std::vector<double>& a, const std::vector<double>& b, double sigma,
                                         double tau, int count, std::uint64_t seed, bool counts = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::array<double, 2> theta = {0.3, 0.8};
  std::vector<double> shared;
  for (int t = 0; t < count; ++t) shared.push_back(tau * normal(rng));
  std::vector<ap::Curve> curves;
  for (std::size_t c = 0; c < a.size(); ++c) {
    ap::Curve curve;
    for (int t = 0; t < count; ++t) {
      const double step = 10.0 * (t + 1);
      const double y = a[c] + b[c] * d::basis(ap::Family::kPow3, theta, step / 300.0) + shared[t] + sigma * normal(rng);
      curve.steps.push_back(step);
      curve.values.push_back(std::clamp(y, 0.0, 1.0));
      if (counts) curve.sampleCounts.push_back(500);
    }
    curves.push_back(std::move(curve));
  }
  return curves;
}

std::vector<double> basisAtDistinct(const d::Data& data, const std::array<double, 2>& theta) {
  std::vector<double> g;
  for (double x : data.distinctX) g.push_back(d::basis(ap::Family::kPow3, theta, x));
  return g;
}

// log N(y; X m0, X V0 X' + Sigma) over all points of all curves, Sigma with tau^2 between the points of
// one step: the marginal likelihood with nothing integrated in closed form by hand.
double denseLogEvidence(const d::Data& data, const ap::ModelOptions& m, const std::vector<double>& g, double sigma,
                        double lambda, double tau) {
  std::vector<int> curve, step;
  std::vector<double> y, gi, v;
  for (std::size_t c = 0; c < data.curves.size(); ++c) {
    const d::CurveData& cd = data.curves[c];
    for (std::size_t i = 0; i < cd.x.size(); ++i) {
      curve.push_back(static_cast<int>(c));
      step.push_back(cd.xIndex[i]);
      y.push_back(cd.y[i]);
      gi.push_back(g[static_cast<std::size_t>(cd.xIndex[i])]);
      v.push_back(sigma * sigma + lambda * cd.tau[i]);
    }
  }
  const Eigen::Index n = static_cast<Eigen::Index>(y.size());
  Eigen::MatrixXd cov(n, n);
  Eigen::VectorXd r(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    r(i) = y[i] - m.startMean - m.gainMean * gi[i];
    for (Eigen::Index j = 0; j < n; ++j) {
      double c = 0;
      if (curve[i] == curve[j]) c += m.startSd * m.startSd + m.gainSd * m.gainSd * gi[i] * gi[j];
      if (step[i] == step[j]) c += tau * tau;
      if (i == j) c += v[i];
      cov(i, j) = c;
    }
  }
  const Eigen::LLT<Eigen::MatrixXd> llt(cov);
  double logDet = 0;
  for (Eigen::Index i = 0; i < n; ++i) logDet += 2 * std::log(llt.matrixL()(i, i));
  return -0.5 * (r.dot(llt.solve(r)) + logDet + n * d::kLog2Pi);
}
}  // namespace

TEST_CASE("shared-noise evidence: dense Gaussian, rotated closed form and independent limits agree", "[predictor][shared]") {
  const std::uint64_t seed = 5;
  INFO("seed " << seed);
  // A narrow gain prior far from 0 makes every truncation factor 1 (to 1e-9), so the evidence is the
  // plain Gaussian marginal likelihood that denseLogEvidence computes.
  ap::ModelOptions m;
  m.gainMean = 0.5;
  m.gainSd = 0.05;
  const std::array<double, 2> theta = d::familyTheta(ap::Family::kPow3, 0.6, 0.4);
  const auto curves = sharedNoiseCurves({0.2, 0.25, 0.15}, {0.5, 0.45, 0.55}, 0.01, 0.02, 8, seed, true);
  const d::Data data = d::prepareData(curves, m);
  REQUIRE(data.symmetric);
  const d::EvidencePrior prior = d::evidencePrior(m);
  const std::vector<double> g = basisAtDistinct(data, theta);
  for (double tau : {0.0, 0.004, 0.02, 0.1}) {
    for (double lambda : {0.25, 1.0}) {
      std::vector<d::CurveFit> joint, rotated;
      const double lj = d::jointEvidence(data, prior, g, 0.007, lambda, tau, &joint);
      const double ls = d::symmetricEvidence(d::symmetricSums(data, g, 0.007, lambda, tau), prior, &rotated);
      const double dense = denseLogEvidence(data, m, g, 0.007, lambda, tau);
      INFO("tau " << tau << " lambda " << lambda << ": joint " << lj << " rotated " << ls << " dense " << dense);
      CHECK(lj == Approx(dense).margin(1e-6));
      CHECK(ls == Approx(dense).margin(1e-6));
      for (std::size_t c = 0; c < curves.size(); ++c) {
        CHECK(rotated[c].meanA == Approx(joint[c].meanA).margin(1e-9));
        CHECK(rotated[c].meanB == Approx(joint[c].meanB).margin(1e-9));
        CHECK(rotated[c].covAA == Approx(joint[c].covAA).margin(1e-12));
        CHECK(rotated[c].covAB == Approx(joint[c].covAB).margin(1e-12));
        CHECK(rotated[c].covBB == Approx(joint[c].covBB).margin(1e-12));
      }
    }
  }

  // tau = 0: the curves are independent, so (default prior, truncation included) the joint evidence is
  // the sum of the per-curve closed forms.
  const ap::ModelOptions defaults;
  const d::Data plain = d::prepareData(sharedNoiseCurves({0.3, 0.35}, {0.05, 0.02}, 0.01, 0.02, 6, seed), defaults);
  const d::EvidencePrior defaultPrior = d::evidencePrior(defaults);
  const std::vector<double> gp = basisAtDistinct(plain, theta);
  double independent = 0;
  for (const d::CurveData& cd : plain.curves) {
    d::Sums s;
    for (std::size_t i = 0; i < cd.x.size(); ++i) {
      const double w = 1 / (0.01 * 0.01), gi = gp[static_cast<std::size_t>(cd.xIndex[i])];
      s.w += w, s.wg += w * gi, s.wgg += w * gi * gi, s.wy += w * cd.y[i], s.wyg += w * gi * cd.y[i];
      s.wyy += w * cd.y[i] * cd.y[i];
    }
    s.count = static_cast<double>(cd.x.size());
    s.logVariance = s.count * std::log(0.01 * 0.01);
    independent += d::curveEvidence(s, defaultPrior).logEvidence;
  }
  CHECK(d::jointEvidence(plain, defaultPrior, gp, 0.01, 1.0, 0.0) == Approx(independent).margin(1e-9));
  CHECK(d::symmetricEvidence(d::symmetricSums(plain, gp, 0.01, 1.0, 0.0), defaultPrior, nullptr) ==
        Approx(independent).margin(1e-9));
}

TEST_CASE("shared noise couples only the curves observed at the same step", "[predictor][shared]") {
  // Two curves at interleaved steps never share a step: s_t is then independent noise of each point,
  // the same as sigma'^2 = sigma^2 + tau^2 without sharing.
  const ap::Curve a{{10, 30, 50, 70}, {0.30, 0.41, 0.47, 0.50}, {}};
  const ap::Curve b{{20, 40, 60, 80}, {0.33, 0.42, 0.45, 0.49}, {}};
  const ap::ModelOptions m;
  const d::Data data = d::prepareData({a, b}, m);
  CHECK_FALSE(data.symmetric);
  const d::EvidencePrior prior = d::evidencePrior(m);
  const std::vector<double> g = basisAtDistinct(data, d::familyTheta(ap::Family::kPow3, 0.5, 0.5));
  const double sigma = 0.01, tau = 0.02;
  CHECK(d::jointEvidence(data, prior, g, sigma, 1.0, tau) ==
        Approx(d::jointEvidence(data, prior, g, std::hypot(sigma, tau), 1.0, 0.0)).margin(1e-9));
  // Sharing one step changes it.
  const ap::Curve c{{10, 40, 60, 80}, {0.31, 0.42, 0.45, 0.49}, {}};
  const d::Data overlapping = d::prepareData({a, c}, m);
  const std::vector<double> go = basisAtDistinct(overlapping, d::familyTheta(ap::Family::kPow3, 0.5, 0.5));
  CHECK(std::abs(d::jointEvidence(overlapping, prior, go, sigma, 1.0, tau) -
                 d::jointEvidence(overlapping, prior, go, std::hypot(sigma, tau), 1.0, 0.0)) > 1e-3);
  // And fitFast takes the general path for such layouts without trouble.
  const ap::Posterior post = ap::fitFast({a, c});
  const ap::Prediction p = post.predict(1, 200);
  CHECK(std::isfinite(p.mean));
  CHECK(p.q05 < p.mean);
  CHECK(p.mean < p.q95);
}

TEST_CASE("fitFast recovers the shared noise sd", "[predictor][shared]") {
  const std::vector<double> a = {0.20, 0.22, 0.18, 0.21, 0.19}, b = {0.50, 0.45, 0.55, 0.48, 0.52};
  for (std::uint64_t seed : {21, 22, 23}) {
    INFO("seed " << seed);
    const auto shared = sharedNoiseCurves(a, b, 0.005, 0.02, 30, seed);
    const ap::PosteriorSummary s = ap::fitFast(shared).summary();
    INFO("tau 0.02, sigma 0.005: posterior tau " << s.sharedNoiseSdMean << " sigma " << s.noiseSdMean);
    CHECK(s.sharedNoiseSdMean > 0.014);
    CHECK(s.sharedNoiseSdMean < 0.028);
    CHECK(s.noiseSdMean < 0.008);
    const auto independent = sharedNoiseCurves(a, b, 0.01, 0.0, 30, seed);
    const ap::PosteriorSummary z = ap::fitFast(independent).summary();
    INFO("tau 0, sigma 0.01: posterior tau " << z.sharedNoiseSdMean << " sigma " << z.noiseSdMean);
    CHECK(z.sharedNoiseSdMean < 0.004);
    CHECK(z.noiseSdMean == Approx(0.01).epsilon(0.25));
  }
}

TEST_CASE("the predictive of a later step includes the shared noise variance", "[predictor][shared]") {
  const std::uint64_t seed = 31;
  INFO("seed " << seed);
  const auto curves = sharedNoiseCurves({0.20, 0.22, 0.18}, {0.50, 0.45, 0.55}, 0.003, 0.03, 20, seed);
  ap::ModelOptions model;
  model.sharedNoiseSds = {0.03};
  const ap::Posterior post = ap::fitFast(curves, model);
  const double noise = post.summary().noiseSdMean;
  ap::PredictOptions latent;
  latent.observationNoise = false;
  for (std::size_t c = 0; c < curves.size(); ++c) {
    const double observed = post.predict(c, 400).sd, curve = post.predict(c, 400, latent).sd;
    const double added = observed * observed - curve * curve;
    INFO("curve " << c << ": sd " << observed << " latent sd " << curve << " sigma " << noise);
    // sigma^2 + tau^2 with sigma << tau: mostly tau^2 (the latent values stay far inside [0, 1]).
    CHECK(added > 0.95 * 0.03 * 0.03);
    CHECK(added < 0.03 * 0.03 + 4 * noise * noise + 1e-5);
  }
}
