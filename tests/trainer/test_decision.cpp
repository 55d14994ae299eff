// The controller's decision rule on constructed cases: curves drawn from a known saturating shape,
// candidates differing in speed and in where their curve saturates.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <numbers>
#include <thread>

#include "adaprec/predictor.hpp"
#include "controller/decision.hpp"
#include "trainer/controller_adapter.hpp"

using namespace adaprec::controller;

namespace {

// acc(step) = start + gain * (1 - exp(-step / scale)), observed at 0, 10, 20, 30.
CandidateObservation curve(const std::string& name, double start, double gain, double scale, double secondsPerStep) {
  CandidateObservation c;
  c.name = name;
  for (double s : {0.0, 10.0, 20.0, 30.0}) {
    c.steps.push_back(s);
    c.accuracies.push_back(start + gain * (1.0 - std::exp(-s / scale)));
  }
  c.secondsPerStep = secondsPerStep;
  return c;
}

DecisionConfig config(DecisionRule rule) {
  DecisionConfig d;
  d.rule = rule;
  d.horizonSteps = 120;
  d.baseline = 0;
  d.validationImages = 2000;
  return d;
}

}  // namespace

TEST_CASE("same curve, twice as fast: the faster candidate wins (both rules)", "[trainer][controller]") {
  const std::vector<CandidateObservation> c = {curve("fp32", 0.5, 0.3, 40, 0.02), curve("fp16", 0.5, 0.3, 40, 0.01)};
  for (DecisionRule rule : {DecisionRule::kGainPerSecond, DecisionRule::kRiskAware}) {
    const Decision d = decide(c, config(rule));
    INFO("rule " << decisionRuleName(rule) << " scores " << d.verdicts[0].score << " " << d.verdicts[1].score);
    CHECK(d.choice == 1);
    CHECK(d.verdicts[0].predictedMean == Approx(d.verdicts[1].predictedMean).margin(1e-9));
  }
}

TEST_CASE("a fast candidate that stops learning loses to a slower one that learns", "[trainer][controller]") {
  // table1: 20% faster but its curve is flat after a small gain.
  const std::vector<CandidateObservation> c = {curve("fp32", 0.5, 0.3, 40, 0.02), curve("table1", 0.5, 0.02, 5, 0.016)};
  const Decision d = decide(c, config(DecisionRule::kGainPerSecond));
  INFO("fp32 " << d.verdicts[0].predictedMean << " table1 " << d.verdicts[1].predictedMean);
  CHECK(d.choice == 0);
  CHECK(d.verdicts[0].predictedMean > d.verdicts[1].predictedMean + 0.1);
  CHECK(d.verdicts[1].probabilityBeatsBaseline < 0.5);
}

TEST_CASE("predictions extrapolate the curve and carry uncertainty", "[trainer][controller]") {
  const std::vector<CandidateObservation> c = {curve("fp32", 0.5, 0.3, 40, 0.02)};
  const Decision d = decide(c, config(DecisionRule::kGainPerSecond));
  // True value at step 120: 0.5 + 0.3 (1 - e^-3) = 0.785; the last observation is 0.658.
  CHECK(d.verdicts[0].predictedMean > 0.68);
  CHECK(d.verdicts[0].predictedMean < 0.85);
  CHECK(d.verdicts[0].predictedSd > 0.0);
  CHECK(d.verdicts[0].gain == Approx(d.verdicts[0].predictedMean - 0.5));
}

TEST_CASE("a converged phase picks the best predicted accuracy, not the slowest loser", "[trainer][controller]") {
  // Every candidate loses accuracy (gain < 0); fp16 loses least.
  const std::vector<CandidateObservation> c = {curve("fp32", 0.9, -0.05, 10, 0.01), curve("fp16", 0.9, -0.01, 10, 0.02),
                                                curve("fp8", 0.9, -0.1, 10, 0.005)};
  const Decision d = decide(c, config(DecisionRule::kGainPerSecond));
  CHECK(d.choice == 1);
}

