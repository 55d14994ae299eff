// GPU codecs (built with -Dcuda=enabled/auto when nvcc is present) for every wire format (fp32, bf16,
// fp16, fp8, fp8s, e4m3, table1..table8, table3z..table8z), on the same scalar math as the host
// reference (include/adaprec/detail/scalar_convert.hpp, table_spec.hpp), so a chunk encoded here is
// byte-identical to adaprec::encode's (docs/gpu.md). In a build without CUDA these calls throw
// Error(kUnsupported).
//
// All buffers are device pointers; every call is stream-ordered on `stream` (a cudaStream_t, nullptr
// = the default stream), allocates nothing and can be captured in a CUDA graph. Decoders trust the
// chunk: validate chunks of unknown origin on the host with adaprec::inspectChunk first.
#pragma once

#include <cstddef>

#include "adaprec/format.hpp"

namespace adaprec::gpu {

// Whether this build has the CUDA kernels and this process sees at least one CUDA device.
bool deviceAvailable();

void encode(Format format, const float* src, std::size_t count, void* chunk, void* stream);
void decode(Format format, const void* chunk, float* dst, std::size_t count, void* stream);
void decodeAdd(Format format, const void* chunk, float* acc, std::size_t count, void* stream);

}  // namespace adaprec::gpu
