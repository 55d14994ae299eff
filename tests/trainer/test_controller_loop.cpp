// The controller's phase loop over the SpeculativeTrainer interface alone, with a fake trainer whose
// accuracy follows a known curve per format: any trainer that implements the interface gets the same
// phases, restores and decisions, without MPI or lib/trainer.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "adaprec/error.hpp"
#include "controller/precision_controller.hpp"
#include "controller/pruning.hpp"

using namespace adaprec;
using namespace adaprec::controller;

namespace {

// Accuracy grows with "progress"; a format's progress per step and seconds per step are fixed.
struct FakeState final : TrainingState {
  std::uint64_t step = 0;
  double progress = 0;
};

class FakeTrainer final : public SpeculativeTrainer {
 public:
  std::uint64_t step = 0;
  double progress = 0;
  std::string format = "fp32";
  int restores = 0, snapshots = 0, feedbackResets = 0;
  std::vector<std::string> records;
  std::vector<std::string> trained;  // the format of every train() call, in order
  // Per format: progress per step (default 1) and seconds per step (default 0.01).
  std::map<std::string, double> rateOf{{"table2", 0.05}};
  std::map<std::string, double> secondsOf{{"fp32", 0.02}};
  // A disturbed machine: the first `slowCalls` train() calls take slowFactor times as long.
  int slowCalls = 0, calls = 0;
  double slowFactor = 1;
  // A noisy machine: train() call k takes noise[k % size] times as long (empty: no noise).
  std::vector<double> noise;

  std::uint64_t stepsDone() const override { return step; }
  std::uint64_t totalSteps() const override { return 400; }
  std::unique_ptr<TrainingState> snapshot() override {
    ++snapshots;
    auto s = std::make_unique<FakeState>();
    s->step = step;
    s->progress = progress;
    return s;
  }
  void restore(const TrainingState& state) override {
    ++restores;
    const auto& s = dynamic_cast<const FakeState&>(state);
    step = s.step;
    progress = s.progress;
  }
  void setFormat(const FormatSpec&, const std::string& candidate, bool resetFeedback) override {
    format = candidate;
    feedbackResets += resetFeedback;
  }
  std::vector<double> train(std::uint64_t steps) override {
    // By default fp16 learns as fast as fp32 per step, twice as fast; table2 barely learns.
    const double rate = rateOf.count(format) ? rateOf.at(format) : 1.0;
    step += steps;
    progress += rate * static_cast<double>(steps);
    trained.push_back(format);
    const double factor = (calls < slowCalls ? slowFactor : 1) * (noise.empty() ? 1 : noise[calls % noise.size()]);
    ++calls;
    const double seconds = (secondsOf.count(format) ? secondsOf.at(format) : 0.01) * factor;
    return std::vector<double>(steps, seconds);
  }
  // Wall seconds each evaluate() takes (train() takes none: its seconds are only reported).
  double evaluateSleep = 0;
  int evaluations = 0;
  ValidationResult evaluate(std::size_t) override {
    ++evaluations;
    if (evaluateSleep > 0) std::this_thread::sleep_for(std::chrono::duration<double>(evaluateSleep));
    return {0.1 + 0.8 * (1 - std::exp(-progress / 60)), 1000};
  }
  double learningRate(std::uint64_t) const override { return 0.1; }
  double maxOverRanks(double v) override { return v; }
  void agree(std::span<std::uint64_t>) override {}
  void record(const std::string& json, const std::string&) override { records.push_back(json); }
  double epochAt(std::uint64_t s) const override { return static_cast<double>(s) / 100; }
  double wallSeconds() const override { return 1; }
};

// Every candidate speculated at every phase (pruning: the cases below), 10-step branches of 2
// evaluations and 50-step continuations, under the given overhead bound.
ControllerConfig unprunedLoopConfig(double maxOverhead) {
  ControllerConfig config;
  config.candidates = {"fp32", "fp16", "table2"};
  config.speculativeSteps = 10;
  config.evalPoints = 2;
  config.continuationSteps = 50;
  config.maxOverhead = maxOverhead;
  config.prune = false;
  return config;
}

}  // namespace

TEST_CASE("the phase loop drives any SpeculativeTrainer") {
  PrecisionController controller(unprunedLoopConfig(1));
  FakeTrainer trainer;
  while (trainer.stepsDone() < trainer.totalSteps()) {
    controller.beforeStep(trainer);
    if (trainer.stepsDone() < trainer.totalSteps()) trainer.train(1);
  }
  controller.finish(trainer);
  // Phases at 0, 60, 120, ... (10 branch steps + 50 continuation), the last that fits its branch.
  REQUIRE(controller.decisions() == 7);
  REQUIRE(trainer.records.size() == 8);  // 7 decisions + the summary
  for (std::size_t i = 0; i < 7; ++i) {
    const nlohmann::json j = nlohmann::json::parse(trainer.records[i]);
    CHECK(j["event"] == "decision");
    CHECK(j["step"] == 60 * i);
    CHECK(j["choice"] == "fp16");  // as good as fp32 per step, twice as fast
    CHECK(j["candidates"][1]["curve"].size() == 3);
  }
  CHECK(nlohmann::json::parse(trainer.records.back())["event"] == "controller_summary");
  // Per phase: a snapshot of the base and of each branch end; a restore before each later branch and
  // one to the chosen end; residuals dropped at each branch and at the decision.
  CHECK(trainer.snapshots == 7 * 4);
  CHECK(trainer.restores == 7 * 3);
  CHECK(trainer.feedbackResets == 7 * 4);
  CHECK(trainer.format == "fp16");
  // The chosen branch's steps are kept: the run ends at its total, having trained fp16 throughout.
  CHECK(trainer.stepsDone() == 400);
}

TEST_CASE("every evaluation of a phase is overhead, the chosen branch's included") {
  // A run without the controller evaluates nothing at the phase's start nor within a branch, so only
  // the chosen branch's steps are training; its evaluations were once counted as such (overhead_s
  // then left out the chosen branch's 2 of the phase's 7 evaluations).
  PrecisionController controller(unprunedLoopConfig(1));
  FakeTrainer trainer;
  trainer.evaluateSleep = 0.05;  // far above a fake branch's training (microseconds), even under a sanitizer
  controller.beforeStep(trainer);
  REQUIRE(controller.decisions() == 1);
  REQUIRE(trainer.evaluations == 7);  // the phase's start, then 2 per branch of 3
  const nlohmann::json j = nlohmann::json::parse(trainer.records.front());
  REQUIRE(j["choice"] == "fp16");
  CHECK(j["overhead_s"].get<double>() >= 7 * trainer.evaluateSleep);
  CHECK(j["phase_s"].get<double>() - j["overhead_s"].get<double>() == Approx(j["candidates"][1]["branch_s"].get<double>()));
  for (const auto& c : j["candidates"]) CHECK(c["branch_s"].get<double>() < trainer.evaluateSleep);
  CHECK(controller.overheadSeconds() == Approx(j["overhead_s"].get<double>()));
}