TEST_CASE("per-candidate horizons: equal continuation time means more steps for the faster candidate",
          "[trainer][controller]") {
  // The same curve at 0.02 and 0.005 s/step; 2.4 s of continuation after the 30-step branch is 120
  // steps for the first and 480 for the second.
  const std::vector<CandidateObservation> c = {curve("fp32", 0.5, 0.3, 40, 0.02), curve("fp8", 0.5, 0.3, 40, 0.005)};
  DecisionConfig d = config(DecisionRule::kGainPerSecond);
  d.horizons = {150, 510};
  const Decision r = decide(c, d);
  CHECK(r.verdicts[0].horizonSteps == 150);
  CHECK(r.verdicts[1].horizonSteps == 510);
  CHECK(r.verdicts[0].seconds == Approx(3.0));
  CHECK(r.verdicts[1].seconds == Approx(2.55));
  // Same curve, more steps: a higher predicted accuracy, and the faster candidate wins.
  CHECK(r.verdicts[1].predictedMean > r.verdicts[0].predictedMean + 0.01);
  CHECK(r.choice == 1);
  d.horizons = {150};
  CHECK_THROWS(decide(c, d));
  d.horizons = {150, 30};  // not beyond the observed steps
  CHECK_THROWS(decide(c, d));
}

TEST_CASE("decide() remembers its fits: the same inputs decide the same without a fit", "[trainer][controller]") {
  std::vector<CandidateObservation> c = {curve("fp32", 0.5, 0.3, 40, 0.02), curve("fp16", 0.5, 0.3, 40, 0.01)};
  DecisionConfig cfg = config(DecisionRule::kGainPerSecond);
  cfg.learningRates.resize(200);
  for (std::size_t i = 0; i < cfg.learningRates.size(); ++i) cfg.learningRates[i] = 0.1 * (1 + std::cos(std::numbers::pi * i / 200.0)) / 2;
  const auto same = [](const Decision& a, const Decision& b) {
    REQUIRE(a.verdicts.size() == b.verdicts.size());
    CHECK(a.choice == b.choice);
    for (std::size_t i = 0; i < a.verdicts.size(); ++i) {
      CHECK(a.verdicts[i].predictedMean == b.verdicts[i].predictedMean);
      CHECK(a.verdicts[i].predictedSd == b.verdicts[i].predictedSd);
      CHECK(a.verdicts[i].score == b.verdicts[i].score);
    }
  };
  std::uint64_t fits = decisionFits();
  const Decision first = decide(c, cfg);
  CHECK(decisionFits() == ++fits);
  same(decide(c, cfg), first);
  CHECK(decisionFits() == fits);
  // Another horizon of the same curves: predicted anew from the same fit.
  DecisionConfig longer = cfg;
  longer.horizonSteps = 180;
  CHECK(decide(c, longer).verdicts[0].predictedMean != first.verdicts[0].predictedMean);
  CHECK(decisionFits() == fits);
  // Any other input is a fit of its own: one accuracy one ulp away, the schedule.
  std::vector<CandidateObservation> moved = c;
  moved[1].accuracies[2] = std::nextafter(moved[1].accuracies[2], 1.0);
  decide(moved, cfg);
  CHECK(decisionFits() == ++fits);
  DecisionConfig constant = cfg;
  constant.learningRates.assign(200, 0.1);
  decide(c, constant);
  CHECK(decisionFits() == ++fits);
  // The first inputs are still remembered, and give what a new fit gives (another thread's memory).
  same(decide(c, cfg), first);
  CHECK(decisionFits() == fits);
  Decision fresh;
  std::thread([&] { fresh = decide(c, cfg); }).join();
  same(fresh, first);
}

TEST_CASE("malformed observations are rejected", "[trainer][controller]") {
  CHECK_THROWS(decide({}, config(DecisionRule::kGainPerSecond)));
  CandidateObservation bad = curve("fp32", 0.5, 0.3, 40, 0.0);
  CHECK_THROWS(decide({bad}, config(DecisionRule::kGainPerSecond)));
  DecisionConfig short_ = config(DecisionRule::kGainPerSecond);
  short_.horizonSteps = 30;
  CHECK_THROWS(decide({curve("fp32", 0.5, 0.3, 40, 0.02)}, short_));
  CHECK_THROWS(parseDecisionRule("greedy"));
}

