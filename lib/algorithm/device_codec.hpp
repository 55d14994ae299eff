// The device seam under the algorithms (docs/gpu.md, "The device seam"): where an allreduce's float
// buffers live and how the codec runs on them. Steps (steps.hpp) calls nothing else for codec work,
// so the same algorithm source reduces host memory (HostDeviceCodec, the host codec as it always ran)
// or device memory (a CUDA implementation, or the CPU stand-in of a device in tests/loopback that runs
// the kernel functors of kernels/ on a deferred stream).
//
// Stream semantics, which every caller must respect: each operation is queued on the
// implementation's one stream and runs in order. What a copyToHost writes may be read, and a host
// buffer a copyToDevice reads may be reused, only after synchronize() or waitFor() of a mark() made
// after the copy. The host implementation runs everything at once; the stand-in runs nothing before
// synchronize() (or up to the mark waited for), so a missing one is a wrong result in a test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "adaprec/format.hpp"

namespace adaprec::detail {

class DeviceCodec {
 public:
  virtual ~DeviceCodec() = default;

  // True when buffers are ordinary host memory: the algorithms then hand them to the transport
  // directly and never stage.
  virtual bool hostMemory() const = 0;
  // What memory the buffers are, for Transport::acceptsDeviceMemory: "host", "cuda", or a test
  // device's own name. A transport that accepts this space is handed device memory directly.
  virtual std::string_view memorySpace() const = 0;

  // The codec on this device's memory; chunk is exactly `bytes` = encodedBytes(format, n).
  virtual void encode(Format format, const float* src, std::size_t n, std::byte* chunk, std::size_t bytes) = 0;
  // Error feedback: v = saturatingAdd(src, residual); chunk = encode(v); residual = v - decode(chunk).
  virtual void encodeWithResidual(Format format, const float* src, float* residual, std::size_t n,
                                  std::byte* chunk, std::size_t bytes) = 0;
  virtual void decode(Format format, const std::byte* chunk, std::size_t bytes, float* dst, std::size_t n) = 0;
  virtual void decodeAdd(Format format, const std::byte* chunk, std::size_t bytes, float* acc, std::size_t n) = 0;
  // acc[i] += in[i], or saturatingAdd (docs/formats.md) when `saturating`: hierarchical's node sum.
  virtual void add(float* acc, const float* in, std::size_t n, bool saturating) = 0;
  // residual[i] = residualAfterSum(result[i], residual[i]) (detail/scalar_convert.hpp): error
  // feedback forgets what it owed to a position whose sum is not finite.
  virtual void forgetResidualsOfNonFiniteSums(const float* result, float* residual, std::size_t n) = 0;
  // buf[i] /= divisor: the averaging.
  virtual void divide(float* buf, std::size_t n, float divisor) = 0;
  // buf[i] = canonicalNan(buf[i]) (detail/scalar_convert.hpp): recursive_doubling's ranks add NaNs in
  // different orders.
  virtual void canonicalizeNans(float* buf, std::size_t n) = 0;

  // Device memory (uninitialised), released in stream order.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* device) = 0;
  virtual void fillZero(void* device, std::size_t bytes) = 0;
  virtual void copyToHost(void* host, const void* device, std::size_t bytes) = 0;
  virtual void copyToDevice(void* device, const void* host, std::size_t bytes) = 0;
  virtual void copyOnDevice(void* dst, const void* src, std::size_t bytes) = 0;  // ranges may overlap
  // Waits until everything queued so far has run.
  virtual void synchronize() = 0;
  // Events: mark() records the point the stream has reached and returns its ticket (increasing);
  // waitFor(ticket) blocks until everything queued before that mark has run (earlier marks with it).
  // What lets the host go on (post the next receive, wait for a transfer) while copies and decodes
  // it queued are still running.
  virtual std::uint64_t mark() = 0;
  virtual void waitFor(std::uint64_t ticket) = 0;
  // Host memory for staging that the device copies from and to asynchronously (CUDA: pinned,
  // cudaMallocHost; pageable memory makes cudaMemcpyAsync wait for the copy). releaseHost waits for
  // the device first (as cudaFreeHost does) and never throws.
  virtual void* allocateHost(std::size_t bytes) = 0;
  virtual void releaseHost(void* host) = 0;
};

// Today's host codec (adaprec::encode/decode/decodeAdd) on host memory, run at once. Holds the
// error-feedback scratch, so one per thread of use (Steps owns one).
class HostDeviceCodec final : public DeviceCodec {
 public:
  bool hostMemory() const override { return true; }
  std::string_view memorySpace() const override { return "host"; }
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
  void synchronize() override {}
  std::uint64_t mark() override { return 0; }
  void waitFor(std::uint64_t) override {}
  void* allocateHost(std::size_t bytes) override;
  void releaseHost(void* host) override;

 private:
  std::vector<float> withResidual_;
  std::vector<float> decoded_;
};

// Staging memory on the host (DeviceCodec::allocateHost) that gives itself back when it goes out of
// scope: the owner makes sure the stream no longer copies from or to it by then. Contents unspecified.
class HostStaging {
 public:
  HostStaging(DeviceCodec& device, std::size_t bytes)
      : device_(device), data_(bytes != 0 ? device.allocateHost(bytes) : nullptr) {}
  ~HostStaging() {
    if (data_ != nullptr) device_.releaseHost(data_);
  }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  DeviceCodec& device_;
  void* data_;
};

// Device memory that gives itself back (in stream order) when it goes out of scope; grows, never
// shrinks. Contents unspecified.
class DeviceScratch {
 public:
  explicit DeviceScratch(DeviceCodec& device) : device_(device) {}
  ~DeviceScratch() { reset(); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  void* get(std::size_t bytes) {
    if (bytes > capacity_) {
      reset();
      data_ = device_.allocate(bytes);
      capacity_ = bytes;
    }
    return data_;
  }
  void reset() {
    if (data_ != nullptr) device_.release(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  DeviceCodec& device_;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace adaprec::detail