TEST_CASE("controller state round-trips and re-applies the choice without dropping residuals") {
  ControllerConfig config;
  config.candidates = {"fp32", "fp16"};
  config.speculativeSteps = 10;
  config.evalPoints = 2;
  config.continuationSteps = 50;
  config.prune = false;
  PrecisionController a(config);
  FakeTrainer trainer;
  a.beforeStep(trainer);
  const std::string state = a.saveState();
  PrecisionController b(config);
  FakeTrainer resumed;
  resumed.format = "fp32";
  b.loadState(state, resumed);
  CHECK(resumed.format == "fp16");
  CHECK(resumed.feedbackResets == 0);
  CHECK(b.decisions() == 1);
  CHECK(b.saveState() == state);
}

namespace {

void runToEnd(PrecisionController& controller, FakeTrainer& trainer) {
  while (trainer.stepsDone() < trainer.totalSteps()) {
    controller.beforeStep(trainer);
    if (trainer.stepsDone() < trainer.totalSteps()) trainer.train(1);
  }
  controller.finish(trainer);
}

std::vector<nlohmann::json> eventsOf(const FakeTrainer& trainer, const std::string& event) {
  std::vector<nlohmann::json> out;
  for (const std::string& r : trainer.records) {
    nlohmann::json j = nlohmann::json::parse(r);
    if (j["event"] == event) out.push_back(j);
  }
  return out;
}

ControllerConfig pruningConfig(std::vector<std::string> candidates) {
  ControllerConfig config;
  config.candidates = std::move(candidates);
  config.speculativeSteps = 10;
  config.evalPoints = 2;
  config.continuationSteps = 50;
  config.maxOverhead = 1;
  config.probeSteps = 3;
  return config;
}

// A short run on a slow network: 30-step branches, horizons at the end of training.
ControllerConfig slowNetworkConfig() {
  ControllerConfig config = pruningConfig({"fp32", "fp16", "table4"});
  config.speculativeSteps = 30;
  config.evalPoints = 3;
  config.continuationSteps = 400;
  return config;
}

// The phase at step 0 of a controller with this configuration, whose only decision record it returns.
nlohmann::json firstPhaseDecision(const ControllerConfig& config, FakeTrainer& trainer) {
  PrecisionController controller(config);
  controller.beforeStep(trainer);
  const std::vector<nlohmann::json> decisions = eventsOf(trainer, "decision");
  REQUIRE(decisions.size() == 1);
  return decisions[0];
}

std::map<std::string, double> slowNetwork() { return {{"fp32", 0.2}, {"fp16", 0.1}, {"table4", 0.01}}; }

}  // namespace

TEST_CASE("pruning: where no candidate is faster than fp32, the phases speculate nothing") {
  // Shared memory: compression saves no time (every format 0.02 s/step).
  PrecisionController controller(pruningConfig({"fp32", "fp16", "table2"}));
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.019}, {"table2", 0.02}};
  runToEnd(controller, trainer);
  CHECK(controller.decisions() == 0);
  // Phases at 0 (the probes: fp32's 3 steps kept), 53, 103, ...: every 50 steps up to 400.
  CHECK(controller.skippedPhases() == 8);
  const std::vector<nlohmann::json> skipped = eventsOf(trainer, "speculation_skipped");
  REQUIRE(skipped.size() == 8);
  CHECK(skipped[0]["step"] == 0);
  CHECK(skipped[1]["step"] == 53);
  CHECK(skipped[0]["choice"] == "fp32");
  CHECK(skipped[0]["candidates"][1]["pruned"] == "not_faster");  // 5 % faster: under min speedup 10 %
  CHECK(skipped[0]["candidates"][2]["pruned"] == "not_faster");
  CHECK_FALSE(skipped[0]["candidates"][0].contains("pruned"));
  // Only the first phase probes (3 steps per candidate, one train() call each, interleaved); no
  // evaluation, no branch ever.
  CHECK(std::count(trainer.trained.begin(), trainer.trained.end(), "fp16") == 3);
  CHECK(std::count(trainer.trained.begin(), trainer.trained.end(), "table2") == 3);
  CHECK(trainer.format == "fp32");
  // 400 steps of training: fp32's probe steps are training; the others' 6 are thrown away, so the
  // run learnt exactly what 400 fp32 steps learn.
  CHECK(trainer.stepsDone() == 400);
  CHECK(trainer.progress == 400);
  const nlohmann::json summary = nlohmann::json::parse(trainer.records.back());
  CHECK(summary["skipped_phases"] == 8);
}

TEST_CASE("pruning: the probes are interleaved, so a disturbance of a few steps does not make fp32 look slow") {
  // Shared memory: every format 0.02 s/step, but the machine runs 1.5x slower for the first two
  // train() calls. Probed back to back, fp32's probe (one call of 3 steps) was all slow, its median
  // 0.03 s: compression looked a third faster and the phase speculated. Interleaved (one step of each
  // candidate per round), the disturbance lands on one step of fp32 and one of fp16: every median is
  // 0.02 s and the phase is skipped.
  PrecisionController controller(pruningConfig({"fp32", "fp16", "table2"}));
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.02}, {"table2", 0.02}};
  trainer.slowCalls = 2;
  trainer.slowFactor = 1.5;
  controller.beforeStep(trainer);
  CHECK(controller.decisions() == 0);
  CHECK(controller.skippedPhases() == 1);
  // The first round in the candidates' order, the others fastest first (table2, which the disturbance
  // missed). fp32's first step, the phase's first, is no sample (probeSettled may settle on one sample,
  // and the run's first step carries one-off costs); fp16's one disturbed sample, 1.5x fp32's, settles
  // as not faster (no more samples of it could make it 10 % faster: the verdict a disturbance-free
  // probe gives too); table2 and fp32, equal, probe to the limit.
  const std::vector<std::string> rounds = {"fp32", "fp16", "table2", "table2", "fp32", "table2", "fp32"};
  CHECK(trainer.trained == rounds);
  // fp32 goes on from its own probe's end: its 3 steps are training.
  CHECK(trainer.stepsDone() == 3);
  CHECK(trainer.progress == Approx(3));
}

