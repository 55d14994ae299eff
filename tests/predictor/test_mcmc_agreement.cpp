// The MCMC references and the fast posterior describe the same model: on the same data their predictive
// means, sds, quantiles and family weights must agree within Monte Carlo error (estimated from runs
// with independent seeds) plus a small allowance for the quadrature grid.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "adaprec/predictor.hpp"
#include "test_support.hpp"

namespace ap = adaprec::predictor;

namespace {
struct Stats {
  double mean = 0, sd = 0;
};
Stats meanAndSe(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x / v.size();
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean) / (v.size() - 1);
  s.sd = std::sqrt(s.sd / v.size());  // standard error of the mean over chains
  return s;
}

void compare(const std::vector<ap::Curve>& curves, const ap::ModelOptions& model, double step, ap::McmcMethod method,
             double slack) {
  ap::FastOptions fine;
  fine.grid1d = 64;
  fine.grid2d = 24;
  fine.noiseGrid = 32;
  const ap::Posterior fast = ap::fitFast(curves, model, fine);
  const ap::Posterior fastDefault = ap::fitFast(curves, model);
  std::vector<std::vector<double>> means(curves.size()), sds(curves.size()), q95(curves.size());
  std::vector<std::vector<double>> weights(ap::kFamilyCount);
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const ap::Posterior ref = ap::fitMcmc(curves, model, ap::test::referenceMcmc(method, seed));
    for (std::size_t c = 0; c < curves.size(); ++c) {
      const ap::Prediction p = ref.predict(c, step);
      means[c].push_back(p.mean);
      sds[c].push_back(p.sd);
      q95[c].push_back(p.q95);
    }
    const ap::PosteriorSummary s = ref.summary();
    for (int f = 0; f < ap::kFamilyCount; ++f) weights[f].push_back(s.familyWeights[f]);
  }
  for (std::size_t c = 0; c < curves.size(); ++c) {
    for (const ap::Posterior* post : {&fast, &fastDefault}) {
      const ap::Prediction p = post->predict(c, step);
      const Stats m = meanAndSe(means[c]), s = meanAndSe(sds[c]), q = meanAndSe(q95[c]);
      INFO("seeds 1..4, curve " << c << (post == &fast ? " fine grid" : " default grid") << ": fast mean " << p.mean << " sd "
                    << p.sd << " q95 " << p.q95 << "; mcmc mean " << m.mean << " +- " << m.sd << " sd " << s.mean
                    << " +- " << s.sd << " q95 " << q.mean << " +- " << q.sd);
      // Allowance beyond 4 standard errors: `slack` of the predictive sd (grid error, ensemble bias).
      CHECK(std::abs(p.mean - m.mean) < 4 * m.sd + slack * s.mean);
      CHECK(std::abs(p.sd - s.mean) < 4 * s.sd + slack * s.mean);
      CHECK(std::abs(p.q95 - q.mean) < 4 * q.sd + slack * s.mean);
    }
  }
  const ap::PosteriorSummary fs = fast.summary();
  for (int f = 0; f < ap::kFamilyCount; ++f) {
    const Stats w = meanAndSe(weights[f]);
    INFO(ap::familyName(static_cast<ap::Family>(f)) << ": fast weight " << fs.familyWeights[f] << " mcmc " << w.mean
                                                    << " +- " << w.sd);
    CHECK(std::abs(fs.familyWeights[f] - w.mean) < 4 * w.sd + 0.03);
  }
}
}  // namespace

TEST_CASE("collapsed MCMC and fast posterior agree on one short curve, all families", "[predictor][mcmc]") {
  const ap::Curve curve{{50, 100, 150, 200, 250, 300, 350, 400}, {0.21, 0.34, 0.41, 0.47, 0.49, 0.53, 0.55, 0.555}, {}};
  compare({curve}, ap::ModelOptions{}, 800.0, ap::McmcMethod::kCollapsed, 0.1);
}

TEST_CASE("collapsed MCMC and fast posterior agree on two related curves with sample counts", "[predictor][mcmc]") {
  const ap::Curve a{{100, 200, 300, 400, 500, 600}, {0.40, 0.52, 0.58, 0.60, 0.63, 0.64}, {200, 200, 200, 200, 200, 200}};
  const ap::Curve b{{100, 200, 300, 400, 500, 600}, {0.38, 0.47, 0.53, 0.56, 0.58, 0.58}, {200, 200, 200, 200, 200, 200}};
  compare({a, b}, ap::ModelOptions{}, 1500.0, ap::McmcMethod::kCollapsed, 0.1);
}

