#include "cpu_device.hpp"

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "adaprec/error.hpp"
#include "codec/chunk_header.hpp"
#include "codec_dispatch.cuh"
#include "cpu_launch.hpp"
#include "elementwise_functors.cuh"

namespace adaprec::test {
namespace {

constexpr unsigned char kGarbage = 0xa5;  // fresh device memory: every float a NaN-free odd pattern
// cudaMalloc's granule: allocations start 256-byte aligned and own whole granules, so a kernel may read
// (never write) the rest of the aligned word at either end of a chunk (docs/gpu.md, "Whole-word
// writes"). The checks of operands still use the size asked for.
constexpr std::size_t kGranule = 256;

std::byte* granules(std::size_t bytes) {
  const std::size_t rounded = (bytes + kGranule - 1) / kGranule * kGranule;
  return static_cast<std::byte*>(::operator new(rounded, std::align_val_t{kGranule}));
}
void freeGranules(std::byte* p) { ::operator delete(p, std::align_val_t{kGranule}); }

// Device addresses are host addresses with bit 62 set: non-canonical on x86-64 (and outside any
// 48/57-bit address space elsewhere), so the host dereferencing a device pointer faults at once, as
// with cudaMalloc'd memory, instead of quietly reading memory that happens to be host memory here.
// Pointer arithmetic on them works; only the stand-in's own operations translate them back.
constexpr std::uintptr_t kDeviceTag = std::uintptr_t{1} << 62;
template <class T>
T* tag(T* p) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(p) ^ kDeviceTag);
}
template <class T>
T* real(T* p) {
  return tag(p);  // the same involution
}

}  // namespace

CpuStandInDevice::~CpuStandInDevice() {
  drain();
  for (auto& [start, bytes] : allocations_) freeGranules(real(const_cast<std::byte*>(start)));
  for (auto& [start, bytes] : hostAllocations_) ::operator delete(const_cast<std::byte*>(start));
}

void CpuStandInDevice::requireDevice(const void* p, std::size_t bytes, const char* what) const {
  if (bytes == 0) return;
  const auto* b = static_cast<const std::byte*>(p);
  auto it = allocations_.upper_bound(b);
  const bool inside = it != allocations_.begin() && (--it, b >= it->first && b + bytes <= it->first + it->second);
  ADAPREC_CHECK(inside, ErrorCode::kInternal,
                "CPU device stand-in: " << what << " got " << bytes << " bytes at " << p
                                        << ", not inside a live device allocation");
}

void CpuStandInDevice::requireHost(const void* p, std::size_t bytes, const char* what) const {
  if (bytes == 0) return;
  const auto* b = static_cast<const std::byte*>(p);
  auto it = allocations_.lower_bound(b + bytes);  // first allocation starting at or past the end
  const bool overlaps = it != allocations_.begin() && (--it, it->first + it->second > b);
  ADAPREC_CHECK(!overlaps, ErrorCode::kInternal,
                "CPU device stand-in: " << what << " got device memory where host memory belongs");
}

void CpuStandInDevice::launchEncode(Format format, const float* src, std::size_t n, std::byte* chunk) const {
  const codec::ChunkLayout layout = codec::chunkLayout(format, n);
  const auto id = static_cast<std::uint8_t>(format);
  int status;
  if (threadsPerBlock_ == 0) {
    status = kernels::dispatchEncode(kernels::SerialLauncher{}, id, src, n, chunk, layout.paramsBytes);
  } else {
    kernels::LaunchShape shape;
    shape.threads = threadsPerBlock_;
    status = kernels::dispatchEncode(kernels::ThreadedLauncher{}, id, src, n, chunk, layout.paramsBytes, shape);
  }
  ADAPREC_CHECK(status == 0, ErrorCode::kUnsupported, "no kernel encodes " << formatName(format));
}

void CpuStandInDevice::launchDecode(Format format, const std::byte* chunk, float* out, std::size_t n,
                                    bool add) const {
  const codec::ChunkLayout layout = codec::chunkLayout(format, n);
  const auto id = static_cast<std::uint8_t>(format);
  int status;
  if (threadsPerBlock_ == 0) {
    status = kernels::dispatchDecode(kernels::SerialLauncher{}, id, chunk, out, n, layout.paramsBytes, add);
  } else {
    kernels::LaunchShape shape;
    shape.threads = threadsPerBlock_;
    status = kernels::dispatchDecode(kernels::ThreadedLauncher{}, id, chunk, out, n, layout.paramsBytes, add, shape);
  }
  ADAPREC_CHECK(status == 0, ErrorCode::kUnsupported, "no kernel decodes " << formatName(format));
}