TEST_CASE("pruning: a candidate 10 % faster than fp32 is still speculated") {
  // bf16, which cannot stand in for fp32: both branches run and the phase decides.
  PrecisionController controller(pruningConfig({"fp32", "bf16"}));
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"bf16", 0.0179}};
  controller.beforeStep(trainer);
  CHECK(controller.decisions() == 1);
  CHECK(controller.skippedPhases() == 0);
}

TEST_CASE("pruning: fp16, shown faster than fp32, stands in for fp32's branch") {
  // fp16 learns as fp32 does per step (the fake's default) and is 25 % faster: its branch is fp32's
  // curve, so fp32 trains its probe steps only and cannot be chosen. table2 (faster, learning little)
  // keeps a choice to make.
  for (const DecisionRule rule : {DecisionRule::kGainPerSecond, DecisionRule::kRiskAware}) {
    ControllerConfig config = pruningConfig({"fp32", "fp16", "table2"});
    config.rule = rule;
    FakeTrainer trainer;
    trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.015}, {"table2", 0.01}};
    const nlohmann::json d = firstPhaseDecision(config, trainer);
    CHECK(d["candidates"][0]["pruned"] == "stood_in");
    CHECK(d["candidates"][0]["stand_in"] == "fp16");
    CHECK_FALSE(d["candidates"][0].contains("curve"));
    CHECK(d["candidates"][1]["curve"].size() == 3);
    CHECK(d["choice"] == "fp16");
    CHECK(std::count(trainer.trained.begin(), trainer.trained.end(), "fp32") == 3);  // its 3 interleaved probe steps only
    if (rule == DecisionRule::kRiskAware) {
      // fp32 as fp16's own curve at fp32's step time: fp16 beats it with the same curve, faster.
      const double p = d["candidates"][1]["p_beats_baseline"].get<double>();
      CHECK(p > 0.5);
      CHECK(p < 1.0);  // a comparison of two predictions, not with a ceiling no branch reaches
    }
  }
}

TEST_CASE("pruning: with only fp32 and fp16 left, fp16 goes on without a branch or an evaluation") {
  // The choice is made by pruning alone: fp16 would run first (faster), nothing could dominate it,
  // and its branch would stand in for fp32's. Such phases spent their evaluations on a foregone
  // choice (0.6-0.7 s each at 1 Gbit/s).
  for (const DecisionRule rule : {DecisionRule::kGainPerSecond, DecisionRule::kRiskAware}) {
    ControllerConfig config = pruningConfig({"fp32", "fp16", "table2"});
    config.rule = rule;
    PrecisionController controller(config);
    FakeTrainer trainer;
    trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.015}, {"table2", 0.0145}};  // table2 not 10 % faster than fp16
    runToEnd(controller, trainer);
    CHECK(controller.decisions() == 0);
    const std::vector<nlohmann::json> skipped = eventsOf(trainer, "speculation_skipped");
    REQUIRE(skipped.size() == controller.skippedPhases());
    REQUIRE(skipped.size() >= 2);
    for (const nlohmann::json& p : skipped) {
      CHECK(p["choice"] == "fp16");
      CHECK(p["candidates"][0]["pruned"] == "stood_in");
      CHECK(p["candidates"][0]["stand_in"] == "fp16");
      CHECK_FALSE(p["candidates"][1].contains("pruned"));
      CHECK(p["candidates"][2]["pruned"] == "not_faster");
    }
    // The probes (interleaved) are the only steps of fp32 and table2; fp16 goes on from its probe's
    // end, so its probe steps are training: the run is 400 steps of fp16. fp32 probes 3 steps; fp16
    // and table2, both faster than fp32 and 3 % apart (not settled: kSettledRatio), are contested and
    // probe to the limit, speculativeSteps / evalPoints = 5 (probeContested).
    CHECK(std::count(trainer.trained.begin(), trainer.trained.end(), "fp32") == 3);
    CHECK(std::count(trainer.trained.begin(), trainer.trained.end(), "table2") == 5);
    CHECK(trainer.format == "fp16");
    CHECK(trainer.stepsDone() == 400);
    CHECK(trainer.progress == Approx(400));
    CHECK(skipped[1]["step"] == 55);
  }
  // fp16 no faster than fp32 (pruned): fp32 alone, as before.
  PrecisionController controller(pruningConfig({"fp32", "fp16"}));
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.0195}};
  controller.beforeStep(trainer);
  const std::vector<nlohmann::json> skipped = eventsOf(trainer, "speculation_skipped");
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0]["choice"] == "fp32");
  CHECK(skipped[0]["candidates"][1]["pruned"] == "not_faster");
}

TEST_CASE("pruning: soleCandidate leaves a choice whenever a branch could change it") {
  const ControllerConfig config = pruningConfig({"fp32", "fp16", "bf16", "table4"});
  const std::vector<double> seconds = {0.02, 0.015, 0.015, 0.01};
  CHECK(soleCandidate(config, {"", "not_faster", "not_faster", "not_faster"}, seconds) == 0);
  CHECK(soleCandidate(config, {"not_faster", "not_faster", "not_faster", ""}, seconds) == 3);
  CHECK(soleCandidate(config, {"", "", "not_faster", "not_faster"}, seconds) == 1);  // fp16 stands in
  CHECK(soleCandidate(config, {"", "not_faster", "", "not_faster"}, seconds) == kNoBaseline);  // bf16 cannot
  CHECK(soleCandidate(config, {"", "", "not_faster", ""}, seconds) == kNoBaseline);   // table4 to weigh
  CHECK(soleCandidate(config, {"", "", "not_faster", "not_faster"}, {0.02, 0.02, 0.015, 0.01}) == kNoBaseline);
  ControllerConfig ef = pruningConfig({"fp32", "fp16+ef"});
  CHECK(soleCandidate(ef, {"", ""}, {0.02, 0.015}) == kNoBaseline);
}

