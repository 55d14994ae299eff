// The reducer that goes through AdaPrec's Communicator; built when the engine is part of the build.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "gradient_reducer.hpp"

namespace adaprec::trainer {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class CommunicatorReducer final : public GradientReducer {
 public:
  CommunicatorReducer(MPI_Comm comm, std::vector<FormatSpec> formats, Algorithm algorithm, Bucketing bucketing)
      : comm_(makeMpiCommunicator(comm)), formats_(std::move(formats)), algorithm_(algorithm),
        bucketing_(bucketing), used_(formats_.size(), "fp32") {
    setFormats(formats_);
  }
  std::string name() const override { return "adaprec"; }

  std::vector<Bucket> buckets(const std::vector<LayerRange>& layers) const override {
    ADAPREC_CHECK(layers.size() == formats_.size(), ErrorCode::kMismatch,
                  layers.size() << " layers but " << formats_.size() << " formats");
    std::vector<Bucket> out;
    std::size_t first = 0;
    while (first < layers.size()) {
      std::size_t last = first + 1;
      if (bucketing_ == Bucketing::kFused) {
        while (last < layers.size() && formats_[last] == formats_[first]) ++last;
      }
      out.push_back({first, last});
      first = last;
    }
    return out;
  }

  ReduceStats reduceBucket(std::span<float> grads, const std::vector<LayerRange>& layers, Bucket bucket) override {
    ADAPREC_CHECK(layers.size() == formats_.size() && bucket.first < bucket.last && bucket.last <= layers.size(),
                  ErrorCode::kMismatch,
                  "bucket [" << bucket.first << ", " << bucket.last << ") of " << layers.size() << " layers ("
                             << formats_.size() << " formats)");
    ReduceStats s;
    const double start = now();
    AllreduceOptions opt;
    opt.format = formats_[bucket.first];
    opt.algorithm = algorithm_;
    opt.average = true;
    opt.key = layers[bucket.first].name;
    for (std::size_t i = bucket.first + 1; i < bucket.last; ++i) opt.key += "+" + layers[i].name;
    const std::int64_t offset = layers[bucket.first].offset;
    const std::int64_t count = layers[bucket.last - 1].offset + layers[bucket.last - 1].count - offset;
    AllreduceStats a = comm_.allreduce(grads.data() + offset, static_cast<std::size_t>(count), opt);
    s.wireBytes = a.wireBytes;
    s.fp32Bytes = a.fp32Bytes;
    for (std::size_t i = bucket.first; i < bucket.last; ++i) {
      used_[i] = std::string(formatName(a.format));
      if (opt.format.errorFeedback) used_[i] += "+ef";
    }
    s.seconds = now() - start;
    return s;
  }
  std::vector<std::string> layerFormats() const override { return used_; }
  void setFormats(const std::vector<FormatSpec>& formats) override {
    ADAPREC_CHECK_ARG(formats.size() == formats_.size(),
                      formats.size() << " formats for " << formats_.size() << " layers");
    for (const FormatSpec& f : formats) {
      ADAPREC_CHECK_ARG(f.selection != Selection::kAdaptive,
                        "'adaptive' is the controller's choice, not a format the reducer can send");
    }
    formats_ = formats;
  }
  std::vector<FormatSpec> formats() const override { return formats_; }
  void resetErrorFeedback() override { comm_.resetErrorFeedback(); }
  // This rank's error-feedback residuals in the Communicator's own versioned layout; a checkpoint
  // written by a reducer without state (empty) resumes with none.
  std::vector<std::uint8_t> saveState() const override {
    const std::vector<std::byte> state = comm_.saveErrorFeedback();
    const auto* begin = reinterpret_cast<const std::uint8_t*>(state.data());
    return std::vector<std::uint8_t>(begin, begin + state.size());
  }
  void loadState(std::span<const std::uint8_t> state) override {
    if (state.empty()) {
      comm_.resetErrorFeedback();
      return;
    }
    comm_.loadErrorFeedback(std::as_bytes(state));
  }

 private:
  Communicator comm_;
  std::vector<FormatSpec> formats_;
  Algorithm algorithm_;
  Bucketing bucketing_;
  std::vector<std::string> used_;
};

}  // namespace

std::unique_ptr<GradientReducer> makeCommunicatorReducer(MPI_Comm comm, std::vector<FormatSpec> formats,
                                                         Algorithm algorithm, Bucketing bucketing) {
  return std::make_unique<CommunicatorReducer>(comm, std::move(formats), algorithm, bucketing);
}

}  // namespace adaprec::trainer
