// adaprec-bench --device cuda --transport nccl: the second baseline, NCCL's own fp8 allreduce. Each
// call converts the fp32 send buffer to e5m2 on the device, runs ncclAllReduce(ncclFloat8e5m2, ncclSum)
// and converts the result back to fp32, all on the NCCL stream; the row times the three together.
// NCCL's fp8 sum rounds to e5m2 after every addition and saturates (lib/transport/nccl_fake.cpp).
// The kernels (nccl_fp8_cuda.cu) are compiled by nvcc in a -Dcuda=enabled build only;
// nccl_fp8_none.cpp stands in for them otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace adaprec::bench {

// Why the current device cannot run the fp8 baseline, "" when it can: this build's nccl.h predates
// ncclFloat8e5m2 (NCCL 2.24), or the device is below sm_90 (NCCL refuses fp8 reductions there:
// "FP8 reduction support begins with sm90 capable devices").
std::string ncclFp8Unsupported();

// Queued on `stream` (a cudaStream_t): dst[i] = src[i] in e5m2, rounded to nearest even and saturated
// at +-57344 (__NV_SATFINITE, as NCCL narrows its sums; the library's fp8 gives ±Inf beyond its range), and back (exact). Throw
// Error(kCuda) when the launch fails.
void floatToE5m2(const float* src, std::uint8_t* dst, std::size_t count, void* stream);
void e5m2ToFloat(const std::uint8_t* src, float* dst, std::size_t count, void* stream);

}  // namespace adaprec::bench