TEST_CASE("pruning: only a candidate within fp16's error stands in for fp32") {
  // bf16 (2^-8 per quantization) and fp16+ef are not fp16: fp32's branch runs beside them.
  for (const char* candidate : {"bf16", "fp16+ef"}) {
    FakeTrainer trainer;
    trainer.secondsOf = {{"fp32", 0.02}, {candidate, 0.015}};
    const nlohmann::json d = firstPhaseDecision(pruningConfig({"fp32", candidate}), trainer);
    CHECK_FALSE(d["candidates"][0].contains("pruned"));
    CHECK(d["candidates"][0]["curve"].size() == 3);
  }
  // Without pruning every candidate runs, fp16 beside fp32.
  ControllerConfig config = pruningConfig({"fp32", "fp16"});
  config.prune = false;
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.015}};
  CHECK(firstPhaseDecision(config, trainer)["candidates"][0]["curve"].size() == 3);
}

TEST_CASE("pruning: on a slow network the fast branches dominate the slow ones, which are never run") {
  // fp32 20x and fp16 10x table4's step; table4 learns as fast per step. Fastest first: table4's
  // branch runs, then fp16 and fp32 cannot reach its rate even with accuracy 1.
  ControllerConfig config = slowNetworkConfig();
  PrecisionController controller(config);
  FakeTrainer trainer;
  trainer.secondsOf = slowNetwork();
  controller.beforeStep(trainer);
  REQUIRE(controller.decisions() == 1);
  const std::vector<nlohmann::json> decisions = eventsOf(trainer, "decision");
  REQUIRE(decisions.size() == 1);
  const nlohmann::json& d = decisions[0];
  CHECK(d["choice"] == "table4");
  CHECK(d["candidates"][0]["pruned"] == "dominated");
  CHECK(d["candidates"][1]["pruned"] == "dominated");
  CHECK_FALSE(d["candidates"][2].contains("pruned"));
  CHECK(d["candidates"][2]["curve"].size() == 4);
  CHECK(d["candidates"][0]["step_s"] == Approx(0.2));
  // table4's branch kept its probe steps: 30 branch steps in all.
  CHECK(trainer.stepsDone() == 30);
  CHECK(trainer.format == "table4");
  // The probes stop once the gaps are settled: fp16 (10x table4's step) probes one step, not
  // probeSteps (3), and fp32 (20x) two, the first of them the phase's first step, which is no sample:
  // table4's second sample gives the spread, and every verdict is clear.
  CHECK(std::count(trainer.trained.begin(), trainer.trained.end(), "fp32") == 2);
  CHECK(std::count(trainer.trained.begin(), trainer.trained.end(), "fp16") == 1);
  CHECK(d["candidates"][0]["pruning_samples_s"].size() == 1);
  CHECK(d["candidates"][2]["pruning_samples_s"].size() == 2);
}

TEST_CASE("pruning: a phase fits each set of branches once") {
  // table4's branch alone is planned three times: before fp16's branch and fp32's (both dominated)
  // and to decide. One fit serves all three (decide's memory); each was a fit of its own before.
  PrecisionController controller(slowNetworkConfig());
  FakeTrainer trainer;
  trainer.secondsOf = slowNetwork();
  trainer.rateOf = {{"table4", 0.9}};  // a curve no other test fits (the memory is the thread's)
  const std::uint64_t before = decisionFits();
  controller.beforeStep(trainer);
  REQUIRE(controller.decisions() == 1);
  CHECK(decisionFits() - before == 1);
}

TEST_CASE("pruning: a probe stops when more samples could not change a verdict it takes part in") {
  const ControllerConfig config = pruningConfig({"fp32", "fp16", "fp8s", "table4", "table2"});
  // The first probe round of a phase at 100 Mbit/s (2026-12-07; the first step of the run, fp32's,
  // carries a one-off cost), and the second samples of the two fastest.
  std::vector<std::vector<double>> slow = {{0.7391}, {0.3801}, {0.2263}, {0.1467, 0.1388}, {0.1193, 0.1171}};
  // fp32, fp16 and fp8s are 1.5-5x apart from every candidate they are compared with: settled.
  for (std::size_t c : {0, 1, 2}) CHECK(probeSettled(config, slow, c));
  // table4 and table2 are 1.2x apart, within kSettledRatio of the 10 % threshold: more samples.
  CHECK_FALSE(probeSettled(config, slow, 3));
  CHECK_FALSE(probeSettled(config, slow, 4));
  // No spread yet (one sample each): nothing is settled, however far apart.
  CHECK_FALSE(probeSettled(config, {{0.7391}, {0.3801}, {0.2263}, {0.1467}, {0.1193}}, 0));
  // A wide spread makes a 1.6x gap unsettled: fp16 against fp32 with steps scattered by +-30 %.
  CHECK_FALSE(probeSettled(config, {{0.6}, {0.37}, {0.2263}, {0.1467, 0.2}, {0.1193, 0.08}}, 0));
  // Shared memory: fp32's one sample 1.27x the others' (a one-off cost), the others equal and steady.
  // The spread says settled; the ratio guard does not let one inflated sample settle the verdicts.
  const ControllerConfig three = pruningConfig({"fp32", "fp16", "table2"});
  CHECK_FALSE(probeSettled(three, {{0.0254}, {0.020, 0.020}, {0.020, 0.0201}}, 0));
  CHECK_FALSE(probeSettled(three, {{0.0254}, {0.020, 0.020}, {0.020, 0.0201}}, 1));
  CHECK_THROWS_AS(probeSettled(three, {{0.0254}, {}, {0.020, 0.0201}}, 1), Error);
}

TEST_CASE("pruning: two candidates that can both pay probe longer while their test is not settled") {
  const ControllerConfig config = pruningConfig({"fp32", "fp16", "fp8s", "table4", "table2"});
  // After the first three rounds at 100 Mbit/s: table2's steps 15 % shorter than table4's, fp8s's two
  // samples 20 % apart. table2 against table4 is not settled, and both are shown faster than fp32.
  const std::vector<std::vector<double>> slow = {
      {0.6}, {0.37, 0.36}, {0.22, 0.27}, {0.13, 0.125, 0.127}, {0.11, 0.105, 0.108}};
  CHECK(probeContested(config, slow, 3));
  CHECK(probeContested(config, slow, 4));
  // fp8s against table4 is settled (1.9x), fp16 against every other candidate too; fp32 never probes longer.
  CHECK_FALSE(probeContested(config, slow, 1));
  CHECK_FALSE(probeContested(config, slow, 0));
  // A candidate contests only with candidates that can pay: table2 against a table4 not shown faster
  // than fp32 is no contest.
  std::vector<std::vector<double>> noPay = slow;
  noPay[3] = {0.59, 0.6, 0.61};
  noPay[1] = {0.59, 0.6};
  noPay[2] = {0.6, 0.61};
  CHECK_FALSE(probeContested(config, noPay, 4));
  // Shared memory: nothing shown faster than fp32, so nothing probes longer however close.
  const std::vector<std::vector<double>> shm = {
      {0.0200, 0.0203}, {0.0199, 0.0201}, {0.0198, 0.0200}, {0.0197, 0.0199}, {0.0196, 0.0199}};
  for (std::size_t c = 0; c < 5; ++c) CHECK_FALSE(probeContested(config, shm, c));
  CHECK_THROWS_AS(probeContested(config, {{0.6}, {}, {0.22}, {0.13}, {0.11}}, 1), Error);
}

