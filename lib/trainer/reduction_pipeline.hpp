// When the gradient reduction runs relative to the computation (docs/trainer.md, "Overlap and double
// buffering"):
//   sequential       backward pass, then every bucket reduced, then the update (the reduction adds to
//                    the step time);
//   overlap          each bucket (GradientReducer::buckets) is handed to the communication thread as
//                    soon as the backward pass has finished its layers, and reduced while backward goes
//                    on with the earlier layers; the update waits only for the rest. The calls are
//                    exactly the sequential ones (in backward order; calls on different buckets are
//                    independent), so the results are bit-identical to the sequential step;
//   double buffering step t's gradients are reduced on the communication thread while step t+1
//                    computes, and step t+1's update applies them (ChainerMN's double-buffering
//                    optimizer: one step stale; step 0 updates nothing);
//   auto             sequential or overlap, step by step as ReductionTuner (reduction_tuner.hpp) says
//                    while it measures both, then the faster one: results as sequential's.
// Every reduction runs on one CommThread; the trainer drains it before any other use of MPI or of the
// reducer, so MPI_THREAD_SERIALIZED suffices.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm_thread.hpp"
#include "gradient_reducer.hpp"

namespace adaprec::trainer {

enum class ReductionMode { kSequential, kOverlap, kDoubleBuffering, kAuto };
ReductionMode parseReductionMode(const std::string& name);  // sequential, overlap, double-buffering, auto
std::string toString(ReductionMode mode);

class ReductionPipeline {
 public:
  // `mode` kAuto: the pipeline starts sequential and the owner switches with setStepMode().
  ReductionPipeline(GradientReducer& reducer, ReductionMode mode);
  // The mode the next step runs in (never kAuto).
  ReductionMode mode() const { return mode_; }
  // A pipeline made with kAuto: the next steps run sequential or overlap (waits for any reduction in
  // flight first). Both leave nothing in flight between steps, so switching is free.
  void setStepMode(ReductionMode mode);

  // sequential and overlap: one step's reduction of `grads` (the model's buffer) around its backward
  // pass. begin() before the backward pass; gradientsFinalFrom(offset) whenever the gradients at flat
  // offsets >= offset are final (overlap posts every bucket that lies there; sequential does nothing);
  // finish() reduces or waits for the rest and returns the step's stats.
  void begin(std::span<float> grads, const std::vector<LayerRange>& layers);
  void gradientsFinalFrom(std::int64_t offset);
  ReduceStats finish();

  // double buffering: hands this step's gradients (copied) to the communication thread and returns the
  // previous step's, reduced; empty when there is none (the first step, or after setPending({})). The
  // span stays valid until the next call. The stats come from takeStats().
  std::span<const float> exchange(std::span<const float> grads, const std::vector<LayerRange>& layers);

  // Waits for the reduction in flight, if any: before the trainer's own collectives and before any
  // other use of the reducer (formats, error feedback, its state).
  void drain();
  // double buffering: the stats of the reductions that completed since the last call (each counted
  // once, when it is first waited for: at exchange() or drain()), exposedSeconds the waits.
  ReduceStats takeStats();

  // double buffering: the reduced gradients the next step will apply (empty: none), after drain(); and
  // putting them back (a checkpoint's or a branch's; their reduction was counted before the snapshot).
  std::vector<float> pending();
  void setPending(std::vector<float> reduced);

 private:
  void post(Bucket bucket);
  void waitInFlight();  // double buffering: waits and counts the reduction in flight once

  GradientReducer& reducer_;
  bool automatic_ = false;  // made with kAuto
  ReductionMode mode_;
  // One step of sequential/overlap.
  std::span<float> grads_;
  std::vector<LayerRange> layers_;
  std::vector<Bucket> buckets_;
  std::size_t unposted_ = 0;  // buckets_[0, unposted_) are not posted yet (posted from the end)
  ReduceStats stepStats_;     // written by the communication thread until finish() has waited
  // Double buffering: inFlight_ is being reduced (or has been: inFlightValid_), reduced_ is applied.
  std::vector<float> inFlight_, reduced_;
  bool inFlightValid_ = false;
  bool inFlightCounted_ = true;
  ReduceStats inFlightStats_;  // written by the communication thread until waited for
  ReduceStats uncounted_;
  // Last: destroyed first, so its destructor waits for a running job before the buffers that job uses
  // are freed (TSan saw the vectors freed under a job). Not for sequential.
  std::unique_ptr<CommThread> thread_;
};

}  // namespace adaprec::trainer