template <class F>
void CpuStandInDevice::runElementwise(std::size_t n, const F& f) const {
  if (threadsPerBlock_ == 0) {
    kernels::launchElementwise(kernels::SerialLauncher{}, n, f);
  } else {
    kernels::launchElementwise(kernels::ThreadedLauncher{}, n, f, threadsPerBlock_);
  }
}

void CpuStandInDevice::encode(Format format, const float* src, std::size_t n, std::byte* chunk,
                              std::size_t bytes) {
  ADAPREC_CHECK(bytes == codec::chunkLayout(format, n).totalBytes, ErrorCode::kInternal,
                "CPU device stand-in: encode of " << n << " elements into " << bytes << " bytes");
  requireDevice(src, n * sizeof(float), "encode source");
  requireDevice(chunk, bytes, "encode chunk");
  enqueue([=, this] { launchEncode(format, real(src), n, real(chunk)); });
}

void CpuStandInDevice::encodeWithResidual(Format format, const float* src, float* residual, std::size_t n,
                                          std::byte* chunk, std::size_t bytes) {
  ADAPREC_CHECK(bytes == codec::chunkLayout(format, n).totalBytes, ErrorCode::kInternal,
                "CPU device stand-in: encode of " << n << " elements into " << bytes << " bytes");
  requireDevice(src, n * sizeof(float), "encode source");
  requireDevice(residual, n * sizeof(float), "residual");
  requireDevice(chunk, bytes, "encode chunk");
  enqueue([=, this] {
    std::vector<float> withResidual(n);  // the CUDA implementation's device scratch
    std::vector<float> decoded(n);
    runElementwise(n, kernels::AddResidual{real(src), real(residual), withResidual.data(), n});
    launchEncode(format, withResidual.data(), n, real(chunk));
    launchDecode(format, real(chunk), decoded.data(), n, false);
    runElementwise(n, kernels::UpdateResidual{withResidual.data(), decoded.data(), real(residual), n});
  });
}

void CpuStandInDevice::decode(Format format, const std::byte* chunk, std::size_t bytes, float* dst,
                              std::size_t n) {
  requireDevice(chunk, bytes, "decode chunk");
  requireDevice(dst, n * sizeof(float), "decode output");
  enqueue([=, this] { launchDecode(format, real(chunk), real(dst), n, false); });
}

void CpuStandInDevice::decodeAdd(Format format, const std::byte* chunk, std::size_t bytes, float* acc,
                                 std::size_t n) {
  requireDevice(chunk, bytes, "decodeAdd chunk");
  requireDevice(acc, n * sizeof(float), "decodeAdd accumulator");
  enqueue([=, this] { launchDecode(format, real(chunk), real(acc), n, true); });
}

void CpuStandInDevice::add(float* acc, const float* in, std::size_t n, bool saturating) {
  requireDevice(acc, n * sizeof(float), "add accumulator");
  requireDevice(in, n * sizeof(float), "add input");
  enqueue([=, this] { runElementwise(n, kernels::AddInto{real(acc), real(in), n, saturating}); });
}

void CpuStandInDevice::forgetResidualsOfNonFiniteSums(const float* result, float* residual, std::size_t n) {
  requireDevice(result, n * sizeof(float), "forgetResidualsOfNonFiniteSums result");
  requireDevice(residual, n * sizeof(float), "forgetResidualsOfNonFiniteSums residual");
  enqueue([=, this] {
    runElementwise(n, kernels::ForgetResidualsOfNonFiniteSums{real(result), real(residual), n});
  });
}

void CpuStandInDevice::divide(float* buf, std::size_t n, float divisor) {
  requireDevice(buf, n * sizeof(float), "divide buffer");
  enqueue([=, this] { runElementwise(n, kernels::DivideBy{real(buf), n, divisor}); });
}

void CpuStandInDevice::canonicalizeNans(float* buf, std::size_t n) {
  requireDevice(buf, n * sizeof(float), "canonicalizeNans buffer");
  enqueue([=, this] { runElementwise(n, kernels::CanonicalizeNans{real(buf), n}); });
}

void* CpuStandInDevice::allocate(std::size_t bytes) {
  ADAPREC_CHECK(!failAllocations_, ErrorCode::kCuda, "out of memory (the stand-in's failAllocations hook)");
  const std::size_t size = bytes == 0 ? 1 : bytes;
  std::byte* p = granules(size);
  std::memset(p, kGarbage, (size + kGranule - 1) / kGranule * kGranule);
  allocations_.emplace(tag(p), size);
  return tag(p);
}