TEST_CASE("pruning: a more precise branch bounds the lossier candidates between it and the fastest") {
  // 1 Gbit/s (2026-12-07): every compressed format pays against fp32 and their steps lie within 20-40 %
  // of one another, so no branch is dominated by a perfect ceiling. Branches run fastest first
  // (table2), then most bits first: fp16, then fp32 (stood in for by fp16), then fp8s.
  ControllerConfig config = slowNetworkConfig();
  config.candidates = {"fp32", "fp16", "fp8s", "table2"};
  const std::map<std::string, double> gigabit = {{"fp32", 0.1}, {"fp16", 0.073}, {"fp8s", 0.06}, {"table2", 0.053}};
  // Curves still rising at the end of training (progress 60 at 400 steps): on a curve that has levelled
  // off, more steps gain nothing and a faster candidate's ceiling is the precise branch's own rate.
  const auto slowLearning = [](double rate) {
    return std::map<std::string, double>{{"fp32", rate}, {"fp16", rate}, {"fp8s", rate}, {"table2", rate}};
  };
  {
    // table2 learns as fast per step as fp16: fp16's curve at fp8s's speed scores less than table2's
    // branch, so fp8s, which is not expected to learn more per step than fp16, is not run.
    FakeTrainer trainer;
    trainer.secondsOf = gigabit;
    trainer.rateOf = slowLearning(0.15);
    const nlohmann::json d = firstPhaseDecision(config, trainer);
    CHECK(d["choice"] == "table2");
    CHECK(d["speculation_order"] == nlohmann::json({"table2", "fp16", "fp32", "fp8s"}));
    CHECK(d["candidates"][0]["pruned"] == "stood_in");
    CHECK_FALSE(d["candidates"][1].contains("pruned"));
    CHECK(d["candidates"][2]["pruned"] == "bounded");
    CHECK(d["candidates"][2]["bounded_by"] == "fp16");
    CHECK_FALSE(d["candidates"][2].contains("curve"));
    CHECK_FALSE(d["candidates"][3].contains("pruned"));
  }
  {
    // table2 learns at half fp16's rate per step: fp16's curve at fp8s's speed would beat every
    // branch run, so fp8s runs, and wins.
    FakeTrainer trainer;
    trainer.secondsOf = gigabit;
    trainer.rateOf = slowLearning(0.15);
    trainer.rateOf["table2"] = 0.075;
    const nlohmann::json d = firstPhaseDecision(config, trainer);
    CHECK_FALSE(d["candidates"][2].contains("pruned"));
    CHECK(d["candidates"][2]["curve"].size() == 4);
    CHECK(d["choice"] == "fp8s");
  }
  {
    // Nothing more precise than fp8s has run when fp16 is not faster than fp32 and table2 learns at
    // half the rate: fp32's branch runs (second: most bits), and then bounds fp8s only where its curve
    // at fp8s's speed would not win.
    FakeTrainer trainer;
    trainer.secondsOf = {{"fp32", 0.1}, {"fp16", 0.1}, {"fp8s", 0.06}, {"table2", 0.053}};
    trainer.rateOf = slowLearning(0.15);
    trainer.rateOf["table2"] = 0.075;
    const nlohmann::json d = firstPhaseDecision(config, trainer);
    CHECK(d["candidates"][1]["pruned"] == "not_faster");
    CHECK(d["speculation_order"] == nlohmann::json({"table2", "fp16", "fp32", "fp8s"}));
    CHECK_FALSE(d["candidates"][0].contains("pruned"));
    CHECK_FALSE(d["candidates"][2].contains("pruned"));
    CHECK(d["choice"] == "fp8s");
  }
}

TEST_CASE("pruning: branches run fastest first, then most bits first, a stand-in before fp32") {
  const ControllerConfig config = pruningConfig({"fp32", "fp16", "fp8s", "table4", "table2", "fastest"});
  const std::vector<double> seconds = {0.1, 0.073, 0.06, 0.055, 0.053, 0.05};
  using Order = std::vector<std::size_t>;
  CHECK(branchOrder(config, seconds, {}) == Order{5, 1, 0, 2, 3, 4});
  // The fastest candidate not pruned goes first; the pruned keep their places among the others.
  const std::vector<std::string> pruned = {"", "", "", "not_faster", "", "not_faster"};
  CHECK(branchOrder(config, seconds, pruned) == Order{4, 1, 0, 2, 3, 5});
  // Equal bits: fastest first.
  const ControllerConfig eight = pruningConfig({"fp32", "fp8", "fp8s", "table2"});
  CHECK(branchOrder(eight, {0.1, 0.07, 0.06, 0.05}, {}) == Order{3, 0, 2, 1});
  CHECK_THROWS_AS(branchOrder(eight, {0.1, 0.07}, {}), Error);
}

TEST_CASE("pruning: a branch that learns nothing prunes nothing") {
  // table4 is the fastest but learns nothing: its lower bound is below 0, so it prunes nothing and
  // fp16 (10x slower) runs; fp16 learns, and may then prune fp32.
  PrecisionController controller(slowNetworkConfig());
  FakeTrainer trainer;
  trainer.secondsOf = slowNetwork();
  trainer.rateOf = {{"table4", 0.0}};
  controller.beforeStep(trainer);
  const std::vector<nlohmann::json> decisions = eventsOf(trainer, "decision");
  REQUIRE(decisions.size() == 1);
  CHECK_FALSE(decisions[0]["candidates"][1].contains("pruned"));
  CHECK(decisions[0]["candidates"][1]["curve"].size() == 4);
  CHECK(decisions[0]["choice"] == "fp16");
}

