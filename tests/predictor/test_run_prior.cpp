// Priors learned from finished related runs (learnPriorFromRuns, ModelOptions::shapePrior) and the gain
// prior at the step scale (ModelOptions::gainAtStepScale): the fit, both MCMC references and the prior
// sampler must describe the same model, and learning must recover what the runs were drawn from.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "model.hpp"
#include "prior_sampler.hpp"
#include "test_support.hpp"

namespace ap = adaprec::predictor;
using adaprec::ErrorCode;

namespace {
constexpr double kHorizon = 300;

// A shape prior with `concentrated` of its mass spread evenly over a 2 x 2 block of pow3 cells around
// (u0, u1) = (0.40, 0.55) and the rest uniform over every family and cell: a corpus whose runs bend alike.
std::shared_ptr<const ap::ShapePrior> concentratedPrior(double concentrated) {
  auto prior = std::make_shared<ap::ShapePrior>();
  prior->stepScale = kHorizon;
  prior->grid1d = 20;
  prior->grid2d = 10;
  for (ap::Family family : ap::allFamilies()) {
    const int cells = ap::familyParameterCount(family) == 2 ? 100 : 20;
    prior->cellMass[static_cast<std::size_t>(family)].assign(cells, (1 - concentrated) / (ap::kFamilyCount * cells));
  }
  for (int i0 : {3, 4}) {
    for (int i1 : {5, 6}) prior->cellMass[static_cast<std::size_t>(ap::Family::kPow3)][i0 * 10 + i1] += concentrated / 4;
  }
  return prior;
}

std::vector<double> evenSteps(int count, double last) {
  std::vector<double> steps;
  for (int i = 0; i < count; ++i) steps.push_back(last * i / (count - 1));
  return steps;
}

using ap::test::codeOf;
using ap::test::firstPoints;
}  // namespace

namespace {
// Mean gain reached at the horizon (b g(1)) of prior draws whose shape reaches less than 30% of its
// gain by then (slow) and of the others (fast); vapor pressure: g(1) = exp(-kappa), from ~1 to ~0.
std::pair<double, double> horizonGainSlowFast(bool gainAtStepScale) {
  ap::ModelOptions model;
  model.gainAtStepScale = gainAtStepScale;
  model.gainHeadroomSd = 0.3;
  model.families = {ap::Family::kVaporPressure};
  const std::vector<double> steps = evenSteps(5, kHorizon);
  double sum[2] = {0, 0}, count[2] = {0, 0};
  for (int seed = 0; seed < 4000; ++seed) {
    std::mt19937_64 rng(seed);
    const auto draw = ap::detail::samplePrior(model, 1, steps, kHorizon, rng);
    const double g1 = ap::detail::gainScale(draw.family, draw.theta);
    sum[g1 < 0.3 ? 0 : 1] += draw.gain[0] * g1;
    count[g1 < 0.3 ? 0 : 1] += 1;
  }
  REQUIRE(count[0] > 200);
  REQUIRE(count[1] > 200);
  return {sum[0] / count[0], sum[1] / count[1]};
}
}  // namespace

TEST_CASE("gain at the step scale: b g(1) has the half-normal prior, whatever the shape", "[predictor][runprior]") {
  const auto [slow, fast] = horizonGainSlowFast(true);
  const auto [slowB, fastB] = horizonGainSlowFast(false);
  INFO("mean horizon gain of slow / fast shapes: prior on b g(1) " << slow << " / " << fast << ", on b " << slowB
                                                                   << " / " << fastB);
  // Slow shapes reach the same gain by the horizon as fast ones (equal in distribution: the rejection
  // of values outside [0, 1] reads a + b g(x) <= a + b g(1)); with the prior on b they reach far less.
  CHECK(std::abs(slow - fast) < 0.03);
  CHECK(slowB < 0.5 * fastB);
}

