#include "gpu/cuda_caller.hpp"

#include "adaprec/error.hpp"
#include "gpu/cuda_device_codec.hpp"

#if defined(ADAPREC_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace adaprec::detail {

#if defined(ADAPREC_HAVE_CUDA)

namespace {

const char* memoryTypeName(cudaMemoryType type) {
  switch (type) {
    case cudaMemoryTypeUnregistered: return "ordinary host memory";
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeDevice: return "device memory";
    case cudaMemoryTypeManaged: return "managed memory";
  }
  return "memory of an unknown kind";
}

// A buffer of `bytes` bytes at p must be memory the current device's kernels can use.
void checkBuffer(const void* p, const char* what, int device) {
  ADAPREC_CHECK_ARG(p != nullptr, what << " is a null device pointer");
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, p);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky: the call's own launches must not report it
    ADAPREC_FAIL(ErrorCode::kCuda, "CUDA cannot tell what " << what << " points to (cudaPointerGetAttributes: "
                                                            << cudaGetErrorString(status) << ")");
  }
  ADAPREC_CHECK_ARG(attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged,
                    what << " is " << memoryTypeName(attributes.type)
                         << ", not CUDA device memory (AdaPrec_CommAllreduce takes host buffers)");
  ADAPREC_CHECK_ARG(attributes.type == cudaMemoryTypeManaged || attributes.device == device,
                    what << " is memory of CUDA device " << attributes.device << " but the current device is "
                         << device << " (cudaSetDevice(" << attributes.device << ") before the call)");
}

}  // namespace

bool cudaBuilt() { return true; }

void checkCudaCall(void* stream, const void* send, const void* recv, std::size_t bytes) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  ADAPREC_CHECK(status == cudaSuccess && devices > 0, ErrorCode::kCuda,
                "no usable CUDA device (cudaGetDeviceCount: "
                    << (status != cudaSuccess ? cudaGetErrorString(status) : "0 devices") << ")");
  int device = -1;
  status = cudaGetDevice(&device);
  ADAPREC_CHECK(status == cudaSuccess, ErrorCode::kCuda, "cudaGetDevice: " << cudaGetErrorString(status));
  // cudaSuccess or cudaErrorNotReady (work still queued) for a usable stream; anything else is an
  // error of earlier work, which the call's first launch would otherwise report after the round.
  const auto handle = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy;
  status = cudaStreamQuery(handle);
  ADAPREC_CHECK(status == cudaSuccess || status == cudaErrorNotReady, ErrorCode::kCuda,
                "the CUDA stream reports an error (cudaStreamQuery: " << cudaGetErrorString(status) << ")");
  if (bytes == 0) return;
  checkBuffer(recv, "recv", device);
  if (send != nullptr && send != recv) checkBuffer(send, "send", device);
}

std::shared_ptr<DeviceCodec> makeCudaCallerCodec(void* stream) {
  // makeCudaDeviceCodec(null) would create a stream of its own: the caller's null is stream 0.
  return makeCudaDeviceCodec(stream != nullptr ? stream : static_cast<void*>(cudaStreamLegacy));
}

#else

bool cudaBuilt() { return false; }

void checkCudaCall(void*, const void*, const void*, std::size_t) { ADAPREC_FAIL(ErrorCode::kUnsupported, kBuildWithCuda); }

std::shared_ptr<DeviceCodec> makeCudaCallerCodec(void*) { ADAPREC_FAIL(ErrorCode::kUnsupported, kBuildWithCuda); }

#endif

}  // namespace adaprec::detail
