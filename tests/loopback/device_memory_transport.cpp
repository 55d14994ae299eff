#include "device_memory_transport.hpp"

#include <utility>

namespace adaprec::test {
namespace {

std::size_t elementBytes(NativeType type) { return type == NativeType::kFp32 ? 4 : 2; }

}  // namespace

DeviceMemoryTransport::DeviceMemoryTransport(std::shared_ptr<Transport> inner, CpuStandInDevice& device,
                                             std::shared_ptr<std::atomic<std::size_t>> deviceMessages)
    : inner_(std::move(inner)),
      device_(device),
      deviceMessages_(deviceMessages ? std::move(deviceMessages) : std::make_shared<std::atomic<std::size_t>>(0)) {}

void* DeviceMemoryTransport::view(const void* p, std::size_t bytes, const char* what) {
  if (bytes == 0 || !device_.owns(p)) return const_cast<void*>(p);
  ++*deviceMessages_;
  return device_.transportAddress(p, bytes, what);
}

RequestPtr DeviceMemoryTransport::isend(int peer, const void* data, std::size_t bytes, int tag) {
  return inner_->isend(peer, view(data, bytes, "isend"), bytes, tag);
}

RequestPtr DeviceMemoryTransport::irecv(int peer, void* data, std::size_t capacityBytes, int tag) {
  return inner_->irecv(peer, view(data, capacityBytes, "irecv"), capacityBytes, tag);
}

void DeviceMemoryTransport::nativeAllreduce(void* recv, std::size_t count, NativeType type) {
  inner_->nativeAllreduce(view(recv, count * elementBytes(type), "nativeAllreduce"), count, type);
}

void DeviceMemoryTransport::nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                                      NativeType type) {
  const std::size_t bytes = count * elementBytes(type);
  inner_->nativeAllreduceOutOfPlace(view(send, bytes, "nativeAllreduce send"),
                                    view(recv, bytes, "nativeAllreduce recv"), count, type);
}

std::unique_ptr<Transport> DeviceMemoryTransport::split(int color, int key) {
  return std::make_unique<DeviceMemoryTransport>(std::shared_ptr<Transport>(inner_->split(color, key)), device_,
                                                 deviceMessages_);
}

}  // namespace adaprec::test

namespace adaprec::test {
namespace {

class ProbedRequest final : public Request {
 public:
  ProbedRequest(RequestPtr inner, CpuStandInDevice& device, std::atomic<std::size_t>& overlapped)
      : inner_(std::move(inner)), device_(device), overlapped_(overlapped) {}
  std::size_t wait() override {
    if (device_.queued() > 0) ++overlapped_;
    return inner_->wait();
  }
  bool done() const override { return inner_->done(); }

 private:
  RequestPtr inner_;
  CpuStandInDevice& device_;
  std::atomic<std::size_t>& overlapped_;
};

}  // namespace

QueueProbeTransport::QueueProbeTransport(std::shared_ptr<Transport> inner, CpuStandInDevice& device,
                                         std::shared_ptr<std::atomic<std::size_t>> overlapped)
    : inner_(std::move(inner)),
      device_(device),
      overlapped_(overlapped ? std::move(overlapped) : std::make_shared<std::atomic<std::size_t>>(0)) {}

RequestPtr QueueProbeTransport::probe(RequestPtr inner) {
  return std::make_unique<ProbedRequest>(std::move(inner), device_, *overlapped_);
}

RequestPtr QueueProbeTransport::isend(int peer, const void* data, std::size_t bytes, int tag) {
  return probe(inner_->isend(peer, data, bytes, tag));
}

RequestPtr QueueProbeTransport::irecv(int peer, void* data, std::size_t capacityBytes, int tag) {
  return probe(inner_->irecv(peer, data, capacityBytes, tag));
}

std::unique_ptr<Transport> QueueProbeTransport::split(int color, int key) {
  return std::make_unique<QueueProbeTransport>(std::shared_ptr<Transport>(inner_->split(color, key)), device_,
                                               overlapped_);
}

}  // namespace adaprec::test