TEST_CASE("gain at the step scale: fast posterior and the MCMC references agree", "[predictor][runprior][mcmc]") {
  // A learned-style shape prior (cells of 8 per coordinate: the fine and default grids nest in them) and
  // the horizon gain: the collapsed sampler (scaled regressor) and the ensemble sampler (Jacobian g(1))
  // against fitFast (scaled regressor, coefficients rescaled to b).
  auto prior = std::make_shared<ap::ShapePrior>();
  prior->stepScale = 1600;
  prior->grid1d = 8;
  prior->grid2d = 8;
  for (ap::Family family : ap::allFamilies()) {
    const bool two = ap::familyParameterCount(family) == 2;
    auto& mass = prior->cellMass[static_cast<std::size_t>(family)];
    mass.assign(two ? 64 : 8, 0.0);
    for (std::size_t i = 0; i < mass.size(); ++i) mass[i] = 1.0 + (two ? (i / 8 + i % 8) % 3 : i % 4);
  }
  double total = 0;
  for (const auto& mass : prior->cellMass) for (double m : mass) total += m;
  for (auto& mass : prior->cellMass) for (double& m : mass) m /= total;
  const ap::Curve a{{100, 200, 300, 400, 500, 600}, {0.40, 0.52, 0.58, 0.60, 0.63, 0.64}, {}};
  const ap::Curve b{{100, 200, 300, 400, 500, 600}, {0.38, 0.47, 0.53, 0.56, 0.58, 0.58}, {}};
  ap::ModelOptions model;
  model.gainAtStepScale = true;
  model.gainHeadroomSd = 0.35;
  model.shapePrior = prior;
  for (ap::McmcMethod method : {ap::McmcMethod::kCollapsed, ap::McmcMethod::kEnsemble}) {
    ap::ModelOptions m = model;
    if (method == ap::McmcMethod::kEnsemble) {
      m.families = {ap::Family::kWeibull};  // the ensemble mixes too slowly over families for a test
      m.sharedNoiseSds = {0.01};
    }
    INFO((method == ap::McmcMethod::kEnsemble ? "ensemble" : "collapsed"));
    ap::FastOptions fine;
    fine.grid1d = 64;
    fine.grid2d = 24;
    fine.noiseGrid = 32;
    const ap::Posterior fast = ap::fitFast({a, b}, m, fine);
    std::vector<double> means, sds;
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const ap::Prediction p = ap::fitMcmc({a, b}, m, ap::test::referenceMcmc(method, seed)).predict(0, 1600);
      means.push_back(p.mean);
      sds.push_back(p.sd);
    }
    double mean = 0, sd = 0, se = 0;
    for (std::size_t i = 0; i < 4; ++i) mean += means[i] / 4, sd += sds[i] / 4;
    for (double x : means) se += (x - mean) * (x - mean) / 12;  // variance of the mean of 4
    se = std::sqrt(se);
    const ap::Prediction f = fast.predict(0, 1600);
    INFO("fast mean " << f.mean << " sd " << f.sd << "; mcmc mean " << mean << " +- " << se << " sd " << sd);
    CHECK(std::abs(f.mean - mean) < 4 * se + 0.1 * sd);
    CHECK(std::abs(f.sd - sd) < 0.15 * sd);
  }
}

TEST_CASE("fast posterior intervals are calibrated with a learned shape prior and the horizon gain",
          "[predictor][runprior][calibration]") {
  // The calibration test of the default model (test_calibration.cpp) under the new prior terms: draws
  // from the prior the fit assumes, 8 of 24 points seen, the value at the horizon predicted.
  ap::ModelOptions model;
  model.gainAtStepScale = true;
  model.gainHeadroomSd = 0.35;
  model.shapePrior = concentratedPrior(0.7);
  const std::vector<double> steps = evenSteps(24, kHorizon);
  constexpr int kDraws = 300, kObserved = 8;
  ap::test::Coverage coverage;
  for (int seed = 0; seed < kDraws; ++seed) {
    std::mt19937_64 rng(5000 + seed);
    const auto draw = ap::detail::samplePrior(model, 2, steps, kHorizon, rng);
    const ap::Posterior post = ap::fitFast(firstPoints(draw.curves, kObserved), model);
    for (std::size_t c = 0; c < draw.curves.size(); ++c) {
      coverage.add(post.predictive(c, steps.back()), draw.curves[c].values.back());
    }
  }
  const double c50 = coverage.c50(), c90 = coverage.c90();
  INFO("seeds 5000..: coverage 50% " << c50 << ", 90% " << c90 << " of " << coverage.total);
  CHECK(c50 > 0.41);
  CHECK(c50 < 0.59);
  CHECK(c90 > 0.85);
  CHECK(c90 < 0.95);
}

