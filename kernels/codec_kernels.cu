// The CUDA launchers of the codec kernels (API: include/adaprec/gpu_codec.hpp via lib/gpu; boundary:
// codec_launch.hpp). The kernel bodies are the host/device functors of codec_functors.cuh, chosen by
// codec_dispatch.cuh, and run here by runKernel (execution_context.cuh) on the caller's stream. The
// CPU tests (tests/kernels) run the same functors through kernels/cpu_launch.hpp.
#include <cuda_runtime.h>

#include "codec_dispatch.cuh"
#include "codec_launch.hpp"

namespace adaprec::kernels {
namespace {

// launch(grid, threads, functor) on one stream, for the dispatchers.
struct StreamLauncher {
  cudaStream_t stream;
  template <class F>
  void operator()(unsigned grid, unsigned threads, const F& f) const {
    runKernel<F><<<grid, threads, 0, stream>>>(f);
  }
};

}  // namespace

int deviceCount() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess ? devices : 0;
}

int launchEncode(std::uint8_t formatId, const float* src, std::size_t count, void* chunk, std::size_t paramsBytes,
                 void* stream) {
  const int status =
      dispatchEncode(StreamLauncher{static_cast<cudaStream_t>(stream)}, formatId, src, count, chunk, paramsBytes);
  return status != 0 ? status : static_cast<int>(cudaGetLastError());
}

int launchDecode(std::uint8_t formatId, const void* chunk, float* out, std::size_t count, std::size_t paramsBytes,
                 bool add, void* stream) {
  const int status =
      dispatchDecode(StreamLauncher{static_cast<cudaStream_t>(stream)}, formatId, chunk, out, count, paramsBytes, add);
  return status != 0 ? status : static_cast<int>(cudaGetLastError());
}

}  // namespace adaprec::kernels
