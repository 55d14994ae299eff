// The element-wise kernels of the device seam (lib/algorithm/device_codec.hpp) besides the codec:
// error feedback's residual add and update, hierarchical's fp32 node sum, the averaging. Host/device
// functors like the codec's (execution_context.cuh): the CUDA implementation of the seam launches
// them on its stream (elementwise_kernels.cu), the CPU stand-in of a device (tests/loopback) through
// the CPU launchers. The arithmetic is the host path's (lib/algorithm/host_device_codec.cpp), so the
// results are bit-identical: IEEE round-to-nearest add, subtract and divide (nvcc: --fmad=false,
// IEEE division by default), detail::saturatingAdd where the host saturates.
#pragma once

#include <cstddef>

#include "codec_functors.cuh"  // NoShared, globalThread(s)

namespace adaprec::kernels {

// out[i] = saturatingAdd(src[i], residual[i]): the value error feedback encodes.
struct AddResidual {
  using Shared = NoShared;
  const float* src;
  const float* residual;
  float* out;
  std::size_t count;
  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    for (std::size_t i = globalThread(ctx); i < count; i += globalThreads(ctx))
      out[i] = detail::saturatingAdd(src[i], residual[i]);
  }
};

// residual[i] = withResidual[i] - decoded[i]: the new quantization error (0 where not finite:
// detail::feedbackResidual, the host path's).
struct UpdateResidual {
  using Shared = NoShared;
  const float* withResidual;
  const float* decoded;
  float* residual;
  std::size_t count;
  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    for (std::size_t i = globalThread(ctx); i < count; i += globalThreads(ctx))
      residual[i] = detail::feedbackResidual(withResidual[i], decoded[i]);
  }
};

// residual[i] = residualAfterSum(result[i], residual[i]): 0 where the allreduce's result is not finite.
struct ForgetResidualsOfNonFiniteSums {
  using Shared = NoShared;
  const float* result;
  float* residual;
  std::size_t count;
  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    for (std::size_t i = globalThread(ctx); i < count; i += globalThreads(ctx))
      residual[i] = detail::residualAfterSum(result[i], residual[i]);
  }
};

// acc[i] += in[i] (saturatingAdd when `saturating`).
struct AddInto {
  using Shared = NoShared;
  float* acc;
  const float* in;
  std::size_t count;
  bool saturating;
  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    for (std::size_t i = globalThread(ctx); i < count; i += globalThreads(ctx))
      acc[i] = saturating ? detail::saturatingAdd(acc[i], in[i]) : detail::addRn(acc[i], in[i]);
  }
};

// buf[i] /= divisor.
struct DivideBy {
  using Shared = NoShared;
  float* buf;
  std::size_t count;
  float divisor;
  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    for (std::size_t i = globalThread(ctx); i < count; i += globalThreads(ctx)) buf[i] = buf[i] / divisor;
  }
};

// buf[i] = canonicalNan(buf[i]): every NaN the default quiet NaN.
struct CanonicalizeNans {
  using Shared = NoShared;
  float* buf;
  std::size_t count;
  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    for (std::size_t i = globalThread(ctx); i < count; i += globalThreads(ctx)) buf[i] = detail::canonicalNan(buf[i]);
  }
};

// Launches an element-wise functor over `count` elements (nothing for 0) with any launcher.
template <class Launch, class F>
void launchElementwise(Launch&& launch, std::size_t count, const F& f, unsigned threads = 256) {
  if (count == 0) return;
  const std::size_t blocks = (count + threads - 1) / threads;
  launch(blocks < 65535 ? static_cast<unsigned>(blocks) : 65535u, threads, f);
}

}  // namespace adaprec::kernels