TEST_CASE("learnPriorFromRuns recovers the shapes and the gain scale the runs were drawn from", "[predictor][runprior]") {
  ap::ModelOptions truth;
  truth.gainAtStepScale = true;
  truth.gainHeadroomSd = 0.25;
  truth.shapePrior = concentratedPrior(1.0);
  truth.noiseMax = 0.02;  // runs as clean as the trainer's (n = 500: sd ~0.02)
  const std::vector<double> steps = evenSteps(31, kHorizon);
  std::vector<std::vector<ap::Curve>> runs;
  for (int seed = 0; seed < 30; ++seed) {
    std::mt19937_64 rng(9000 + seed);
    runs.push_back(ap::detail::samplePrior(truth, 3, steps, kHorizon, rng).curves);
  }
  ap::ModelOptions base;
  base.gainAtStepScale = true;  // k starts at the default 0.7
  ap::RunPriorOptions options;
  options.grid1d = 20;
  options.grid2d = 10;
  const ap::ModelOptions learned = ap::learnPriorFromRuns(runs, base, {}, options);
  REQUIRE(learned.shapePrior);
  const ap::ShapePrior& prior = *learned.shapePrior;
  CHECK(prior.stepScale == kHorizon);
  CHECK(prior.runCount == runs.size());
  CHECK(learned.stepScale == 0);
  prior.check();
  // Every shape stays possible: the uniform part at the weight of one run.
  for (ap::Family family : ap::allFamilies()) {
    for (double m : prior.cellMass[static_cast<std::size_t>(family)]) CHECK(m > 0);
  }
  // Mass near the true block (within one cell of it) against the uniform prior's share of those cells.
  double near = 0;
  const auto& pow3 = prior.cellMass[static_cast<std::size_t>(ap::Family::kPow3)];
  for (int i0 = 2; i0 <= 5; ++i0) {
    for (int i1 = 4; i1 <= 7; ++i1) near += pow3[i0 * 10 + i1];
  }
  const double uniformShare = 16.0 / 100 / ap::kFamilyCount;
  INFO("mass of the 4 x 4 pow3 cells around the truth: " << near << " (uniform " << uniformShare << "), k "
                                                          << learned.gainHeadroomSd);
  CHECK(near > 8 * uniformShare);
  // The EM estimate of k from 30 runs x 3 curves, shrunk to 0.7 at the weight of one run.
  CHECK(learned.gainHeadroomSd > 0.18);
  CHECK(learned.gainHeadroomSd < 0.36);

  SECTION("a few points of a new run from the same prior are predicted more sharply, and still covered") {
    int coveredLearned = 0, coveredBase = 0;
    double widthLearned = 0, widthBase = 0;
    constexpr int kRuns = 40;
    for (int seed = 0; seed < kRuns; ++seed) {
      std::mt19937_64 rng(20000 + seed);
      const auto draw = ap::detail::samplePrior(truth, 3, steps, kHorizon, rng);
      const auto seen = firstPoints(draw.curves, 5);
      ap::ModelOptions horizonBase = base;
      horizonBase.stepScale = kHorizon;  // the same horizon, the uniform shape prior and k = 0.7
      const ap::Posterior withRuns = ap::fitFast(seen, learned), without = ap::fitFast(seen, horizonBase);
      const double y = draw.curves[0].values.back();
      const ap::Predictive a = withRuns.predictive(0, kHorizon), b = without.predictive(0, kHorizon);
      coveredLearned += y >= a.quantile(0.05) && y <= a.quantile(0.95);
      coveredBase += y >= b.quantile(0.05) && y <= b.quantile(0.95);
      widthLearned += (a.quantile(0.95) - a.quantile(0.05)) / kRuns;
      widthBase += (b.quantile(0.95) - b.quantile(0.05)) / kRuns;
    }
    INFO("90% band width learned " << widthLearned << " (covers " << coveredLearned << " of " << kRuns
                                   << "), uniform " << widthBase << " (" << coveredBase << ")");
    CHECK(widthLearned < 0.7 * widthBase);
    CHECK(coveredLearned >= 32);
  }
}

