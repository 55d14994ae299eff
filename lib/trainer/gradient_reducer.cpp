#include "gradient_reducer.hpp"

#include <chrono>

#include "adaprec/error.hpp"
#include "trainer_collectives.hpp"

namespace adaprec::trainer {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class MpiReducer final : public GradientReducer {
 public:
  MpiReducer(MPI_Comm comm, std::size_t layerCount) : comm_(comm), layerCount_(layerCount) {
    MPI_Comm_size(comm_, &size_);
  }
  std::string name() const override { return "mpi"; }

  // One fused call on the whole buffer.
  std::vector<Bucket> buckets(const std::vector<LayerRange>& layers) const override { return {{0, layers.size()}}; }
  ReduceStats reduceBucket(std::span<float> grads, const std::vector<LayerRange>& /*layers*/, Bucket /*bucket*/) override {
    ReduceStats s;
    const double start = now();
    ADAPREC_CHECK(grads.size() <= static_cast<std::size_t>(INT32_MAX), ErrorCode::kUnsupported,
                  "MPI_Allreduce of " << grads.size() << " floats exceeds int count");
    timedAllreduce(MPI_IN_PLACE, grads.data(), static_cast<int>(grads.size()), MPI_FLOAT, MPI_SUM, comm_,
                   "the gradient allreduce (--reducer mpi)");
    const float ranks = static_cast<float>(size_);
    for (float& g : grads) g /= ranks;
    s.seconds = now() - start;
    s.fp32Bytes = s.wireBytes = size_ > 1 ? 2 * (size_ - 1) * grads.size() * sizeof(float) / size_ : 0;
    return s;
  }
  std::vector<std::string> layerFormats() const override { return std::vector<std::string>(layerCount_, "fp32"); }
  void setFormats(const std::vector<FormatSpec>& formats) override {
    for (const FormatSpec& f : formats) {
      ADAPREC_CHECK_ARG(f.selection == Selection::kFixed && f.format == Format::kFp32 && !f.errorFeedback,
                        "the MPI reducer only sends fp32, not " << toString(f));
    }
  }
  std::vector<FormatSpec> formats() const override { return std::vector<FormatSpec>(layerCount_); }

 private:
  MPI_Comm comm_;
  int size_ = 1;
  std::size_t layerCount_;
};

}  // namespace

std::unique_ptr<GradientReducer> makeMpiReducer(MPI_Comm comm, std::size_t layerCount) {
  return std::make_unique<MpiReducer>(comm, layerCount);
}

}  // namespace adaprec::trainer
