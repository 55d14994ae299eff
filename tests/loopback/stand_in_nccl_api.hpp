// The NCCL fake moving the CPU stand-in's device memory, as real NCCL moves CUDA device memory: an
// NcclApi decorator per rank over the shared NcclFake, which translates the rank's stand-in addresses
// (cpu_device.hpp) to the host memory behind them in send, recv, allReduceSum and memcpyAsync, and
// says which pointers are device memory (so NcclTransport stages only host messages). Strict where
// NCCL is silent: a device buffer handed over while the stand-in still has work queued (no
// synchronization between the codec's stream and NCCL's) is refused with kInvalidUsage at the call.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "cpu_device.hpp"
#include "transport/nccl_fake.hpp"

namespace adaprec::test {

class StandInNcclApi final : public detail::NcclApi {
 public:
  StandInNcclApi(std::shared_ptr<detail::NcclFake> fake, CpuStandInDevice& device)
      : fake_(std::move(fake)), device_(device) {}

  using R = detail::NcclResult;
  R getUniqueId(detail::NcclUniqueId* id) override { return fake_->getUniqueId(id); }
  R commInitRank(detail::NcclComm* comm, int nranks, const detail::NcclUniqueId& id, int rank) override {
    return fake_->commInitRank(comm, nranks, id, rank);
  }
  R commSplit(detail::NcclComm comm, int color, int key, detail::NcclComm* newComm) override {
    return fake_->commSplit(comm, color, key, newComm);
  }
  R commDestroy(detail::NcclComm comm) override { return fake_->commDestroy(comm); }
  R commAbort(detail::NcclComm comm) override { return fake_->commAbort(comm); }
  R commCount(detail::NcclComm comm, int* count) override { return fake_->commCount(comm, count); }
  R commUserRank(detail::NcclComm comm, int* rank) override { return fake_->commUserRank(comm, rank); }
  R groupStart() override { return fake_->groupStart(); }
  R groupEnd() override { return fake_->groupEnd(); }
  R send(const void* data, std::size_t count, detail::NcclDataType type, int peer, detail::NcclComm comm,
         detail::NcclStream stream) override {
    const void* host = nullptr;
    if (!translate(data, count, "ncclSend", host)) return R::kInvalidUsage;
    return fake_->send(host, count, type, peer, comm, stream);
  }
  R recv(void* data, std::size_t count, detail::NcclDataType type, int peer, detail::NcclComm comm,
         detail::NcclStream stream) override {
    const void* host = nullptr;
    if (!translate(data, count, "ncclRecv", host)) return R::kInvalidUsage;
    return fake_->recv(const_cast<void*>(host), count, type, peer, comm, stream);
  }
  R allReduceSum(const void* send, void* recv, std::size_t count, detail::NcclDataType type, detail::NcclComm comm,
                 detail::NcclStream stream) override {
    const std::size_t bytes = count * elementBytes(type);
    const void* hostSend = nullptr;
    const void* hostRecv = nullptr;
    if (!translate(send, bytes, "ncclAllReduce", hostSend) || !translate(recv, bytes, "ncclAllReduce", hostRecv))
      return R::kInvalidUsage;
    return fake_->allReduceSum(hostSend, const_cast<void*>(hostRecv), count, type, comm, stream);
  }
  R streamCreate(detail::NcclStream* stream) override { return fake_->streamCreate(stream); }
  R streamDestroy(detail::NcclStream stream) override { return fake_->streamDestroy(stream); }
  R streamSynchronize(detail::NcclStream stream, detail::NcclComm comm, std::chrono::milliseconds timeout) override {
    return fake_->streamSynchronize(stream, comm, timeout);
  }
  R eventCreate(detail::NcclEvent* event) override { return fake_->eventCreate(event); }
  R eventDestroy(detail::NcclEvent event) override { return fake_->eventDestroy(event); }
  R eventRecord(detail::NcclEvent event, detail::NcclStream stream) override { return fake_->eventRecord(event, stream); }
  R eventSynchronize(detail::NcclEvent event, detail::NcclComm comm, std::chrono::milliseconds timeout) override {
    return fake_->eventSynchronize(event, comm, timeout);
  }
  R deviceAlloc(void** ptr, std::size_t bytes) override { return fake_->deviceAlloc(ptr, bytes); }
  R deviceFree(void* ptr) override { return fake_->deviceFree(ptr); }
  R memcpyAsync(void* dst, const void* src, std::size_t bytes, detail::NcclStream stream) override {
    const void* hostDst = nullptr;
    const void* hostSrc = nullptr;
    if (!translate(dst, bytes, "cudaMemcpyAsync", hostDst) || !translate(src, bytes, "cudaMemcpyAsync", hostSrc))
      return R::kInvalidUsage;
    return fake_->memcpyAsync(const_cast<void*>(hostDst), hostSrc, bytes, stream);
  }
  bool movesMemory(std::string_view memorySpace) const override {
    return memorySpace == CpuStandInDevice::kMemorySpace;
  }
  bool isDeviceMemory(const void* p) const override { return device_.owns(p); }
  const char* errorString(R result) const override { return fake_->errorString(result); }
  std::string lastError() const override { return error_.empty() ? fake_->lastError() : std::exchange(error_, {}); }

  // Operations that were handed stand-in device memory.
  std::size_t deviceOperations() const { return deviceOperations_; }

 private:
  static std::size_t elementBytes(detail::NcclDataType type) {
    switch (type) {
      case detail::NcclDataType::kFloat32: return 4;
      case detail::NcclDataType::kBfloat16:
      case detail::NcclDataType::kFloat16: return 2;
      case detail::NcclDataType::kUint8:
      case detail::NcclDataType::kFloat8e5m2: return 1;
    }
    return 4;
  }
  // `host` = the host address behind p (p itself when it is not the stand-in's memory); false, with
  // the reason kept for lastError, when the stand-in refuses it.
  bool translate(const void* p, std::size_t bytes, const char* what, const void*& host) {
    host = p;
    if (bytes == 0 || !device_.owns(p)) return true;
    try {
      host = device_.transportAddress(p, bytes, what);
    } catch (const Error& e) {
      error_ = e.what();
      return false;
    }
    ++deviceOperations_;
    return true;
  }

  std::shared_ptr<detail::NcclFake> fake_;
  CpuStandInDevice& device_;
  mutable std::string error_;
  std::size_t deviceOperations_ = 0;
};

}  // namespace adaprec::test