TEST_CASE("collapsed MCMC and fast posterior agree on branches with a shared dip", "[predictor][mcmc]") {
  // Three branches of one checkpoint whose evaluations dip together at steps 300 and 500 (the shared
  // noise term; fitFast's rotated closed form against the MCMC's dense joint regression).
  const std::vector<double> steps = {0, 100, 200, 300, 400, 500, 600};
  const ap::Curve a{steps, {0.50, 0.60, 0.64, 0.61, 0.68, 0.65, 0.70}, std::vector<double>(7, 500)};
  const ap::Curve b{steps, {0.50, 0.58, 0.63, 0.60, 0.66, 0.62, 0.68}, std::vector<double>(7, 500)};
  const ap::Curve c{steps, {0.50, 0.61, 0.66, 0.62, 0.69, 0.66, 0.71}, std::vector<double>(7, 500)};
  compare({a, b, c}, ap::ModelOptions{}, 1500.0, ap::McmcMethod::kCollapsed, 0.1);
}

TEST_CASE("collapsed MCMC and fast posterior agree on curves observed at different steps", "[predictor][mcmc]") {
  // Partly shared steps: fitFast's general (dense) path; the shared term couples only steps 200 and 400.
  const ap::Curve a{{100, 200, 300, 400, 500}, {0.40, 0.50, 0.56, 0.57, 0.61}, {}};
  const ap::Curve b{{200, 250, 400, 450, 600}, {0.46, 0.50, 0.53, 0.55, 0.57}, {}};
  compare({a, b}, ap::ModelOptions{}, 1500.0, ap::McmcMethod::kCollapsed, 0.1);
}

TEST_CASE("uncollapsed ensemble MCMC agrees with the fast posterior for one family", "[predictor][mcmc]") {
  // Only the shared terms integrated out here: this also checks the closed forms. One family, because the ensemble's
  // family switches mix too slowly for a test-sized run.
  const ap::Curve a{{100, 200, 300, 400, 500, 600}, {0.40, 0.52, 0.58, 0.60, 0.63, 0.64}, {}};
  const ap::Curve b{{100, 200, 300, 400, 500, 600}, {0.38, 0.47, 0.53, 0.56, 0.58, 0.58}, {}};
  ap::ModelOptions model;
  model.families = {ap::Family::kPow3};
  // One shared noise sd (the ensemble does not mix over tau), large enough to couple the two curves:
  // the dense coupled likelihood and the per-curve truncation factors are checked, not just tau = 0.
  model.sharedNoiseSds = {0.02};
  compare({a, b}, model, 1500.0, ap::McmcMethod::kEnsemble, 0.2);
}

TEST_CASE("collapsed MCMC and fast posterior agree with a learning-rate schedule", "[predictor][mcmc]") {
  // The schedule-aware model: basis at the forward area, the shared annealing coefficient c on its nodes.
  // 40% of a cosine run, predicted at its end (where the annealing term is largest).
  const ap::Curve curve{{20, 40, 60, 80, 100, 120, 140, 160}, {0.52, 0.63, 0.68, 0.70, 0.73, 0.735, 0.75, 0.76},
                        std::vector<double>(8, 1000)};
  ap::ModelOptions model;
  model.lrSchedule = std::make_shared<const ap::LrSchedule>(ap::LrSchedule::parse("cosine:400"));
  compare({curve}, model, 400.0, ap::McmcMethod::kCollapsed, 0.1);
}

TEST_CASE("collapsed MCMC and fast posterior agree on branches under a step schedule", "[predictor][mcmc]") {
  const std::vector<double> steps = {0, 50, 100, 150, 200, 250, 300};
  const ap::Curve a{steps, {0.50, 0.60, 0.64, 0.61, 0.72, 0.74, 0.75}, std::vector<double>(7, 500)};
  const ap::Curve b{steps, {0.50, 0.58, 0.63, 0.60, 0.70, 0.71, 0.73}, std::vector<double>(7, 500)};
  ap::ModelOptions model;
  model.lrSchedule = std::make_shared<const ap::LrSchedule>(ap::LrSchedule::parse("step:0.1:180,400"));
  compare({a, b}, model, 600.0, ap::McmcMethod::kCollapsed, 0.1);
}
