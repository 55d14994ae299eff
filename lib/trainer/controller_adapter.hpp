// adaprec-train's side of the precision controller: the Trainer as a controller::SpeculativeTrainer,
// and the StepHook that runs the controller before each step and keeps its state in checkpoints.
#pragma once

#include "controller/precision_controller.hpp"
#include "trainer/trainer.hpp"

namespace adaprec::trainer {

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
