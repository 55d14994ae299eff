// GPU element-wise and block-scaled codecs (API: include/adaprec/gpu_codec.hpp; launchers:
// codec_launch.hpp). One thread per element; for
// fp8s/e4m3 one CUDA block per 4096-element scale block, which reduces the block's finite amax in
// shared memory, so scales need no grid-wide pass and no host round trip.
#include "codec_launch.hpp"

#include <cuda_runtime.h>

#include <cstdint>

#include "adaprec/codec.hpp"
#include "adaprec/detail/scalar_convert.hpp"

namespace adaprec::kernels {
namespace {

using detail::ScaleFactors;
using adaprec::Format;

constexpr int kThreads = 256;
constexpr std::size_t kHeaderBytes = kChunkHeaderBytes;

unsigned scaleBlocks(std::size_t n) { return static_cast<unsigned>((n + kScaleBlock - 1) / kScaleBlock); }

unsigned gridFor(std::size_t count) {
  return static_cast<unsigned>((count + kThreads - 1) / kThreads);
}

// The 16-byte header (docs/formats.md) and zeroed parameter padding, written by one thread.
__global__ void writeHeaderKernel(std::uint8_t* chunk, std::uint8_t formatId, std::uint64_t count,
                                  unsigned usedParams, unsigned params) {
  chunk[0] = 0x41;
  chunk[1] = 0x50;
  chunk[2] = 1;
  chunk[3] = formatId;
  for (int i = 4; i < 8; ++i) chunk[i] = 0;
  for (int i = 0; i < 8; ++i) chunk[8 + i] = static_cast<std::uint8_t>(count >> (8 * i));
  for (unsigned i = usedParams; i < params; ++i) chunk[kHeaderBytes + i] = 0;  // padding only
}

template <class Math>
__global__ void encode16Kernel(const float* src, std::size_t n, std::uint8_t* dst) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t code = Math::encode(src[i]);
  dst[2 * i] = static_cast<std::uint8_t>(code);
  dst[2 * i + 1] = static_cast<std::uint8_t>(code >> 8);
}

template <class Math, bool kAdd>
__global__ void decode16Kernel(const std::uint8_t* src, std::size_t n, float* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = Math::decode(src[2 * i] | (static_cast<std::uint32_t>(src[2 * i + 1]) << 8));
  out[i] = kAdd ? detail::saturatingAdd(out[i], v) : v;  // lossy: docs/formats.md
}

__global__ void copyF32Kernel(const std::uint8_t* src, std::size_t n, float* out, bool add) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  std::uint32_t bits = 0;
  for (int b = 0; b < 4; ++b) bits |= static_cast<std::uint32_t>(src[4 * i + b]) << (8 * b);
  const float v = detail::bitsFloat(bits);
  out[i] = add ? detail::addRn(out[i], v) : v;  // fp32: plain IEEE addition (an overflowing sum is Inf)
}

__global__ void encodeF32Kernel(const float* src, std::size_t n, std::uint8_t* dst) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t bits = detail::floatBits(src[i]);
  for (int b = 0; b < 4; ++b) dst[4 * i + b] = static_cast<std::uint8_t>(bits >> (8 * b));
}

// One CUDA block per scale block (or per kThreads*k elements for the unscaled fp8).
template <class Math, bool kScaled>
__global__ void encode8Kernel(const float* src, std::size_t n, std::uint8_t* exps, std::uint8_t* dst) {
  const std::size_t begin = blockIdx.x * kScaleBlock;
  const std::size_t end = begin + kScaleBlock < n ? begin + kScaleBlock : n;
  ScaleFactors f{1.0f, 1.0f};
  std::uint32_t maxMagnitude = Math::kMaxFinite;
  if (kScaled) {
    __shared__ std::uint32_t amax;
    if (threadIdx.x == 0) amax = 0;
    __syncthreads();
    std::uint32_t local = 0;
    for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const std::uint32_t a = detail::floatBits(src[i]) & detail::kF32AbsMask;
      local = max(local, a < detail::kF32InfBits ? a : 0u);
    }
    atomicMax(&amax, local);
    __syncthreads();
    const int e = Math::scaleExponent(detail::bitsFloat(amax));
    if (threadIdx.x == 0) {
      exps[2 * blockIdx.x] = static_cast<std::uint8_t>(e & 0xff);
      exps[2 * blockIdx.x + 1] = static_cast<std::uint8_t>((e >> 8) & 0xff);
    }
    f = detail::encodeFactors(e);
    // Below the format's largest finite code when amax is near FLT_MAX (docs/formats.md).
    maxMagnitude = Math::maxMagnitudeForScale(e);
  }
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float x = kScaled ? detail::mulRn(detail::mulRn(src[i], f.first), f.second) : src[i];
    dst[i] = static_cast<std::uint8_t>(Math::encode(x, maxMagnitude));
  }
}

