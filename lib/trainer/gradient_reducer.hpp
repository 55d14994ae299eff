// How the trainer sums gradients across ranks. Every implementation leaves the rank-average of the
// gradients in place, bit-identical on every rank. Layers are contiguous ranges of the flat gradient
// buffer (Model::layerRanges), so per-layer formats and fused buckets need no copies.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"
#include "model.hpp"

namespace adaprec::trainer {

struct ReduceStats {
  std::uint64_t wireBytes = 0;  // bytes this rank sent
  std::uint64_t fp32Bytes = 0;  // bytes an fp32 reduction with the same algorithm would have sent
  double seconds = 0;           // wall time of the reduction (its calls, on whichever thread ran them)
  // How long the training thread waited for it: `seconds` when it reduces after the backward pass,
  // less when the reduction overlaps computation (ReductionPipeline).
  double exposedSeconds = 0;
  ReduceStats& operator+=(const ReduceStats& o) {
    wireBytes += o.wireBytes;
    fp32Bytes += o.fp32Bytes;
    seconds += o.seconds;
    exposedSeconds += o.exposedSeconds;
    return *this;
  }
};

// The layers [first, last) that one allreduce call sums.
struct Bucket {
  std::size_t first = 0, last = 0;
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  virtual std::string name() const = 0;
  // The calls reduce() makes, in its order: consecutive runs of layers covering every layer, a function
  // of the layers and the formats set. A pipelined step makes the same calls (in another order).
  virtual std::vector<Bucket> buckets(const std::vector<LayerRange>& layers) const = 0;
  // Sums one bucket's gradients over the ranks and divides by the rank count, in place. Calls on
  // different buckets are independent: their order does not change any result.
  virtual ReduceStats reduceBucket(std::span<float> grads, const std::vector<LayerRange>& layers, Bucket bucket) = 0;
  // Every bucket in order: the whole gradient averaged in place (exposedSeconds = seconds).
  ReduceStats reduce(std::span<float> grads, const std::vector<LayerRange>& layers) {
    ReduceStats total;
    for (const Bucket& bucket : buckets(layers)) total += reduceBucket(grads, layers, bucket);
    total.exposedSeconds = total.seconds;
    return total;
  }
  // The wire format each layer used in the last reduce ("fp32" before any), for logs.
  virtual std::vector<std::string> layerFormats() const = 0;
  // Per-layer format requests (one entry per layer range); the controller switches formats with it.
  virtual void setFormats(const std::vector<FormatSpec>& formats) = 0;
  virtual std::vector<FormatSpec> formats() const = 0;
  // Opaque per-rank state needed for a bit-identical continuation (the Communicator's error-feedback
  // residuals, Communicator::saveErrorFeedback); empty when there is none.
  virtual std::vector<std::uint8_t> saveState() const { return {}; }
  // Drops error-feedback residuals (the controller does at every branch, so that no branch inherits
  // another branch's residual); a no-op for reducers without error feedback.
  virtual void resetErrorFeedback() {}
  virtual void loadState(std::span<const std::uint8_t> /*state*/) {}
};

// MPI_Allreduce on the whole flat buffer (one fused call), fp32 only: the baseline and the reducer
// that works before/without the AdaPrec engine. Bytes are those of a ring allreduce, 2 (p-1)/p * n * 4.
std::unique_ptr<GradientReducer> makeMpiReducer(MPI_Comm comm, std::size_t layerCount);

// How CommunicatorReducer groups layers into allreduce calls.
enum class Bucketing {
  kPerLayer,  // one call per layer (and one error-feedback key per layer)
  kFused,     // consecutive layers with the same format requested go in one call
};

// Whether this build has the Communicator-based reducer (the engine's communicator is built).
#ifdef ADAPREC_TRAINER_COMMUNICATOR
inline constexpr bool kHaveCommunicatorReducer = true;
#else
inline constexpr bool kHaveCommunicatorReducer = false;
#endif

// Through an adaprec::Communicator, one format per layer (averaged in the engine). Only defined when
// kHaveCommunicatorReducer.
std::unique_ptr<GradientReducer> makeCommunicatorReducer(MPI_Comm comm, std::vector<FormatSpec> formats,
                                                         Algorithm algorithm, Bucketing bucketing);

}  // namespace adaprec::trainer
