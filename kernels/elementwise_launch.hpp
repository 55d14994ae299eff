// CUDA launchers of the element-wise kernels of the device seam (elementwise_functors.cuh), for
// lib/gpu/cuda_device_codec.cpp. Like codec_launch.hpp: plain values in, a cudaError_t as int out.
#pragma once

#include <cstddef>

namespace adaprec::kernels {

int launchAddResidual(const float* src, const float* residual, float* out, std::size_t count, void* stream);
int launchUpdateResidual(const float* withResidual, const float* decoded, float* residual, std::size_t count,
                         void* stream);
int launchAddInto(float* acc, const float* in, std::size_t count, bool saturating, void* stream);
int launchForgetResidualsOfNonFiniteSums(const float* result, float* residual, std::size_t count, void* stream);
int launchDivideBy(float* buf, std::size_t count, float divisor, void* stream);
int launchCanonicalizeNans(float* buf, std::size_t count, void* stream);

}  // namespace adaprec::kernels
