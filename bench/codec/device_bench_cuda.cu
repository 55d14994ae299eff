// adaprec-codec-bench --device cuda (device_bench.hpp), compiled by nvcc in a -Dcuda=enabled build only:
// every operation is queued on one stream and timed between two CUDA events, so the figures are the
// device's time, not the launch overhead of the host. The codec runs through CudaDeviceCodec (the
// device seam the algorithms use, lib/gpu/cuda_device_codec.cpp) on that same stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>

#include <cub/device/device_radix_sort.cuh>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "device_bench.hpp"
#include "gpu/cuda_device_codec.hpp"

namespace adaprec::bench {
namespace {

void check(cudaError_t status, const char* what) {
  ADAPREC_CHECK(status == cudaSuccess, ErrorCode::kCuda, "CUDA " << what << ": " << cudaGetErrorString(status));
}

// Device memory of its own, in whole 256-byte granules: the codec kernels may read the rest of the
// aligned word at a chunk's end (docs/gpu.md), which must lie inside the allocation.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) {
    check(cudaMalloc(&data_, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256), "allocation");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
};

class Events {
 public:
  Events() {
    check(cudaEventCreate(&start_), "event creation");
    check(cudaEventCreate(&stop_), "event creation");
  }
  ~Events() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  // Seconds the device spent on what `op` queues on `stream`.
  double time(cudaStream_t stream, const std::function<void()>& op) {
    check(cudaEventRecord(start_, stream), "event record");
    op();
    check(cudaEventRecord(stop_, stream), "event record");
    check(cudaEventSynchronize(stop_), "event synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "event elapsed time");
    return 1e-3 * ms;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

class CudaCodecBench final : public DeviceCodecBench {
 public:
  explicit CudaCodecBench(const std::vector<float>& x)
      : count_(x.size()), fp32Bytes_(x.size() * sizeof(float)), maxChunkBytes_(maxEncodedBytes(x.size())) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream creation");
    codec_ = detail::makeCudaDeviceCodec(stream_);
    check(cub::DeviceRadixSort::SortKeys(nullptr, sortTempBytes_, static_cast<const float*>(nullptr),
                                         static_cast<float*>(nullptr), count_, 0, 32, stream_),
          "cub::DeviceRadixSort temporary size");
    // Four fp32 buffers (input, output, accumulator, sorted), the largest chunk and CUB's scratch:
    // refuse what cannot fit before allocating, naming -n.
    const double needed = 4.0 * fp32Bytes_ + maxChunkBytes_ + sortTempBytes_;
    std::size_t freeBytes = 0, totalBytes = 0;
    check(cudaMemGetInfo(&freeBytes, &totalBytes), "memory query");
    ADAPREC_CHECK_ARG(needed <= static_cast<double>(freeBytes),
                      "-n " << count_ << " needs about " << needed / (1 << 30) << " GiB of device memory; "
                            << static_cast<double>(freeBytes) / (1 << 30) << " GiB are free: use a smaller -n");
    x_ = std::make_unique<DeviceBuffer>(fp32Bytes_);
    y_ = std::make_unique<DeviceBuffer>(fp32Bytes_);
    acc_ = std::make_unique<DeviceBuffer>(fp32Bytes_);
    sorted_ = std::make_unique<DeviceBuffer>(fp32Bytes_);
    chunk_ = std::make_unique<DeviceBuffer>(maxChunkBytes_);
    sortTemp_ = std::make_unique<DeviceBuffer>(sortTempBytes_);
    check(cudaMemcpyAsync(x_->as<float>(), x.data(), fp32Bytes_, cudaMemcpyHostToDevice, stream_), "upload");
    check(cudaStreamSynchronize(stream_), "stream synchronize");
  }
  ~CudaCodecBench() override {
    codec_.reset();  // synchronizes its work on the stream first
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  void timeBaselines(int reps, double& copySeconds, double& sortSeconds) override {
    const std::vector<double> s = interleaved(reps, {[&] { copy(); }, [&] { sort(); }});
    copySeconds = s[0];
    sortSeconds = s[1];
  }

  DeviceFormatTiming timeFormat(Format format, int reps) override {
    format_ = format;
    const std::size_t bytes = encodedBytes(format, count_);
    std::byte* chunk = chunk_->as<std::byte>();
    float* acc = acc_->as<float>();
    check(cudaMemsetAsync(acc, 0, fp32Bytes_, stream_), "memset");
    const std::vector<double> s =
        interleaved(reps, {[&] { copy(); },
                           [&] { codec_->encode(format, x_->as<const float>(), count_, chunk, bytes); },
                           [&] { codec_->decode(format, chunk, bytes, y_->as<float>(), count_); },
                           [&] { codec_->decodeAdd(format, chunk, bytes, acc, count_); }});
    return {s[0], s[1], s[2], s[3]};
  }

  void fetch(std::vector<unsigned char>& chunk, std::vector<float>& decoded) override {
    chunk.resize(encodedBytes(format_, count_));
    decoded.resize(count_);
    check(cudaMemcpyAsync(chunk.data(), chunk_->as<const void>(), chunk.size(), cudaMemcpyDeviceToHost, stream_),
          "download");
    check(cudaMemcpyAsync(decoded.data(), y_->as<const void>(), fp32Bytes_, cudaMemcpyDeviceToHost, stream_),
          "download");
    check(cudaStreamSynchronize(stream_), "stream synchronize");
  }

 private:
  static std::size_t maxEncodedBytes(std::size_t n) {
    std::size_t bytes = 0;
    for (Format format : allFormats()) bytes = std::max(bytes, encodedBytes(format, n));
    return bytes;
  }
  void copy() {
    check(cudaMemcpyAsync(y_->as<void>(), x_->as<const void>(), fp32Bytes_, cudaMemcpyDeviceToDevice, stream_),
          "device copy");
  }
  void sort() {
    std::size_t tempBytes = sortTempBytes_;
    check(cub::DeviceRadixSort::SortKeys(sortTemp_->as<void>(), tempBytes, x_->as<const float>(),
                                         sorted_->as<float>(), count_, 0, 32, stream_),
          "cub::DeviceRadixSort::SortKeys");
  }
  // Median device seconds of each operation over `reps` rounds in turns, after one untimed call of
  // each (the memory pool's first allocations, instruction caches): the same method as the host
  // bench's interleavedMedians, on the device clock.
  std::vector<double> interleaved(int reps, const std::vector<std::function<void()>>& ops) {
    for (const auto& op : ops) op();
    check(cudaStreamSynchronize(stream_), "stream synchronize");
    std::vector<std::vector<double>> t(ops.size());
    for (int r = 0; r < reps; ++r) {
      for (std::size_t k = 0; k < ops.size(); ++k) t[k].push_back(events_.time(stream_, ops[k]));
    }
    std::vector<double> medians;
    for (auto& v : t) {
      std::sort(v.begin(), v.end());
      medians.push_back(v[v.size() / 2]);
    }
    return medians;
  }

  std::size_t count_;
  std::size_t fp32Bytes_;
  std::size_t maxChunkBytes_;
  std::size_t sortTempBytes_ = 0;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<detail::DeviceCodec> codec_;
  Events events_;
  std::unique_ptr<DeviceBuffer> x_, y_, acc_, sorted_, chunk_, sortTemp_;
  Format format_ = Format::kFp32;
};

}  // namespace

std::unique_ptr<DeviceCodecBench> makeCudaCodecBench(const std::vector<float>& x) {
  return std::make_unique<CudaCodecBench>(x);
}

}  // namespace adaprec::bench
