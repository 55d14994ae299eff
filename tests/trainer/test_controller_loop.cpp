// The controller's phase loop over the SpeculativeTrainer interface alone, with a fake trainer whose
// accuracy follows a known curve per format: any trainer that implements the interface gets the same
// phases, restores and decisions, without MPI or lib/trainer.
#include <catch2/catch.hpp>
#include <cmath>
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
    // fp16 learns as fast as fp32 per step; table2 barely learns.
    const double rate = format == "table2" ? 0.05 : 1.0;
    step += steps;
    progress += rate * static_cast<double>(steps);
    return std::vector<double>(steps, format == "fp32" ? 0.02 : 0.01);
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