TEST_CASE("the trainer's learning rates: an annealing schedule is the predictor's, a constant one changes nothing",
          "[trainer][controller]") {
  const std::vector<CandidateObservation> c = {curve("fp32", 0.5, 0.3, 40, 0.02), curve("fp16", 0.5, 0.28, 40, 0.01)};
  const DecisionConfig plain = config(DecisionRule::kGainPerSecond);
  const Decision without = decide(c, plain);
  CHECK(without.lrSchedule == "none");

  // A constant rate is no schedule: the same decision to the bit.
  DecisionConfig constant = plain;
  constant.learningRates.assign(121, 0.05);
  const Decision same = decide(c, constant);
  CHECK(same.lrSchedule == "none");
  for (std::size_t i = 0; i < c.size(); ++i) {
    CHECK(same.verdicts[i].predictedMean == without.verdicts[i].predictedMean);
    CHECK(same.verdicts[i].predictedSd == without.verdicts[i].predictedSd);
  }

  // A cosine decay over the phase (rates at phase-relative steps 0..120): the schedule-aware model.
  DecisionConfig annealed = plain;
  for (int s = 0; s <= 120; ++s) annealed.learningRates.push_back(0.05 * 0.5 * (1 + std::cos(std::numbers::pi * s / 150.0)));
  const Decision with = decide(c, annealed);
  CHECK(with.lrSchedule == "points:121");
  // Exactly a direct fit of the predictor with that schedule.
  std::vector<double> steps;
  for (int s = 0; s <= 120; ++s) steps.push_back(s);
  namespace ap = adaprec::predictor;
  ap::ModelOptions model;
  model.lrSchedule = std::make_shared<const ap::LrSchedule>(ap::LrSchedule::fromPoints(steps, annealed.learningRates));
  std::vector<ap::Curve> curves;
  for (const CandidateObservation& o : c) curves.push_back({o.steps, o.accuracies, std::vector<double>(o.steps.size(), 2000)});
  const ap::Posterior direct = ap::fitFast(curves, model);
  // An annealing schedule also puts the predictions through the schedule's default map (a constant
  // one does not): the record says so.
  CHECK(with.scheduleMap);
  CHECK_FALSE(same.scheduleMap);
  ap::PredictOptions own;
  own.recalibrated = false;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const ap::Prediction p = direct.predict(i, 120);
    INFO(c[i].name << ": with " << with.verdicts[i].predictedMean << " without " << without.verdicts[i].predictedMean);
    CHECK(with.verdicts[i].predictedMean == p.mean);
    CHECK(with.verdicts[i].predictedSd == p.sd);
    // The schedule moves the model's own forecast (the map then narrows it, which may move the mean
    // back by a little: fp16's mapped mean is within 0.0009 of the model without a schedule).
    CHECK(std::abs(direct.predict(i, 120, own).mean - without.verdicts[i].predictedMean) > 1e-3);
  }
  // Malformed rates are refused.
  DecisionConfig negative = plain;
  negative.learningRates = {0.1, -0.1};
  CHECK_THROWS_WITH(decide(c, negative), Catch::Contains("point 1: lr must be >= 0"));
}

TEST_CASE("timeline instants of the controller's records: pruned candidates carry their reason") {
  // Reading a prediction of a pruned candidate ended every pruned run with ADAPREC_TIMELINE set.
  const nlohmann::json decision = nlohmann::json::parse(R"({"event":"decision","phase":2,"step":120,"choice":"table4",
    "candidates":[{"name":"fp32","pruned":"stood_in","stand_in":"fp16","step_s":0.2},
                  {"name":"fp16","predicted_mean":0.81,"predicted_sd":0.05,"step_s":0.1},
                  {"name":"table4","predicted_mean":0.83,"predicted_sd":0.04,"step_s":0.05}]})");
  const auto d = adaprec::trainer::timelineInstantOf(decision);
  REQUIRE(d);
  CHECK(d->first == "decision");
  CHECK(d->second == nlohmann::json::parse(R"({"step":120,"choice":"table4","phase":2,"candidates":[
    {"name":"fp32","chosen":false,"pruned":"stood_in"},
    {"name":"fp16","chosen":false,"predicted_mean":0.81,"predicted_sd":0.05},
    {"name":"table4","chosen":true,"predicted_mean":0.83,"predicted_sd":0.04}]})"));
  const nlohmann::json skipped = nlohmann::json::parse(R"({"event":"speculation_skipped","step":0,"choice":"fp16",
    "candidates":[{"name":"fp32","pruned":"stood_in","stand_in":"fp16"},{"name":"fp16"},{"name":"table2","pruned":"not_faster"}]})");
  const auto k = adaprec::trainer::timelineInstantOf(skipped);
  REQUIRE(k);
  CHECK(k->first == "speculation skipped");
  CHECK(k->second.at("candidates")[0] == nlohmann::json::parse(R"({"name":"fp32","chosen":false,"pruned":"stood_in"})"));
  CHECK(k->second.at("candidates")[1] == nlohmann::json::parse(R"({"name":"fp16","chosen":true})"));
  CHECK_FALSE(k->second.contains("phase"));
  CHECK_FALSE(adaprec::trainer::timelineInstantOf(nlohmann::json::parse(R"({"event":"eval","step":50})")));
}
