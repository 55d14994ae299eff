// The data-parallel training loop (ChainerMN's shape): every rank holds the model, draws its own
// mini-batch from its shard of each epoch's data order, computes gradients, the GradientReducer
// averages them across ranks, and every rank applies the same SGD step, so weights stay bit-identical
// (checked periodically with a hash). Evaluation is split across ranks and summed.
//
// Data order: epoch e uses a permutation of the training set drawn from (seed, e); global step s of
// that epoch covers positions [s*R*b, (s+1)*R*b) and rank r takes the r-th b of them. Each rank's
// shard is therefore an equal R-th of every epoch, and R ranks x batch b visit exactly the samples
// 1 rank x batch R*b visits, in the same steps (the equivalence the tests check).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "adaprec/error.hpp"
#include "backend.hpp"
#include "checkpoint.hpp"
#include "communicator/signature_hash.hpp"
#include "dataset.hpp"
#include "gradient_reducer.hpp"
#include "model.hpp"
#include "optimizer.hpp"
#include "reduction_pipeline.hpp"
#include "reduction_tuner.hpp"
#include "schedule.hpp"

namespace adaprec::trainer {

struct TrainerConfig {
  std::string model = "cnn";
  std::string backend = "eigen";
  int epochs = 1;
  int batch = 32;                  // per rank
  ScheduleConfig schedule;         // globalBatch and totalEpochs are filled in by the trainer
  float momentum = 0.9f;
  float weightDecay = 5e-4f;
  std::uint64_t seed = 1;
  std::uint64_t evalEvery = 0;     // steps between evaluations; 0: at the end of every epoch
  std::size_t evalSamples = 0;     // test images per evaluation; 0: all
  std::uint64_t hashEvery = 200;   // steps between cross-rank weight hash checks; 0: only at evaluations
  std::string checkpointDir;       // empty: no checkpoints
  std::uint64_t checkpointEvery = 0;  // steps; 0: at the end of every epoch
  bool resume = false;             // continue from checkpointDir's latest checkpoint if there is one
  std::string logPath;             // JSON lines, one per evaluation; empty: none
  bool progress = true;            // rank 0 progress line on stderr
  std::uint64_t maxSteps = 0;      // stop after this many steps in total (0: run all epochs)
  std::string formatLabel = "fp32";  // what the progress line shows as the format
  // When the gradient reduction runs (reduction_pipeline.hpp): after the backward pass (sequential),
  // bucket by bucket during it (overlap, bit-identical), the faster of those two as measured on the
  // first steps (auto), or during the next step (double buffering). All but sequential need
  // MPI_THREAD_SERIALIZED; auto falls back to sequential without it.
  ReductionMode reduction = ReductionMode::kAuto;
};

// Thrown by Trainer::step on a rank whose training loss became NaN or infinite. It is an outcome of the
// run's settings (learning rate, warmup, a too lossy format), not a fault in AdaPrec; adaprec-train
// reports it in one line and exits with kDivergedExitCode.
class TrainingDiverged : public Error {
 public:
  explicit TrainingDiverged(const std::string& message) : Error(ErrorCode::kInvalidArgument, message) {}
};
inline constexpr int kDivergedExitCode = 3;

// An error every rank of the trainer's communicator throws at the same point (a verdict agreed with
// MPI_Allreduce: an unreadable or foreign checkpoint, an unwritable log). Each rank holds its own
// message, and a caller may end MPI normally on every rank instead of aborting the job, so that every
// rank's message is printed before the job ends.
class AgreedError : public Error {
 public:
  AgreedError(ErrorCode code, const std::string& message) : Error(code, message) {}
};

class Trainer;

// Called by Trainer::train before every regular step. A precision controller uses it to run its
// speculative branches (trainer steps + restores) and to switch formats between phases.
class StepHook {
 public:
  virtual ~StepHook() = default;
  virtual void beforeStep(Trainer& trainer) = 0;
  // Called once at the end of train(), before the final evaluation is returned.
  virtual void finish(Trainer& /*trainer*/) {}
};

// kResume restores everything, counters and clock included (a new process continuing a run);
// kBranch restores the training state only: wall time, bytes sent and communication time keep
// counting, because the abandoned branch really spent them.
enum class RestoreMode { kResume, kBranch };

struct Evaluation {
  double loss = 0;       // mean over the evaluated images
  double accuracy = 0;   // fraction correct
  std::uint64_t images = 0;
};

// FNV-1a's offset basis: the log hash of an empty log.
inline constexpr std::uint64_t kLogHashStart = detail::kFnv1aStart;

class Trainer {
 public:
  Trainer(TrainerConfig config, MPI_Comm comm, Dataset train, Dataset test,
          std::unique_ptr<GradientReducer> reducer);
  ~Trainer();

  // Runs to the end (epochs or maxSteps) with evaluations, hash checks, checkpoints and the log;
  // resumes first when asked. Returns the final evaluation on the whole test set.
  Evaluation train(StepHook* hook = nullptr);

  // Building blocks (all collective), also used by the precision controller.
  void step();                                    // one optimizer step on the next mini-batch
  Evaluation evaluate(std::size_t maxSamples);    // on the first maxSamples test images (0: all)
  // On the validation set given to setValidationSet (held out from training), first maxSamples.
  Evaluation evaluateValidation(std::size_t maxSamples);
  void setValidationSet(Dataset validation);
  void checkConsistency();                        // throws Error(kMismatch) on every rank if weights differ
  TrainerSnapshot snapshot() const;
  void restore(const TrainerSnapshot& snapshot, RestoreMode mode = RestoreMode::kResume);  // fingerprint must match
  // Rank 0 appends one JSON object (a line) to the log, if there is one.
  void logLine(const std::string& json);
  // Writes one JSON line (rank 0) with the evaluation, formats and byte counts, plus `extra` fields.
  void logEvaluation(const Evaluation& eval, const std::string& extraJson = "{}");

