#include "reduction_pipeline.hpp"

#include <chrono>
#include <utility>

#include "adaprec/error.hpp"

namespace adaprec::trainer {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ReductionMode parseReductionMode(const std::string& name) {
  if (name == "sequential") return ReductionMode::kSequential;
  if (name == "overlap") return ReductionMode::kOverlap;
  if (name == "double-buffering") return ReductionMode::kDoubleBuffering;
  if (name == "auto") return ReductionMode::kAuto;
  ADAPREC_FAIL(ErrorCode::kInvalidArgument,
               "unknown reduction mode '" << name << "' (valid: auto, sequential, overlap, double-buffering)");
}

std::string toString(ReductionMode mode) {
  switch (mode) {
    case ReductionMode::kSequential: return "sequential";
    case ReductionMode::kOverlap: return "overlap";
    case ReductionMode::kDoubleBuffering: return "double-buffering";
    case ReductionMode::kAuto: return "auto";
  }
  return "?";
}

ReductionPipeline::ReductionPipeline(GradientReducer& reducer, ReductionMode mode)
    : reducer_(reducer), automatic_(mode == ReductionMode::kAuto),
      mode_(automatic_ ? ReductionMode::kSequential : mode) {
  if (mode != ReductionMode::kSequential) thread_ = std::make_unique<CommThread>();
}

void ReductionPipeline::setStepMode(ReductionMode mode) {
  ADAPREC_CHECK(automatic_ && (mode == ReductionMode::kSequential || mode == ReductionMode::kOverlap),
                ErrorCode::kInternal, "setStepMode(" << toString(mode) << ") on a pipeline not made with auto");
  drain();
  mode_ = mode;
}

void ReductionPipeline::begin(std::span<float> grads, const std::vector<LayerRange>& layers) {
  ADAPREC_CHECK(mode_ != ReductionMode::kDoubleBuffering, ErrorCode::kInternal, "begin() under double buffering");
  drain();
  grads_ = grads;
  layers_ = layers;
  buckets_ = reducer_.buckets(layers_);
  unposted_ = buckets_.size();
  stepStats_ = {};
}

void ReductionPipeline::post(Bucket bucket) {
  thread_->post([this, bucket] { stepStats_ += reducer_.reduceBucket(grads_, layers_, bucket); });
}

void ReductionPipeline::gradientsFinalFrom(std::int64_t offset) {
  if (mode_ != ReductionMode::kOverlap) return;
  while (unposted_ > 0 && layers_[buckets_[unposted_ - 1].first].offset >= offset) post(buckets_[--unposted_]);
}

ReduceStats ReductionPipeline::finish() {
  if (mode_ == ReductionMode::kSequential) return reducer_.reduce(grads_, layers_);
  const double start = now();
  while (unposted_ > 0) post(buckets_[--unposted_]);
  thread_->wait();
  stepStats_.exposedSeconds = now() - start;
  return stepStats_;
}

void ReductionPipeline::waitInFlight() {
  const double start = now();
  thread_->wait();
  uncounted_.exposedSeconds += now() - start;
  if (inFlightValid_ && !inFlightCounted_) {
    uncounted_.wireBytes += inFlightStats_.wireBytes;
    uncounted_.fp32Bytes += inFlightStats_.fp32Bytes;
    uncounted_.seconds += inFlightStats_.seconds;
    inFlightCounted_ = true;
  }
}

std::span<const float> ReductionPipeline::exchange(std::span<const float> grads, const std::vector<LayerRange>& layers) {
  ADAPREC_CHECK(mode_ == ReductionMode::kDoubleBuffering, ErrorCode::kInternal, "exchange() without double buffering");
  waitInFlight();
  std::span<const float> out;
  if (inFlightValid_) {
    reduced_.swap(inFlight_);
    out = reduced_;
  }
  inFlight_.assign(grads.begin(), grads.end());
  layers_ = layers;
  inFlightValid_ = true;
  inFlightCounted_ = false;
  inFlightStats_ = {};
  thread_->post([this] { inFlightStats_ = reducer_.reduce(inFlight_, layers_); });
  return out;
}

void ReductionPipeline::drain() {
  if (mode_ == ReductionMode::kDoubleBuffering) {
    waitInFlight();
  } else if (thread_) {
    thread_->wait();
  }
}

ReduceStats ReductionPipeline::takeStats() { return std::exchange(uncounted_, ReduceStats{}); }

std::vector<float> ReductionPipeline::pending() {
  drain();
  return inFlightValid_ ? inFlight_ : std::vector<float>{};
}

void ReductionPipeline::setPending(std::vector<float> reduced) {
  drain();
  inFlightValid_ = !reduced.empty();
  inFlight_ = std::move(reduced);
  inFlightCounted_ = true;
}

}  // namespace adaprec::trainer
