// The controller's phase loop over the SpeculativeTrainer interface alone, with a fake trainer whose
// accuracy follows a known curve per format: any trainer that implements the interface gets the same
// phases, restores and decisions, without MPI or lib/trainer.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "controller/precision_controller.hpp"

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
    const double seconds = (secondsOf.count(format) ? secondsOf.at(format) : 0.01) * (calls++ < slowCalls ? slowFactor : 1);
    return std::vector<double>(steps, seconds);
  }
  ValidationResult evaluate(std::size_t) override { return {0.1 + 0.8 * (1 - std::exp(-progress / 60)), 1000}; }
  double learningRate(std::uint64_t) const override { return 0.1; }
  double maxOverRanks(double v) override { return v; }
  void agree(std::span<std::uint64_t>) override {}
  void record(const std::string& json, const std::string&) override { records.push_back(json); }
  double epochAt(std::uint64_t s) const override { return static_cast<double>(s) / 100; }
  double wallSeconds() const override { return 1; }
};

}  // namespace

TEST_CASE("the phase loop drives any SpeculativeTrainer") {
  ControllerConfig config;
  config.candidates = {"fp32", "fp16", "table2"};
  config.speculativeSteps = 10;
  config.evalPoints = 2;
  config.continuationSteps = 50;
  config.maxOverhead = 1;
  config.prune = false;  // every candidate speculated at every phase (pruning: the cases below)
  PrecisionController controller(config);
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
  const std::vector<std::string> rounds = {"fp32", "fp16", "table2", "fp32", "fp16", "table2", "fp32", "fp16", "table2"};
  CHECK(trainer.trained == rounds);
  // fp32 goes on from its own probe's end: its 3 steps are training.
  CHECK(trainer.stepsDone() == 3);
  CHECK(trainer.progress == Approx(3));
}

TEST_CASE("pruning: a candidate 10 % faster than fp32 is still speculated") {
  PrecisionController controller(pruningConfig({"fp32", "fp16"}));
  FakeTrainer trainer;
  trainer.secondsOf = {{"fp32", 0.02}, {"fp16", 0.0179}};
  controller.beforeStep(trainer);
  CHECK(controller.decisions() == 1);
  CHECK(controller.skippedPhases() == 0);
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