  std::uint64_t stepsDone() const { return step_; }
  std::uint64_t stepsPerEpoch() const { return stepsPerEpoch_; }
  std::uint64_t totalSteps() const;
  double epoch() const { return static_cast<double>(step_) / stepsPerEpoch_; }
  // The rate update `step` is (or was) taken at: --lr-schedule or the epoch-based schedule. A function
  // of the step alone, so a resumed run follows the same rates.
  double learningRateAt(std::uint64_t step) const { return learningRateAtStep(config_.schedule, step, stepsPerEpoch_); }
  double learningRate() const { return learningRateAt(step_); }  // the next update's
  double wallSeconds() const;
  int rank() const { return rank_; }
  int ranks() const { return size_; }
  // These two first wait for a reduction in flight (overlap, double buffering): the caller may use MPI
  // or the reducer next, which only the communication thread may do while one is in flight.
  MPI_Comm comm() const;
  GradientReducer& reducer();
  Model& model() { return *model_; }
  const TrainerConfig& config() const { return config_; }
  // Hash of this rank's parameters and momentum (FNV-1a 64 of the bytes).
  std::uint64_t stateHash() const;
  // Opaque controller state that travels in checkpoints.
  std::vector<std::uint8_t>& controllerState() { return controllerState_; }
  void setFormatLabel(std::string label) { config_.formatLabel = std::move(label); }
  // --reduction auto: steps taken while paused are not measured (the controller's phases: ReductionTuner::pause).
  void pauseReductionTuning(bool paused);
  std::uint64_t wireBytes() const { return wireBytes_; }
  // Seconds the reductions took and the part of them the training thread waited for (rank 0's in logs).
  double commSeconds() const { return commSeconds_; }
  double exposedCommSeconds() const { return exposedCommSeconds_; }
  std::uint64_t fp32Bytes() const { return fp32Bytes_; }

 private:
  void prepareEpochOrder(std::uint64_t epoch);
  Evaluation evaluateOn(const Dataset& data, std::size_t maxSamples);
  void printProgress(bool force);
  std::string fingerprint() const;
  void resumeFromCheckpoint();
  void saveCheckpoint();
  // nothingLeft: the checkpoint is at the end of training, so no record after it is redone.
  void trimLogForResume(bool nothingLeft);
  void writeLogLine(const std::string& line);  // rank 0; a failure is kept in logError_
  std::string logWriteError(const char* what) const;  // the message for a failed open/write, with errno's text
  void checkLog();                             // collective: throws Error(kIo) on every rank if a write failed
  void closeLog();                             // collective: closes (flushes) the log and checks it
  // Waits for a reduction in flight and counts it (const: callers that only read the state wait too).
  void quiesce() const;
  void checkFinite(const StepResult& r) const;  // throws TrainingDiverged for a NaN/Inf loss
  // --reduction auto: the mode of the next step, and the agreed decision once the pairs are measured.
  void tuneReduction();

  TrainerConfig config_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  Dataset train_, test_, validation_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<ReductionPipeline> pipeline_;
  std::unique_ptr<ReductionTuner> tuner_;  // --reduction auto with thread support
  std::unique_ptr<MomentumSgd> sgd_;
  std::unique_ptr<CheckpointDirectory> checkpoints_;
  std::mt19937_64 rng_;
  std::uint64_t stepsPerEpoch_ = 0;
  std::uint64_t step_ = 0;
  std::uint64_t runId_ = 0;  // identity of this run in its checkpoints (same on every rank)
  std::uint64_t orderEpoch_ = UINT64_MAX;
  std::vector<std::uint32_t> order_;
  std::vector<float> images_;
  std::vector<std::int32_t> labels_;
  std::vector<std::uint8_t> controllerState_;
  // Counters that travel in checkpoints.
  double wallBefore_ = 0;        // wall seconds of earlier runs (resume)
  // mutable: a drain (quiesce) in a const method counts the reduction it waited for.
  mutable std::uint64_t wireBytes_ = 0, fp32Bytes_ = 0;
  mutable double commSeconds_ = 0;
  mutable double exposedCommSeconds_ = 0;
  double stepSeconds_ = 0;  // wall time inside step(): its compute and the communication it waited for
  // Training loss since the last evaluation (this rank).
  double lossSum_ = 0;
  std::uint64_t lossSteps_ = 0;
  double startTime_ = 0;
  double progressTime_ = 0;
  std::uint64_t progressStep_ = 0;
  double lastThroughput_ = 0;
  std::ofstream log_;
  std::string logError_;  // rank 0: the first failed log write, reported by checkLog()
  // Bytes this run's log holds (rank 0): saved in checkpoints so that a resume cuts the log back to the
  // checkpoint, dropping records of steps that the resumed run will redo.
  std::uint64_t logBytes_ = 0;
  std::uint64_t logHash_ = kLogHashStart;  // FNV-1a of the logBytes_ bytes, recorded with them
  std::optional<std::uint64_t> resumeLogBytes_, resumeLogHash_;
  // The log's absolute path ("" without --log), recorded with them: a resume cuts only the log the
  // checkpointed run wrote (an empty prefix matches any file's hash).
  std::string logIdentity_;
  std::optional<std::string> resumeLogIdentity_;
};

}  // namespace adaprec::trainer
