#include "trainer/controller_adapter.hpp"

#include "adaprec/communicator.hpp"
#include "communicator/timeline.hpp"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include "trainer_collectives.hpp"

namespace adaprec::trainer {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct SnapshotState final : controller::TrainingState {
  TrainerSnapshot snapshot;
};

// The Trainer seen through the controller's narrow interface. Agreement is MPI on the trainer's
// communicator (the controller itself knows no MPI).
class TrainerSession final : public controller::SpeculativeTrainer {
 public:
  explicit TrainerSession(Trainer& trainer) : trainer_(trainer) {}

  std::uint64_t stepsDone() const override { return trainer_.stepsDone(); }
  std::uint64_t totalSteps() const override { return trainer_.totalSteps(); }

  std::unique_ptr<controller::TrainingState> snapshot() override {
    auto state = std::make_unique<SnapshotState>();
    state->snapshot = trainer_.snapshot();
    return state;
  }
  void restore(const controller::TrainingState& state) override {
    trainer_.restore(dynamic_cast<const SnapshotState&>(state).snapshot, RestoreMode::kBranch);
  }

  void setFormat(const FormatSpec& format, const std::string& candidate, bool resetFeedback) override {
    if (resetFeedback) trainer_.reducer().resetErrorFeedback();
    trainer_.reducer().setFormats(std::vector<FormatSpec>(trainer_.model().layerRanges().size(), format));
    trainer_.setFormatLabel("adaptive:" + candidate);
  }

  std::vector<double> train(std::uint64_t steps) override {
    std::vector<double> seconds;
    for (std::uint64_t i = 0; i < steps; ++i) {
      const double t0 = now();
      trainer_.step();
      seconds.push_back(now() - t0);
    }
    return seconds;
  }

  controller::ValidationResult evaluate(std::size_t maxImages) override {
    const Evaluation e = trainer_.evaluateValidation(maxImages);
    return {e.accuracy, e.images};
  }

  double learningRate(std::uint64_t step) const override {
    return trainer_.learningRateAt(step);
  }

  double maxOverRanks(double value) override {
    timedAllreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, trainer_.comm(), "the controller's agreement");
    return value;
  }
  void maxOverRanks(std::span<double> values) override {
    timedAllreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_MAX, trainer_.comm(),
                   "the controller's agreement");
  }
  void agree(std::span<std::uint64_t> values) override {
    static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t));
    timedBroadcast(values.data(), static_cast<int>(values.size()), MPI_UNSIGNED_LONG_LONG, 0, trainer_.comm(),
                   "the controller's agreement");
  }
  void checkConsistency() override { trainer_.checkConsistency(); }

  void record(const std::string& json, const std::string& humanLine) override {
    trainer_.logLine(json);
    recordOnTimeline(json);
    if (trainer_.rank() == 0 && trainer_.config().progress) std::fputs(humanLine.c_str(), stderr);
  }
  double epochAt(std::uint64_t step) const override {
    return static_cast<double>(step) / trainer_.stepsPerEpoch();
  }
  double wallSeconds() const override { return trainer_.wallSeconds(); }

 private:
  // A decision on this rank's allreduce timeline (ADAPREC_TIMELINE, docs/timeline.md), where it lands
  // between the allreduce calls of the branches and of the continuation.
  void recordOnTimeline(const std::string& json) const {
    const std::string path = CommunicatorOptions::fromEnvironment().timelinePath;
    if (path.empty()) return;
    const auto instant = timelineInstantOf(nlohmann::json::parse(json));
    if (instant) detail::Timeline::open(path, trainer_.rank())->instant(instant->first, instant->second.dump());
  }

  Trainer& trainer_;
};

}  // namespace

std::optional<std::pair<std::string, nlohmann::json>> timelineInstantOf(const nlohmann::json& record) {
  const std::string event = record.value("event", "");
  if (event != "decision" && event != "speculation_skipped") return std::nullopt;
  nlohmann::json args{{"step", record.at("step")}, {"choice", record.at("choice")}};
  if (event == "decision") args["phase"] = record.at("phase");
  args["candidates"] = nlohmann::json::array();
  for (const nlohmann::json& c : record.at("candidates")) {
    nlohmann::json a{{"name", c.at("name")}, {"chosen", c.at("name") == record.at("choice")}};
    if (c.contains("pruned")) {
      a["pruned"] = c.at("pruned");
    } else if (event == "decision") {
      a["predicted_mean"] = c.at("predicted_mean");
      a["predicted_sd"] = c.at("predicted_sd");
    }
    args["candidates"].push_back(a);
  }
  return std::make_pair(event == "decision" ? std::string("decision") : std::string("speculation skipped"), args);
}

namespace {

std::string stateText(Trainer& trainer) {
  const auto& blob = trainer.controllerState();
  return std::string(blob.begin(), blob.end());
}

void saveState(Trainer& trainer, const std::string& text) { trainer.controllerState().assign(text.begin(), text.end()); }

}  // namespace

void ControllerHook::beforeStep(Trainer& trainer) {
  TrainerSession session(trainer);
  if (!loaded_) {
    loaded_ = true;
    controller_.loadState(stateText(trainer), session);
  }
  // A phase's probes and branches are not --reduction auto's to measure (ReductionTuner::pause).
  struct TuningPaused {
    Trainer& trainer;
    explicit TuningPaused(Trainer& t) : trainer(t) { trainer.pauseReductionTuning(true); }
    ~TuningPaused() { trainer.pauseReductionTuning(false); }
  };
  bool ran = false;
  {
    const TuningPaused paused(trainer);
    ran = controller_.beforeStep(session);
  }
  if (ran) saveState(trainer, controller_.saveState());
}

void ControllerHook::finish(Trainer& trainer) {
  TrainerSession session(trainer);
  saveState(trainer, controller_.saveState());
  controller_.finish(session);
}

}  // namespace adaprec::trainer