TEST_CASE("learnPriorFromRuns and shape priors reject invalid input", "[predictor][runprior][errors]") {
  const ap::Curve good{{0, 100, 200}, {0.3, 0.5, 0.6}, {}};
  std::string message;
  CHECK(codeOf([&] { ap::learnPriorFromRuns({}); }) == ErrorCode::kInvalidArgument);
  CHECK(codeOf([&] { ap::learnPriorFromRuns({{good}, {{{0, 1}, {0.1, 1.5}, {}}}}); }, &message) ==
        ErrorCode::kInvalidArgument);
  CHECK(message.find("run 1") != std::string::npos);
  CHECK(codeOf([&] { ap::learnPriorFromRuns({{{{0}, {0.2}, {}}}}); }) == ErrorCode::kInvalidArgument);  // no shape
  ap::RunPriorOptions zero;
  zero.pseudoCount = 0;
  CHECK(codeOf([&] { ap::learnPriorFromRuns({{good}}, {}, {}, zero); }) == ErrorCode::kInvalidArgument);
  ap::ModelOptions fixedGain;
  fixedGain.gainHeadroomSd = 0;  // nothing to learn the gain scale of
  CHECK(codeOf([&] { ap::learnPriorFromRuns({{good}}, fixedGain); }) == ErrorCode::kInvalidArgument);

  ap::ModelOptions model;
  model.shapePrior = concentratedPrior(0.5);
  model.stepScale = 200;  // differs from the prior's 300
  CHECK(codeOf([&] { ap::fitFast({good}, model); }, &message) == ErrorCode::kInvalidArgument);
  CHECK(message.find("stepScale") != std::string::npos);
  model.stepScale = 0;
  auto broken = std::make_shared<ap::ShapePrior>(*concentratedPrior(0.5));
  broken->cellMass[0].pop_back();  // wrong cell count
  model.shapePrior = broken;
  CHECK(codeOf([&] { ap::fitFast({good}, model); }) == ErrorCode::kInvalidArgument);
  auto unnormalised = std::make_shared<ap::ShapePrior>(*concentratedPrior(0.5));
  unnormalised->cellMass[0][0] += 0.5;
  model.shapePrior = unnormalised;
  CHECK(codeOf([&] { ap::fitFast({good}, model); }) == ErrorCode::kInvalidArgument);
  model.shapePrior = concentratedPrior(1.0);
  model.families = {ap::Family::kIlog2};  // all the prior's mass is on pow3
  CHECK(codeOf([&] { ap::fitFast({good}, model); }, &message) == ErrorCode::kInvalidArgument);
  CHECK(message.find("no mass") != std::string::npos);
}

TEST_CASE("the CSV run column groups curves into runs", "[predictor][runprior][csv]") {
  std::istringstream in(
      "run,curve,step,value\n"
      "1,0,0,0.2\n0,0,0,0.3\n1,0,10,0.4\n0,1,0,0.3\n0,0,10,0.5\n0,1,10,0.45\n");
  const ap::CurveTable table = ap::readCurvesCsv(in);
  REQUIRE(table.curves.size() == 3);
  CHECK(table.runs == std::vector<long>{0, 0, 1});
  CHECK(table.ids == std::vector<long>{0, 1, 0});
  const auto runs = ap::curvesByRun(table);
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].size() == 2);
  CHECK(runs[1].size() == 1);
  CHECK(runs[1][0].values == std::vector<double>{0.2, 0.4});
  std::istringstream bad("run,step,value\n0,0,0.2\n0,0,0.3\n");
  std::string message;
  CHECK(codeOf([&] { ap::readCurvesCsv(bad); }, &message) == ErrorCode::kMalformedInput);
  CHECK(message.find("of run 0") != std::string::npos);
  std::istringstream negative("run,step,value\n-1,0,0.2\n");
  CHECK(codeOf([&] { ap::readCurvesCsv(negative); }) == ErrorCode::kMalformedInput);
}
