// adaprec-train's side of the precision controller: the Trainer as a controller::SpeculativeTrainer,
// and the StepHook that runs the controller before each step and keeps its state in checkpoints.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "controller/precision_controller.hpp"
#include "trainer/trainer.hpp"

namespace adaprec::trainer {

// The timeline instant (name, args) of a controller record (ADAPREC_TIMELINE, docs/timeline.md): a
// "decision" with each candidate's prediction, or for a pruned candidate why it was not speculated; a
// "speculation skipped" phase with its choice and every other candidate's reason; nothing for other
// records. A pruned candidate has no prediction: reading one ended every run that pruned a candidate
// with the timeline on (every rank: "key 'predicted_mean' not found", MPI_Abort).
std::optional<std::pair<std::string, nlohmann::json>> timelineInstantOf(const nlohmann::json& record);

class ControllerHook final : public StepHook {
 public:
  explicit ControllerHook(controller::ControllerConfig config) : controller_(std::move(config)) {}
  void beforeStep(Trainer& trainer) override;
  void finish(Trainer& trainer) override;
  double overheadSeconds() const { return controller_.overheadSeconds(); }
  std::size_t decisions() const { return controller_.decisions(); }

 private:
  controller::PrecisionController controller_;
  bool loaded_ = false;
};

}  // namespace adaprec::trainer
