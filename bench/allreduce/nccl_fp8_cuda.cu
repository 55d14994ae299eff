// nccl_fp8.hpp in a -Dcuda=enabled build: the e5m2 conversions of the fp8 baseline, and whether NCCL
// and the device support it.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#if defined(ADAPREC_HAVE_NCCL)
#include <nccl.h>
#endif

#include "adaprec/error.hpp"
#include "nccl_fp8.hpp"

namespace adaprec::bench {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 4096;  // grid-stride loops beyond

// __NV_SATFINITE, not __NV_NOSAT: a finite value beyond 57344 saturates instead of becoming Inf, as
// NCCL narrows every partial sum. For the benchmark's data (finite, far below 57344) the baseline's
// one input rounding is then the one AdaPrec's fp8 rows make, and the rows differ only in how the sum
// is formed. (They differ beyond fp8's range, where the library's fp8 gives ±Inf: docs/formats.md.)
__global__ void toE5m2Kernel(const float* src, __nv_fp8_storage_t* dst, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = __nv_cvt_float_to_fp8(src[i], __NV_SATFINITE, __NV_E5M2);
}

// Exact: every e5m2 value is an fp16 value is an fp32 value.
__global__ void fromE5m2Kernel(const __nv_fp8_storage_t* src, float* dst, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(src[i], __NV_E5M2)));
}

unsigned blocksFor(std::size_t count) {
  return static_cast<unsigned>(std::clamp<std::size_t>((count + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

void checkLaunch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  ADAPREC_CHECK(status == cudaSuccess, ErrorCode::kCuda, "CUDA " << kernel << ": " << cudaGetErrorString(status));
}

}  // namespace

std::string ncclFp8Unsupported() {
#if !defined(ADAPREC_HAVE_NCCL)
  return "this build has no NCCL";
#elif NCCL_VERSION_CODE < NCCL_VERSION(2, 24, 0)
  return "needs NCCL >= 2.24 (ncclFloat8e5m2); this build's nccl.h is " + std::to_string(NCCL_MAJOR) + "." +
         std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#else
  int device = 0;
  int major = 0;
  int minor = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (status != cudaSuccess) return std::string("compute capability unknown: ") + cudaGetErrorString(status);
  if (major < 9) {
    return "needs sm_90 or newer (NCCL's fp8 reductions); device " + std::to_string(device) + " is sm_" +
           std::to_string(major) + std::to_string(minor);
  }
  return "";
#endif
}

void floatToE5m2(const float* src, std::uint8_t* dst, std::size_t count, void* stream) {
  if (count == 0) return;
  toE5m2Kernel<<<blocksFor(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      src, reinterpret_cast<__nv_fp8_storage_t*>(dst), count);
  checkLaunch("fp32 -> e5m2 kernel");
}

void e5m2ToFloat(const std::uint8_t* src, float* dst, std::size_t count, void* stream) {
  if (count == 0) return;
  fromE5m2Kernel<<<blocksFor(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_fp8_storage_t*>(src), dst, count);
  checkLaunch("e5m2 -> fp32 kernel");
}

}  // namespace adaprec::bench
