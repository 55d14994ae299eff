// What the precision controller needs from a trainer, and nothing more: the narrow interface any
// data-parallel trainer implements to get adaptive precision (adaprec-train's is
// lib/trainer/controller_adapter.cpp). The controller never sees the model, the optimizer, MPI or the
// log file; it keeps and brings back states, trains steps in a format, evaluates, and asks the ranks
// to agree. Every call is collective: every rank makes the same calls in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "adaprec/format.hpp"

namespace adaprec::controller {

// One validation evaluation: the same numbers on every rank.
struct ValidationResult {
  double accuracy = 0;      // fraction correct, in [0, 1]
  std::uint64_t images = 0;  // how many images it is over (binomial noise in the fit)
};

// A trainer's whole training state kept in memory: weights, optimizer state, RNG and the
// error-feedback residuals (what a branch changes). Opaque to the controller.
class TrainingState {
 public:
  virtual ~TrainingState() = default;
};

class SpeculativeTrainer {
 public:
  virtual ~SpeculativeTrainer() = default;

  // Optimizer steps done so far, and the step training ends at.
  virtual std::uint64_t stepsDone() const = 0;
  virtual std::uint64_t totalSteps() const = 0;

  // Keep / bring back the training state, step counter included. After restore the trainer continues
  // exactly as from the snapshot (nothing of a later branch leaks); clocks and byte counters keep
  // counting, since an abandoned branch really spent its time.
  virtual std::unique_ptr<TrainingState> snapshot() = 0;
  virtual void restore(const TrainingState& state) = 0;

  // From the next step on, every gradient goes in `format` (its name: `candidate`). resetFeedback
  // drops the error-feedback residuals (a new branch); a resumed run keeps the restored ones.
  virtual void setFormat(const FormatSpec& format, const std::string& candidate, bool resetFeedback) = 0;

  // Trains `steps` optimizer steps in the current format; returns each step's seconds on this rank.
  virtual std::vector<double> train(std::uint64_t steps) = 0;

  // Accuracy on the first maxImages images of a fixed held-out validation set.
  virtual ValidationResult evaluate(std::size_t maxImages) = 0;

  // The learning rate the trainer's schedule gives at absolute step `step`: carried to the predictor.
  virtual double learningRate(std::uint64_t step) const = 0;

  // Agreement across ranks, so that every rank decides on the same numbers and follows rank 0: the
  // maximum of a value over ranks, and rank 0's values copied to every rank.
  virtual double maxOverRanks(double value) = 0;
  // The same element by element, in place (one collective where the trainer can: step-time samples).
  virtual void maxOverRanks(std::span<double> values) {
    for (double& v : values) v = maxOverRanks(v);
  }
  virtual void agree(std::span<std::uint64_t> values) = 0;

  // After a decision: throw on every rank if the ranks' states differ (a trainer may do nothing).
  virtual void checkConsistency() {}

  // Reporting: one JSON object per decision (and the summary at the end) for the trainer's log, and a
  // human line for its progress output.
  virtual void record(const std::string& json, const std::string& humanLine) = 0;
  virtual double epochAt(std::uint64_t step) const = 0;
  virtual double wallSeconds() const = 0;
};

}  // namespace adaprec::controller