TEST_CASE("pruning: the risk rule without fp32's branch compares with fp32's rate ceiling") {
  ControllerConfig config = slowNetworkConfig();
  config.rule = DecisionRule::kRiskAware;
  PrecisionController controller(config);
  FakeTrainer trainer;
  trainer.secondsOf = slowNetwork();
  controller.beforeStep(trainer);
  const std::vector<nlohmann::json> decisions = eventsOf(trainer, "decision");
  REQUIRE(decisions.size() == 1);
  CHECK(decisions[0]["candidates"][0]["pruned"] == "dominated");
  CHECK(decisions[0]["choice"] == "table4");
  CHECK(decisions[0]["candidates"][2]["p_beats_baseline"].get<double>() > 0.95);
}

TEST_CASE("pruning: measured step times travel in the controller's state") {
  PrecisionController a(pruningConfig({"fp32", "fp16", "table2"}));
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.02}, {"table2", 0.02}};
  a.beforeStep(trainer);
  const std::string state = a.saveState();
  PrecisionController b(pruningConfig({"fp32", "fp16", "table2"}));
  FakeTrainer resumed;
  resumed.step = trainer.step;
  b.loadState(state, resumed);
  CHECK(b.saveState() == state);
  // The resumed controller does not probe again: its next phase skips at once.
  resumed.step = 53;
  CHECK(b.beforeStep(resumed));
  CHECK(resumed.trained.empty());
  CHECK(b.skippedPhases() == 2);
}

TEST_CASE("pruning: not_faster weighs the gap against the step times' own spread") {
  const ControllerConfig config = pruningConfig({"fp32", "fp16", "table2"});
  // One sample each: no spread to pool, the plain 10 % threshold (fp16 10.5 % faster, table2 5 %).
  CHECK_FALSE(notShownFaster(config, {{0.02}, {0.0179}, {0.019}}, 1, 0));
  CHECK(notShownFaster(config, {{0.02}, {0.0179}, {0.019}}, 2, 0));
  // fp16 truly 5 % faster on a noisy machine: its median is 19 % below fp32's, but the samples scatter
  // by +-15 %, and the gap is not shown (the old median threshold speculated).
  const std::vector<std::vector<double>> noisy = {
      {0.023, 0.020, 0.017}, {0.019 * 0.85, 0.019 * 0.8, 0.019 * 1.2}, {0.020, 0.024, 0.016}};
  CHECK(noisy[1][0] < 0.9 * 0.020);
  CHECK(notShownFaster(config, noisy, 1, 0));
  // Truly 25 % faster with a 2 % spread: shown.
  const std::vector<std::vector<double>> clear = {
      {0.020, 0.0204, 0.0196}, {0.015, 0.0153, 0.0147}, {0.020, 0.0204, 0.0196}};
  CHECK_FALSE(notShownFaster(config, clear, 1, 0));
  CHECK(notShownFaster(config, clear, 2, 0));
  // A one-off cost on one step (a format's first use: seconds) is left out, not pooled.
  std::vector<std::vector<double>> outlier = clear;
  outlier[1][0] = 5.0;
  CHECK_FALSE(notShownFaster(config, outlier, 1, 0));
  // Samples of different lengths (a probe against a branch) and unmeasured candidates.
  CHECK_FALSE(notShownFaster(config, {std::vector<double>(20, 0.02), {0.015, 0.0153, 0.0147}, {}}, 1, 0));
  CHECK_THROWS_AS(notShownFaster(config, {{0.02}, {}, {0.02}}, 1, 0), Error);
  CHECK_THROWS_AS(notShownFaster(config, {{0.02}, {-1.0}, {0.02}}, 1, 0), Error);
  // Student's t, one-sided 90 %.
  CHECK(fasterQuantile(1) == Approx(3.0777).epsilon(1e-4));
  CHECK(fasterQuantile(8) == Approx(1.3968).epsilon(1e-4));
  CHECK(fasterQuantile(30) == Approx(1.3104).epsilon(1e-3));
  CHECK(fasterQuantile(1e9) == Approx(1.2816).epsilon(1e-4));
}

TEST_CASE("pruning: a lossier candidate must be faster than the more precise ones still in play") {
  const ControllerConfig config = pruningConfig({"fp32", "fp16", "fp8s", "table4", "table2"});
  // Probe samples measured on 4 emulated nodes at 1 Gbit/s (2026-11-27, the CNN): fp16 is not shown
  // 10 % faster than fp32; fp8s is; table4 and table2 are not shown 10 % faster than fp8s (whose
  // branch would learn at least as much per step), so they are not speculated.
  const std::vector<std::vector<double>> link = {{0.2063, 0.1398, 0.1550},
                                                 {0.1471, 0.1173, 0.1627},
                                                 {0.1270, 0.1065, 0.1113},
                                                 {0.1066, 0.1028, 0.0975},
                                                 {0.0968, 0.1015, 0.1056}};
  CHECK(notFasterVerdicts(config, link) == std::vector<bool>{false, true, false, true, true});
  // Against fp32 alone every one but fp16 was shown faster (the rule before).
  for (std::size_t c : {2, 3, 4}) CHECK_FALSE(notShownFaster(config, link, c, 0));
  // At 100 Mbit/s each lossier format is clearly faster than the more precise ones, but fp32, fp16 and
  // fp8s are not pruned by this rule (dominance prunes them after the fast branches ran).
  const std::vector<std::vector<double>> slow = {{0.5966, 0.6283, 0.5944},
                                                 {0.4232, 0.4057, 0.3541},
                                                 {0.2078, 0.2354, 0.2253},
                                                 {0.1483, 0.1496, 0.1476},
                                                 {0.1181, 0.1218, 0.1212}};
  CHECK(notFasterVerdicts(config, slow) == std::vector<bool>(5, false));
  // A pruned candidate does not prune the lossier ones: fp16 (not faster than fp32) does not stop
  // fp8s, which is compared with fp32.
  const std::vector<std::vector<double>> chain = {{0.020}, {0.019}, {0.0175}};
  CHECK(notFasterVerdicts(pruningConfig({"fp32", "fp16", "fp8s"}), chain) == std::vector<bool>{false, true, false});
  // "fastest" has no bits of its own: compared with the baseline only.
  CHECK(notFasterVerdicts(pruningConfig({"fp32", "table4", "fastest"}), {{0.02}, {0.01}, {0.0105}}) ==
        std::vector<bool>{false, false, false});
}