template <class Math, bool kScaled, bool kAdd>
__global__ void decode8Kernel(const std::uint8_t* src, std::size_t n, const std::uint8_t* exps, float* out) {
  const std::size_t begin = blockIdx.x * kScaleBlock;
  const std::size_t end = begin + kScaleBlock < n ? begin + kScaleBlock : n;
  ScaleFactors g{1.0f, 1.0f};
  if (kScaled) {
    const auto e = static_cast<std::int16_t>(exps[2 * blockIdx.x] | (exps[2 * blockIdx.x + 1] << 8));
    g = detail::decodeFactors(e);
  }
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float v = Math::decode(src[i]);
    if (kScaled) v = detail::mulRn(detail::mulRn(v, g.first), g.second);
    out[i] = kAdd ? detail::saturatingAdd(out[i], v) : v;
  }
}

}  // namespace

int deviceCount() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess ? devices : 0;
}

int launchDecode(std::uint8_t formatId, const void* chunk, float* out, std::size_t n, std::size_t paramsBytes,
                 bool add, void* stream) {
  const auto format = static_cast<Format>(formatId);
  auto s = static_cast<cudaStream_t>(stream);
  const auto* base = static_cast<const std::uint8_t*>(chunk);
  const std::uint8_t* params = base + kHeaderBytes;
  const std::uint8_t* payload = params + paramsBytes;
  if (n == 0) return cudaSuccess;
  const unsigned grid = gridFor(n), blocks = scaleBlocks(n);
  switch (format) {
    case Format::kFp32: copyF32Kernel<<<grid, kThreads, 0, s>>>(payload, n, out, add); break;
    case Format::kBf16:
      add ? decode16Kernel<detail::Bf16Math, true><<<grid, kThreads, 0, s>>>(payload, n, out)
          : decode16Kernel<detail::Bf16Math, false><<<grid, kThreads, 0, s>>>(payload, n, out);
      break;
    case Format::kFp16:
      add ? decode16Kernel<detail::Fp16Math, true><<<grid, kThreads, 0, s>>>(payload, n, out)
          : decode16Kernel<detail::Fp16Math, false><<<grid, kThreads, 0, s>>>(payload, n, out);
      break;
    case Format::kFp8:
      add ? decode8Kernel<detail::Fp8Math, false, true><<<blocks, kThreads, 0, s>>>(payload, n, nullptr, out)
          : decode8Kernel<detail::Fp8Math, false, false><<<blocks, kThreads, 0, s>>>(payload, n, nullptr, out);
      break;
    case Format::kFp8s:
      add ? decode8Kernel<detail::Fp8Math, true, true><<<blocks, kThreads, 0, s>>>(payload, n, params, out)
          : decode8Kernel<detail::Fp8Math, true, false><<<blocks, kThreads, 0, s>>>(payload, n, params, out);
      break;
    case Format::kE4m3:
      add ? decode8Kernel<detail::E4m3Math, true, true><<<blocks, kThreads, 0, s>>>(payload, n, params, out)
          : decode8Kernel<detail::E4m3Math, true, false><<<blocks, kThreads, 0, s>>>(payload, n, params, out);
      break;
    default: return kLaunchUnsupported;
  }
  return cudaGetLastError();
}

int launchEncode(std::uint8_t formatId, const float* src, std::size_t n, void* chunk, std::size_t paramsBytes,
                 void* stream) {
  const auto format = static_cast<Format>(formatId);
  const bool scaled = format == Format::kFp8s || format == Format::kE4m3;
  const bool supported = format == Format::kFp32 || format == Format::kBf16 || format == Format::kFp16 ||
                         format == Format::kFp8 || scaled;
  if (!supported) return kLaunchUnsupported;
  auto s = static_cast<cudaStream_t>(stream);
  auto* base = static_cast<std::uint8_t*>(chunk);
  const unsigned usedParams = scaled ? 2 * scaleBlocks(n) : 0;
  writeHeaderKernel<<<1, 1, 0, s>>>(base, formatId, n, usedParams, static_cast<unsigned>(paramsBytes));
  std::uint8_t* params = base + kHeaderBytes;
  std::uint8_t* payload = params + paramsBytes;
  const unsigned grid = gridFor(n), blocks = scaleBlocks(n);
  if (n != 0) {
    switch (format) {
      case Format::kFp32: encodeF32Kernel<<<grid, kThreads, 0, s>>>(src, n, payload); break;
      case Format::kBf16: encode16Kernel<detail::Bf16Math><<<grid, kThreads, 0, s>>>(src, n, payload); break;
      case Format::kFp16: encode16Kernel<detail::Fp16Math><<<grid, kThreads, 0, s>>>(src, n, payload); break;
      case Format::kFp8: encode8Kernel<detail::Fp8Math, false><<<blocks, kThreads, 0, s>>>(src, n, nullptr, payload); break;
      case Format::kFp8s: encode8Kernel<detail::Fp8Math, true><<<blocks, kThreads, 0, s>>>(src, n, params, payload); break;
      default: encode8Kernel<detail::E4m3Math, true><<<blocks, kThreads, 0, s>>>(src, n, params, payload); break;
    }
  }
  return cudaGetLastError();
}

}  // namespace adaprec::kernels
