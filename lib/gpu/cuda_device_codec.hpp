// The CUDA implementation of the device seam (lib/algorithm/device_codec.hpp): buffers in CUDA device
// memory, every operation queued on one CUDA stream (kernels of libadaprec_cuda, cudaMemcpyAsync,
// stream-ordered cudaMallocAsync/cudaFreeAsync), synchronize() = cudaStreamSynchronize. Give it to
// Communicator::setDevice to allreduce device buffers. A build without CUDA throws kUnsupported.
#pragma once

#include <memory>

#include "algorithm/device_codec.hpp"

namespace adaprec::detail {

// The current CUDA device; `stream` is a cudaStream_t the caller keeps alive, or null for a stream
// of its own (non-blocking, destroyed with it).
std::shared_ptr<DeviceCodec> makeCudaDeviceCodec(void* stream = nullptr);

}  // namespace adaprec::detail
