#include "gpu/cuda_device_codec.hpp"

#include "adaprec/error.hpp"
#include "codec/chunk_header.hpp"
#include "gpu/cuda_caller.hpp"

#if defined(ADAPREC_HAVE_CUDA)
#include <cuda_runtime.h>

#include <deque>
#include <utility>
#include <vector>

#include "codec_launch.hpp"
#include "elementwise_launch.hpp"
#endif

namespace adaprec::detail {

#if defined(ADAPREC_HAVE_CUDA)

namespace {

void check(int status, const char* what) {
  ADAPREC_CHECK(status != kernels::kLaunchUnsupported, ErrorCode::kUnsupported, "no CUDA kernel for " << what);
  ADAPREC_CHECK(status == 0, ErrorCode::kCuda,
                "CUDA " << what << ": " << cudaGetErrorString(static_cast<cudaError_t>(status)));
}

class CudaDeviceCodec final : public DeviceCodec {
 public:
  explicit CudaDeviceCodec(void* stream) : stream_(static_cast<cudaStream_t>(stream)) {
    if (stream_ == nullptr) {
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream creation");
      ownStream_ = true;
    }
  }
  ~CudaDeviceCodec() override {
    cudaStreamSynchronize(stream_);
    for (const auto& [ticket, event] : marks_) cudaEventDestroy(event);
    for (cudaEvent_t event : spareEvents_) cudaEventDestroy(event);
    cudaFree(withResidual_);
    cudaFree(decoded_);
    if (ownStream_) cudaStreamDestroy(stream_);
  }

  bool hostMemory() const override { return false; }
  std::string_view memorySpace() const override { return "cuda"; }

