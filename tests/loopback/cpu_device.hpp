// A CPU stand-in of a GPU behind the device seam (lib/algorithm/device_codec.hpp), for tests on
// machines without one (docs/gpu.md, "The CPU stand-in"):
//   - its memory is separate allocations in whole 256-byte granules (as cudaMalloc's), filled with
//     garbage when allocated, at addresses the host cannot dereference (a host read or write of
//     device memory faults, as with cudaMalloc'd memory), and
//     every pointer an operation gets is checked: device operands inside a live allocation, host
//     operands of the copies outside every one (a host pointer handed to the device codec, or a device
//     pointer handed to the transport via a copy, is an Error(kInternal) at once);
//   - its stream is deferred: operations are queued and run only at synchronize() (or, up to the mark,
//     at waitFor), in order, as a GPU may run them any time after they are queued. A copyToHost's destination is written, and a
//     copyToDevice's source read, only then; so a missing synchronize is a wrong result, not luck;
//   - its kernels are the functors of kernels/ (the source nvcc compiles) run by the CPU launcher
//     (serial, or threaded with real threads per block): the codec (codec_dispatch.cuh) and the
//     element-wise ones (elementwise_functors.cuh: error feedback's residual, hierarchical's fp32
//     sums, the averaging).
// One instance per rank (per thread): it is one device's one stream.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>

#include "algorithm/device_codec.hpp"

namespace adaprec::test {

class CpuStandInDevice final : public detail::DeviceCodec {
 public:
  // threadsPerBlock 0: the serial launcher (one thread per block); else the threaded launcher.
  explicit CpuStandInDevice(unsigned threadsPerBlock = 0) : threadsPerBlock_(threadsPerBlock) {}
  ~CpuStandInDevice() override;

  bool hostMemory() const override { return false; }
  // Only the test transports of device_memory_transport.hpp take this memory (translating it).
  static constexpr std::string_view kMemorySpace = "cpu-stand-in";
  std::string_view memorySpace() const override { return kMemorySpace; }
  void encode(Format format, const float* src, std::size_t n, std::byte* chunk, std::size_t bytes) override;
  void encodeWithResidual(Format format, const float* src, float* residual, std::size_t n, std::byte* chunk,
                          std::size_t bytes) override;
  void decode(Format format, const std::byte* chunk, std::size_t bytes, float* dst, std::size_t n) override;
  void decodeAdd(Format format, const std::byte* chunk, std::size_t bytes, float* acc, std::size_t n) override;
  void add(float* acc, const float* in, std::size_t n, bool saturating) override;
  void forgetResidualsOfNonFiniteSums(const float* result, float* residual, std::size_t n) override;
  void divide(float* buf, std::size_t n, float divisor) override;
  void canonicalizeNans(float* buf, std::size_t n) override;
  void* allocate(std::size_t bytes) override;
  void release(void* device) override;
  void fillZero(void* device, std::size_t bytes) override;
  void copyToHost(void* host, const void* device, std::size_t bytes) override;
  void copyToDevice(void* device, const void* host, std::size_t bytes) override;
  void copyOnDevice(void* dst, const void* src, std::size_t bytes) override;
  void synchronize() override;
  std::uint64_t mark() override;
  void waitFor(std::uint64_t ticket) override;
  // Ordinary host memory, tracked: a copy from or to host memory that did not come from here is
  // "pageable" (counted; with CUDA such a copy waits for itself and overlaps nothing). releaseHost
  // runs the queue first, as cudaFreeHost synchronizes the device.
  void* allocateHost(std::size_t bytes) override;
  void releaseHost(void* host) override;

  // Test hooks. The synchronize() and waitFor() calls numbered `index` (0-based, counted together over
  // this device's life) do nothing: for the test that proves a missing synchronization is caught.
  void skipSynchronize(std::size_t index) { skip_ = index; }
  // While set, allocate() throws Error(kCuda), as cudaMallocAsync does when device memory runs out.
  void failAllocations(bool fail) { failAllocations_ = fail; }
  std::size_t synchronizations() const { return synchronizations_; }
  std::size_t queued() const { return queue_.size(); }
  // Runs the queue whatever skipSynchronize says (to read results after a skipped one).
  void drain();
  std::size_t liveAllocations() const { return allocations_.size(); }
  // Bytes the copies moved between host and device memory (both directions), over this device's life:
  // what staging costs, and what a transport that takes device memory saves.
  std::size_t hostDeviceCopyBytes() const { return hostDeviceCopyBytes_; }
  // Of those, the bytes copied from or to pageable host memory (not from allocateHost).
  std::size_t pageableCopyBytes() const { return pageableCopyBytes_; }

  // For the test transports that take this device's memory (device_memory_transport.hpp), as a
  // CUDA-aware MPI or NCCL takes a device pointer. owns: p lies in a live allocation.
  bool owns(const void* p) const;
  // The host address behind device memory [p, p + bytes). The buffer must lie in a live allocation and
  // the stream must be idle: handing a buffer to a transport with work still queued is what a missing
  // cudaStreamSynchronize before MPI_Isend or ncclSend does, and here it is an Error(kInternal).
  void* transportAddress(const void* p, std::size_t bytes, const char* what) const;

 private:
  void enqueue(std::function<void()> op) { queue_.push_back(std::move(op)); }
  void requireDevice(const void* p, std::size_t bytes, const char* what) const;
  void requireHost(const void* p, std::size_t bytes, const char* what) const;
  void launchEncode(Format format, const float* src, std::size_t n, std::byte* chunk) const;
  void launchDecode(Format format, const std::byte* chunk, float* out, std::size_t n, bool add) const;
  template <class F>
  void runElementwise(std::size_t n, const F& f) const;

  unsigned threadsPerBlock_;
  std::map<const std::byte*, std::size_t> allocations_;  // live: start -> bytes
  std::deque<std::function<void()>> queue_;
  std::size_t synchronizations_ = 0;
  std::size_t skip_ = static_cast<std::size_t>(-1);
  bool failAllocations_ = false;
  std::size_t hostDeviceCopyBytes_ = 0;
  std::size_t pageableCopyBytes_ = 0;
  std::map<const std::byte*, std::size_t> hostAllocations_;  // allocateHost: start -> bytes
  std::uint64_t lastTicket_ = 0;
  std::uint64_t reachedTicket_ = 0;  // the last mark the stream has run
  bool pinned(const void* p, std::size_t bytes) const;
  void countCopy(const void* host, std::size_t bytes);
};

// A DeviceRunOptions::beforeRepetition hook (device_run.hpp) for the tests that prove a missing
// synchronization is caught: from repetition 1 on, the stand-in skips the next synchronize() (the
// second call's first one; repetition 0 grew the workspace, whose own synchronization it would be).
inline void skipNextSynchronizeAfterFirstCall(detail::DeviceCodec& device, int rep) {
  auto& standIn = static_cast<CpuStandInDevice&>(device);
  if (rep >= 1) standIn.skipSynchronize(standIn.synchronizations());
}

}  // namespace adaprec::test