TEST_CASE("pruning: on a noisy machine a gap the probes cannot show speculates nothing") {
  // fp16 is 5 % faster than fp32; the machine scatters steps by +-20 %, in a pattern that puts fp16's
  // probe median 19 % below fp32's. The median threshold alone speculated a whole phase here.
  PrecisionController controller(pruningConfig({"fp32", "fp16", "table2"}));
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.019}, {"table2", 0.02}};
  // Calls in rounds of (fp32, fp16, table2).
  trainer.noise = {1.15, 0.85, 1.0, 1.0, 0.8, 1.2, 0.85, 1.2, 0.8};
  controller.beforeStep(trainer);
  CHECK(controller.decisions() == 0);
  CHECK(controller.skippedPhases() == 1);
  const std::vector<nlohmann::json> skipped = eventsOf(trainer, "speculation_skipped");
  REQUIRE(skipped.size() == 1);
  const nlohmann::json& fp16 = skipped[0]["candidates"][1];
  CHECK(fp16["pruned"] == "not_faster");
  CHECK(fp16["step_s"].get<double>() < 0.9 * skipped[0]["candidates"][0]["step_s"].get<double>());
  CHECK(fp16["samples_s"].size() == 3);  // the record shows what the verdict weighed
  // A 40 % gap under a +-5 % noise is shown: that phase speculates.
  PrecisionController fast(pruningConfig({"fp32", "bf16", "table2"}));
  FakeTrainer fastTrainer;
  fastTrainer.secondsOf = {{"fp32", 0.02}, {"bf16", 0.012}, {"table2", 0.02}};
  fastTrainer.noise = {1.05, 0.95, 1.0, 1.0, 1.05, 1.05, 0.95, 1.0, 0.95};
  fast.beforeStep(fastTrainer);
  CHECK(fast.decisions() == 1);
}

TEST_CASE("back-off: a decision that keeps the previous choice doubles its continuation") {
  // bf16 (which cannot stand in for fp32) is twice as fast and learns alike: every decision keeps it.
  // The fake's branches take no wall time, so each continuation is --phase-steps (50) before the
  // back-off; a switch would start it over.
  struct Case {
    double maxOverhead;
    unsigned maxDoublings;
    std::vector<std::uint64_t> continuations;
    std::vector<unsigned> doublings;
  };
  // Phases at 0, 60 (50 after the first branch's end), 170 (100 after the second's): the third's 200
  // leaves less than another phase before step 400, so it runs to the end (220). With one doubling at
  // most: 0, 60, 170, 280 (the last to the end: 110). Without: every 60 steps, the last to the end (90).
  // Fixed phases (max overhead 1): every 60 steps, none stretched.
  const std::vector<Case> cases = {{0.5, 3, {50, 100, 220}, {0, 1, 2}},
                                   {0.5, 1, {50, 100, 100, 110}, {0, 1, 1, 1}},
                                   {0.5, 0, {50, 50, 50, 50, 50, 90}, {0, 0, 0, 0, 0, 0}},
                                   {1.0, 3, {50, 50, 50, 50, 50, 50, 50}, {0, 0, 0, 0, 0, 0, 0}}};
  for (const Case& c : cases) {
    INFO("max overhead " << c.maxOverhead << ", max doublings " << c.maxDoublings);
    ControllerConfig config = pruningConfig({"fp32", "bf16"});
    config.maxOverhead = c.maxOverhead;
    config.maxContinuationDoublings = c.maxDoublings;
    PrecisionController controller(config);
    FakeTrainer trainer;
    trainer.secondsOf = {{"fp32", 0.02}, {"bf16", 0.01}};
    runToEnd(controller, trainer);
    std::vector<std::uint64_t> continuations;
    std::vector<unsigned> doublings;
    for (const nlohmann::json& d : eventsOf(trainer, "decision")) {
      CHECK(d["choice"] == "bf16");
      continuations.push_back(d["continuation_steps"].get<std::uint64_t>());
      doublings.push_back(d["continuation_doublings"].get<unsigned>());
    }
    CHECK(continuations == c.continuations);
    CHECK(doublings == c.doublings);
    CHECK(trainer.stepsDone() == 400);
  }
}

namespace {

// fp32 and bf16 (twice as fast, learning alike) with continuations under a 0.5 overhead bound.
ControllerConfig backOffConfig() {
  ControllerConfig config = pruningConfig({"fp32", "bf16"});
  config.maxOverhead = 0.5;
  return config;
}

FakeTrainer bf16TwiceFaster() {
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"bf16", 0.01}};
  return trainer;
}

// Trains to step 70: the decisions at 0 and 60, both bf16.
void runTwoDecisions(PrecisionController& controller, FakeTrainer& trainer) {
  while (trainer.stepsDone() < 70) {
    controller.beforeStep(trainer);
    trainer.train(1);
  }
  REQUIRE(controller.decisions() == 2);
}

}  // namespace

TEST_CASE("back-off: the count travels in the controller's state and starts over at a clear switch") {
  const ControllerConfig config = backOffConfig();
  PrecisionController a(config);
  FakeTrainer trainer = bf16TwiceFaster();
  runTwoDecisions(a, trainer);
  const nlohmann::json state = nlohmann::json::parse(a.saveState());
  CHECK(state["last_choice"] == 1);
  CHECK(state["repeats"] == 1);
  PrecisionController b(config);
  FakeTrainer resumed = trainer;
  b.loadState(a.saveState(), resumed);
  CHECK(b.saveState() == a.saveState());
  // After the first decision only, fp32 becomes a hundred times as fast as bf16 while the curve still
  // rises steeply: the next decision switches to it, clearly, and starts the back-off over. (Ten times
  // is not clear at equal seconds: fp32's 60 planned steps take 0.06 s, less than bf16's branch, and
  // fp32's rate over them, 50 steps past its branch, is uncertain: P = 0.875 against bf16's.)
  PrecisionController c(config);
  FakeTrainer early;
  early.secondsOf = trainer.secondsOf;
  while (early.stepsDone() < 20) {
    c.beforeStep(early);
    early.train(1);
  }
  REQUIRE(c.decisions() == 1);
  early.secondsOf = {{"fp32", 0.001}, {"bf16", 0.1}};
  early.records.clear();
  while (early.stepsDone() < 400 && c.decisions() < 2) {
    c.beforeStep(early);
    early.train(1);
  }
  const std::vector<nlohmann::json> decisions = eventsOf(early, "decision");
  REQUIRE(decisions.size() == 1);
  INFO(decisions[0].dump());
  CHECK(decisions[0]["choice"] == "fp32");
  CHECK(decisions[0]["confirmed"] == false);
  CHECK(decisions[0]["continuation_doublings"] == 0);
  CHECK(nlohmann::json::parse(c.saveState())["repeats"] == 0);
}