  void encode(Format format, const float* src, std::size_t n, std::byte* chunk, std::size_t) override {
    check(kernels::launchEncode(static_cast<std::uint8_t>(format), src, n, chunk, codec::chunkLayout(format, n).paramsBytes,
                                stream_),
          "encode");
  }
  void encodeWithResidual(Format format, const float* src, float* residual, std::size_t n, std::byte* chunk,
                          std::size_t bytes) override {
    reserve(n);
    check(kernels::launchAddResidual(src, residual, withResidual_, n, stream_), "residual add");
    encode(format, withResidual_, n, chunk, bytes);
    decodeWith(format, chunk, decoded_, n, false);
    check(kernels::launchUpdateResidual(withResidual_, decoded_, residual, n, stream_), "residual update");
  }
  void decode(Format format, const std::byte* chunk, std::size_t, float* dst, std::size_t n) override {
    decodeWith(format, chunk, dst, n, false);
  }
  void decodeAdd(Format format, const std::byte* chunk, std::size_t, float* acc, std::size_t n) override {
    decodeWith(format, chunk, acc, n, true);
  }
  void add(float* acc, const float* in, std::size_t n, bool saturating) override {
    check(kernels::launchAddInto(acc, in, n, saturating, stream_), "add");
  }
  void forgetResidualsOfNonFiniteSums(const float* result, float* residual, std::size_t n) override {
    check(kernels::launchForgetResidualsOfNonFiniteSums(result, residual, n, stream_), "forgetResidualsOfNonFiniteSums");
  }
  void divide(float* buf, std::size_t n, float divisor) override {
    check(kernels::launchDivideBy(buf, n, divisor, stream_), "divide");
  }
  void canonicalizeNans(float* buf, std::size_t n) override {
    check(kernels::launchCanonicalizeNans(buf, n, stream_), "canonicalizeNans");
  }
  void* allocate(std::size_t bytes) override {
    // Whole 256-byte granules: the codec kernels may read the rest of the aligned word at a chunk's
    // end (docs/gpu.md), which must lie inside the allocation whatever the pool hands out.
    void* p = nullptr;
    check(cudaMallocAsync(&p, ((bytes == 0 ? 1 : bytes) + 255) / 256 * 256, stream_), "allocation");
    return p;
  }
  void release(void* device) override {
    if (device != nullptr) check(cudaFreeAsync(device, stream_), "release");
  }
  void fillZero(void* device, std::size_t bytes) override {
    if (bytes != 0) check(cudaMemsetAsync(device, 0, bytes, stream_), "memset");
  }
  void copyToHost(void* host, const void* device, std::size_t bytes) override {
    if (bytes != 0) check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
  }
  void copyToDevice(void* device, const void* host, std::size_t bytes) override {
    if (bytes != 0) check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_), "copy to device");
  }
  void copyOnDevice(void* dst, const void* src, std::size_t bytes) override {
    // cudaMemcpy on overlapping ranges is undefined: the Communicator only copies distinct buffers
    // (send != recv), which may not overlap (as MPI's).
    if (bytes != 0 && dst != src)
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "device copy");
  }
  void synchronize() override {
    check(cudaStreamSynchronize(stream_), "stream synchronize");
    retire(lastTicket_);
  }
  std::uint64_t mark() override {
    cudaEvent_t event = nullptr;
    if (spareEvents_.empty()) {
      check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event creation");
    } else {
      event = spareEvents_.back();
      spareEvents_.pop_back();
    }
    const cudaError_t recorded = cudaEventRecord(event, stream_);
    if (recorded != cudaSuccess) spareEvents_.push_back(event);
    check(recorded, "event record");
    marks_.emplace_back(++lastTicket_, event);
    return lastTicket_;
  }
  void waitFor(std::uint64_t ticket) override {
    // The latest mark at or before `ticket` still outstanding: waiting for it covers the earlier ones.
    cudaEvent_t last = nullptr;
    for (const auto& [t, event] : marks_) {
      if (t > ticket) break;
      last = event;
    }
    if (last == nullptr) return;  // already waited for
    check(cudaEventSynchronize(last), "event synchronize");
    retire(ticket);
  }
  void* allocateHost(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), "pinned host allocation");
    return p;
  }
  void releaseHost(void* host) override {
    if (host != nullptr) cudaFreeHost(host);  // synchronizes the device; called from destructors: no throw
  }

 private:
  void decodeWith(Format format, const std::byte* chunk, float* out, std::size_t n, bool add) {
    check(kernels::launchDecode(static_cast<std::uint8_t>(format), chunk, out, n, codec::chunkLayout(format, n).paramsBytes,
                                add, stream_),
          add ? "decodeAdd" : "decode");
  }
  // Error feedback's two scratch arrays: grown (after the stream drains), never shrunk.
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    synchronize();
    cudaFree(withResidual_);
    cudaFree(decoded_);
    withResidual_ = decoded_ = nullptr;
    capacity_ = 0;
    check(cudaMalloc(&withResidual_, n * sizeof(float)), "allocation");
    check(cudaMalloc(&decoded_, n * sizeof(float)), "allocation");
    capacity_ = n;
  }

  cudaStream_t stream_;
  bool ownStream_ = false;
  float* withResidual_ = nullptr;
  float* decoded_ = nullptr;
  // Events of outstanding marks, oldest first, and finished ones for reuse (no creation per mark).
  std::deque<std::pair<std::uint64_t, cudaEvent_t>> marks_;
  std::vector<cudaEvent_t> spareEvents_;
  std::uint64_t lastTicket_ = 0;
  void retire(std::uint64_t ticket) {
    while (!marks_.empty() && marks_.front().first <= ticket) {
      spareEvents_.push_back(marks_.front().second);
      marks_.pop_front();
    }
  }
  std::size_t capacity_ = 0;
};

}  // namespace

std::shared_ptr<DeviceCodec> makeCudaDeviceCodec(void* stream) { return std::make_shared<CudaDeviceCodec>(stream); }

#else

std::shared_ptr<DeviceCodec> makeCudaDeviceCodec(void*) {
  ADAPREC_FAIL(ErrorCode::kUnsupported, kBuildWithCuda);
}

#endif

}  // namespace adaprec::detail
