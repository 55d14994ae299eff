// The CUDA launchers of the device seam's element-wise kernels (elementwise_launch.hpp): the
// functors of elementwise_functors.cuh run by runKernel on the caller's stream, as the CPU stand-in
// (tests/loopback/cpu_device.cpp) runs them through the CPU launchers.
#include <cuda_runtime.h>

#include "elementwise_functors.cuh"
#include "elementwise_launch.hpp"

namespace adaprec::kernels {
namespace {

struct StreamLauncher {
  cudaStream_t stream;
  template <class F>
  void operator()(unsigned grid, unsigned threads, const F& f) const {
    runKernel<F><<<grid, threads, 0, stream>>>(f);
  }
};

template <class F>
int launch(std::size_t count, const F& f, void* stream) {
  launchElementwise(StreamLauncher{static_cast<cudaStream_t>(stream)}, count, f);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launchAddResidual(const float* src, const float* residual, float* out, std::size_t count, void* stream) {
  return launch(count, AddResidual{src, residual, out, count}, stream);
}

int launchUpdateResidual(const float* withResidual, const float* decoded, float* residual, std::size_t count,
                         void* stream) {
  return launch(count, UpdateResidual{withResidual, decoded, residual, count}, stream);
}

int launchAddInto(float* acc, const float* in, std::size_t count, bool saturating, void* stream) {
  return launch(count, AddInto{acc, in, count, saturating}, stream);
}

int launchForgetResidualsOfNonFiniteSums(const float* result, float* residual, std::size_t count, void* stream) {
  return launch(count, ForgetResidualsOfNonFiniteSums{result, residual, count}, stream);
}

int launchDivideBy(float* buf, std::size_t count, float divisor, void* stream) {
  return launch(count, DivideBy{buf, count, divisor}, stream);
}

int launchCanonicalizeNans(float* buf, std::size_t count, void* stream) {
  return launch(count, CanonicalizeNans{buf, count}, stream);
}

}  // namespace adaprec::kernels