TEST_CASE("a controller state that does not fit this run is refused, not read as something else") {
  const ControllerConfig config = backOffConfig();
  PrecisionController a(config);
  FakeTrainer trainer = bf16TwiceFaster();
  runTwoDecisions(a, trainer);
  const nlohmann::json good = nlohmann::json::parse(a.saveState());
  REQUIRE(good["candidates"] == nlohmann::json({"fp32", "bf16"}));
  const auto loads = [&](const nlohmann::json& state, const ControllerConfig& with) {
    PrecisionController b(with);
    FakeTrainer resumed = trainer;
    b.loadState(state.dump(), resumed);
    return nlohmann::json::parse(b.saveState());
  };
  const auto refusedMessage = [&](const nlohmann::json& state, const ControllerConfig& with) {
    try {
      loads(state, with);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kMismatch);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(loads(good, config) == good);
  // Resumed with the candidates reordered, index 1 would be fp32: training would go on in another
  // format without a word.
  ControllerConfig reordered = config;
  reordered.candidates = {"bf16", "fp32"};
  CHECK_THAT(refusedMessage(good, reordered), Catch::Contains("same --candidates"));
  ControllerConfig dropped = config;
  dropped.candidates = {"fp32"};
  CHECK_THAT(refusedMessage(good, dropped), Catch::Contains("same --candidates"));
  // A state written before the list was kept is read as before.
  nlohmann::json old = good;
  old.erase("candidates");
  CHECK(loads(old, config)["current"] == 1);
  // Counts: whole numbers in range, nothing truncated, wrapped or thrown as a JSON library's error.
  for (const char* key : {"repeats", "last_choice", "current", "next_phase", "decisions", "skipped_phases"}) {
    for (const nlohmann::json& bad : {nlohmann::json(-1), nlohmann::json(2.7), nlohmann::json("bf16"),
                                      nlohmann::json(nullptr), nlohmann::json(1e12)}) {
      nlohmann::json state = good;
      state[key] = bad;
      INFO(key << " = " << bad.dump());
      CHECK_THAT(refusedMessage(state, config), Catch::Contains(key));
    }
  }
  nlohmann::json beyond = good;
  beyond["last_choice"] = 2;
  CHECK_THAT(refusedMessage(beyond, config), Catch::Contains("last_choice"));
  for (const char* key : {"overhead_s", "step_samples_s"}) {
    nlohmann::json state = good;
    state[key] = key == std::string("overhead_s") ? nlohmann::json(-1.0) : nlohmann::json({{0.01}, {-0.5}});
    CHECK_THAT(refusedMessage(state, config), Catch::Contains(key));
  }
  CHECK_THAT(refusedMessage(nlohmann::json::array(), config), Catch::Contains("not a JSON object"));
  // A count beyond --max-doublings (a run resumed with a lower one) goes on from the largest: no
  // overflow into "no confirmation yet".
  nlohmann::json many = good;
  many["repeats"] = 4294967295u;
  CHECK(loads(many, config)["repeats"] == config.maxContinuationDoublings);
}

TEST_CASE("back-off: a switch to a candidate that is not clearly better confirms the choice") {
  // bf16 and bf16+ef (which cannot stand in for fp32) learn alike and take turns being 1 % faster:
  // the rule switches between them at every decision, on a difference that is noise, and such a
  // switch must not start the back-off over.
  ControllerConfig config = pruningConfig({"fp32", "bf16", "bf16+ef"});
  config.maxOverhead = 0.5;
  config.prune = false;
  PrecisionController controller(config);
  FakeTrainer trainer;
  std::size_t seen = 0;
  while (trainer.stepsDone() < trainer.totalSteps()) {
    const bool odd = seen % 2 == 1;
    trainer.secondsOf = {{"fp32", 0.02}, {"bf16", odd ? 0.0101 : 0.01}, {"bf16+ef", odd ? 0.01 : 0.0101}};
    if (controller.beforeStep(trainer)) ++seen;
    if (trainer.stepsDone() < trainer.totalSteps()) trainer.train(1);
  }
  const std::vector<nlohmann::json> decisions = eventsOf(trainer, "decision");
  REQUIRE(decisions.size() >= 2);
  for (std::size_t i = 1; i < decisions.size(); ++i) {
    INFO("decision " << i << ": " << decisions[i - 1]["choice"] << " then " << decisions[i]["choice"]);
    CHECK(decisions[i]["choice"] != decisions[i - 1]["choice"]);  // a switch every time
    CHECK(decisions[i]["confirmed"] == true);
    CHECK(decisions[i]["continuation_doublings"].get<unsigned>() == std::min<unsigned>(static_cast<unsigned>(i), 3));
  }
  // probabilityRateExceeds: equal rates are a coin; a rate 10 sd above is sure.
  CandidateVerdict a, b;
  a.gain = b.gain = 0.2;
  a.seconds = b.seconds = 10;
  a.predictedSd = b.predictedSd = 0.05;
  CHECK(probabilityRateExceeds(a, b) == Approx(0.5));
  a.gain = 0.2 + 10 * 0.05 * std::sqrt(2.0);
  CHECK(probabilityRateExceeds(a, b) > 0.999);
  CHECK(probabilityRateExceeds(b, a) < 0.001);
}

TEST_CASE("with a bound on the overhead, no phase begins that the end of training would cut short") {
  // The loop above with --max-overhead 0.25 (the fake's branches take no wall time: continuations stay
  // at 50 steps). A phase at 300 would leave 100 steps, fewer than another 60-step phase after it: the
  // phase at 240 (160 left) is the last to begin with a plain continuation, the one at 300 runs to
  // the end of training, and none begins at 360 (its 40 steps could hold no 50-step continuation).
  // Without the back-off, whose doublings would move the phases (its own test above).
  ControllerConfig config = unprunedLoopConfig(0.25);
  config.maxContinuationDoublings = 0;
  PrecisionController controller(config);
  FakeTrainer trainer;
  runToEnd(controller, trainer);
  REQUIRE(controller.decisions() == 6);
  const std::vector<nlohmann::json> decisions = eventsOf(trainer, "decision");
  REQUIRE(decisions.size() == 6);
  CHECK(decisions[4]["step"] == 240);
  CHECK(decisions[4]["continuation_steps"] == 50);
  CHECK(decisions[5]["step"] == 300);
  CHECK(decisions[5]["continuation_steps"] == 90);
  CHECK(decisions[5]["horizon_steps"] == 60);  // predicted, as every candidate, over its planned 50 steps
  CHECK(trainer.stepsDone() == 400);
}