void CpuStandInDevice::release(void* device) {
  if (device == nullptr) return;
  auto it = allocations_.find(static_cast<const std::byte*>(device));
  ADAPREC_CHECK(it != allocations_.end(), ErrorCode::kInternal, "CPU device stand-in: release of " << device
                                                                   << ", not a live allocation");
  allocations_.erase(it);  // no later operation may use it; queued ones still may
  enqueue([p = real(static_cast<std::byte*>(device))] { freeGranules(p); });
}

void CpuStandInDevice::fillZero(void* device, std::size_t bytes) {
  if (bytes == 0) return;  // nothing to do (and memcpy takes no null pointer)
  requireDevice(device, bytes, "fillZero");
  enqueue([=] { std::memset(real(device), 0, bytes); });
}

void CpuStandInDevice::copyToHost(void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;  // nothing to do (and memcpy takes no null pointer)
  requireHost(host, bytes, "copyToHost destination");
  requireDevice(device, bytes, "copyToHost source");
  countCopy(host, bytes);
  enqueue([=] { std::memcpy(host, real(device), bytes); });
}

void CpuStandInDevice::copyToDevice(void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;  // nothing to do (and memcpy takes no null pointer)
  requireDevice(device, bytes, "copyToDevice destination");
  requireHost(host, bytes, "copyToDevice source");
  countCopy(host, bytes);
  enqueue([=] { std::memcpy(real(device), host, bytes); });
}

bool CpuStandInDevice::owns(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  auto it = allocations_.upper_bound(b);
  return it != allocations_.begin() && (--it, b >= it->first && b < it->first + it->second);
}

void* CpuStandInDevice::transportAddress(const void* p, std::size_t bytes, const char* what) const {
  requireDevice(p, bytes, what);
  ADAPREC_CHECK(queue_.empty(), ErrorCode::kInternal,
                "CPU device stand-in: " << what << " got device memory while " << queue_.size()
                                        << " operation(s) were still queued on its stream (synchronize first)");
  return const_cast<void*>(static_cast<const void*>(real(static_cast<const std::byte*>(p))));
}

void CpuStandInDevice::copyOnDevice(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;  // nothing to do (and memcpy takes no null pointer)
  requireDevice(dst, bytes, "copyOnDevice destination");
  requireDevice(src, bytes, "copyOnDevice source");
  enqueue([=] { std::memmove(real(dst), real(src), bytes); });
}

void CpuStandInDevice::synchronize() {
  if (synchronizations_++ == skip_) return;
  drain();
}

std::uint64_t CpuStandInDevice::mark() {
  const std::uint64_t ticket = ++lastTicket_;
  enqueue([this, ticket] { reachedTicket_ = ticket; });
  return ticket;
}

void CpuStandInDevice::waitFor(std::uint64_t ticket) {
  if (synchronizations_++ == skip_) return;
  while (reachedTicket_ < ticket && !queue_.empty()) {
    std::function<void()> op = std::move(queue_.front());
    queue_.pop_front();
    op();
  }
}

void* CpuStandInDevice::allocateHost(std::size_t bytes) {
  auto* p = static_cast<std::byte*>(::operator new(bytes == 0 ? 1 : bytes));
  hostAllocations_.emplace(p, bytes == 0 ? 1 : bytes);
  return p;
}

void CpuStandInDevice::releaseHost(void* host) {
  if (host == nullptr) return;
  auto it = hostAllocations_.find(static_cast<const std::byte*>(host));
  ADAPREC_CHECK(it != hostAllocations_.end(), ErrorCode::kInternal,
                "CPU device stand-in: releaseHost of " << host << ", not from allocateHost");
  drain();  // cudaFreeHost synchronizes the device first: a queued copy may still use the memory
  hostAllocations_.erase(it);
  ::operator delete(host);
}

bool CpuStandInDevice::pinned(const void* p, std::size_t bytes) const {
  const auto* b = static_cast<const std::byte*>(p);
  auto it = hostAllocations_.upper_bound(b);
  return it != hostAllocations_.begin() && (--it, b >= it->first && b + bytes <= it->first + it->second);
}

void CpuStandInDevice::countCopy(const void* host, std::size_t bytes) {
  hostDeviceCopyBytes_ += bytes;
  if (!pinned(host, bytes)) pageableCopyBytes_ += bytes;
}

void CpuStandInDevice::drain() {
  while (!queue_.empty()) {
    std::function<void()> op = std::move(queue_.front());
    queue_.pop_front();
    op();
  }
}

}  // namespace adaprec::test
