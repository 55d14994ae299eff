// Launchers of the GPU codec kernels: the boundary between libadaprec_cuda (nvcc) and libadaprec.
// They take plain values and return a cudaError_t as int (kLaunchUnsupported for a format without
// a kernel), so the CUDA library depends on nothing but cudart; lib/gpu/gpu_codec.cpp turns results
// into adaprec::Error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace adaprec::kernels {

inline constexpr int kLaunchUnsupported = -1;

int deviceCount();
// chunk layout as computed by the host (lib/codec/chunk_header): parameter section size and how much
// of it the scales use; the launcher writes header, scales, padding and payload.
int launchEncode(std::uint8_t formatId, const float* src, std::size_t count, void* chunk, std::size_t paramsBytes,
                 void* stream);
int launchDecode(std::uint8_t formatId, const void* chunk, float* out, std::size_t count, std::size_t paramsBytes,
                 bool add, void* stream);

}  // namespace adaprec::kernels
