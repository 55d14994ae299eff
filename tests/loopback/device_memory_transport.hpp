// Two test transports over the CPU stand-in of a device (cpu_device.hpp).
//
// DeviceMemoryTransport: a transport that takes the CPU stand-in's device memory as it is, the way a CUDA-aware MPI or NCCL
// takes a device pointer (Transport::acceptsDeviceMemory; docs/gpu.md, "Device memory straight to the
// transport"): a decorator over any transport (loopback, MPI) that translates a stand-in address to the
// host memory behind it when a message is posted. It is strict where the real ones are silent: a
// device buffer handed over while the stand-in still has work queued (a missing synchronization before
// MPI_Isend/ncclSend) is an Error(kInternal) at once, not a race. Host memory passes through unchanged.
// One per rank (its own stand-in); sub-transports from split() wrap the inner transport's.
#pragma once

#include <atomic>
#include <memory>

#include "adaprec/transport.hpp"
#include "cpu_device.hpp"

namespace adaprec::test {

class DeviceMemoryTransport final : public Transport {
 public:
  DeviceMemoryTransport(std::shared_ptr<Transport> inner, CpuStandInDevice& device,
                        std::shared_ptr<std::atomic<std::size_t>> deviceMessages = nullptr);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* kind() const override { return "device-memory"; }
  int nodeId() const override { return inner_->nodeId(); }
  std::size_t interNodeMessageBytes() const override { return inner_->interNodeMessageBytes(); }
  bool acceptsDeviceMemory(std::string_view memorySpace) const override {
    return memorySpace == CpuStandInDevice::kMemorySpace;
  }
  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override;
  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override;
  void allreduceMax(std::uint64_t* values, std::size_t count) override { inner_->allreduceMax(values, count); }
  void nativeAllreduce(void* recv, std::size_t count, NativeType type) override;
  void nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count, NativeType type) override;
  std::unique_ptr<Transport> split(int color, int key) override;
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }

  // Messages and native sums that were device memory, over this transport and its sub-transports.
  std::size_t deviceMessages() const { return *deviceMessages_; }

 private:
  // The host address behind `p` when it is the stand-in's memory (counted), else `p`.
  void* view(const void* p, std::size_t bytes, const char* what);

  std::shared_ptr<Transport> inner_;
  CpuStandInDevice& device_;
  std::shared_ptr<std::atomic<std::size_t>> deviceMessages_;
};

}  // namespace adaprec::test

namespace adaprec::test {

// Counts the transfers a rank waited for while its stand-in still had work queued: with staged
// messages, the copies and decodes queued without waiting (steps.hpp) that a GPU runs while the host
// waits for the next transfer. A decorator over any transport; sub-transports share the count.
class QueueProbeTransport final : public Transport {
 public:
  QueueProbeTransport(std::shared_ptr<Transport> inner, CpuStandInDevice& device,
                      std::shared_ptr<std::atomic<std::size_t>> overlapped = nullptr);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* kind() const override { return "queue-probe"; }
  int nodeId() const override { return inner_->nodeId(); }
  std::size_t interNodeMessageBytes() const override { return inner_->interNodeMessageBytes(); }
  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override;
  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override;
  void allreduceMax(std::uint64_t* values, std::size_t count) override { inner_->allreduceMax(values, count); }
  void nativeAllreduce(void* recv, std::size_t count, NativeType type) override {
    inner_->nativeAllreduce(recv, count, type);
  }
  void nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count, NativeType type) override {
    inner_->nativeAllreduceOutOfPlace(send, recv, count, type);
  }
  std::unique_ptr<Transport> split(int color, int key) override;
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }

  // Request waits that began with device work queued.
  std::size_t overlappedWaits() const { return *overlapped_; }

 private:
  RequestPtr probe(RequestPtr inner);

  std::shared_ptr<Transport> inner_;
  CpuStandInDevice& device_;
  std::shared_ptr<std::atomic<std::size_t>> overlapped_;
};

}  // namespace adaprec::test
