// Format -> kernel functor and launch shape, for any launcher with the signature
// launch(grid, threads, functor): the CUDA stream launcher (codec_kernels.cu) and the CPU launchers
// (cpu_launch.hpp) run the same choices, so the tests cover the dispatch too. Host code (nvcc's host
// pass or g++).
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/format.hpp"
#include "codec_functors.cuh"
#include "table_functors.cuh"
#include "codec_launch.hpp"  // kLaunchUnsupported

namespace adaprec::kernels {

struct LaunchShape {
  unsigned threads = 256;      // threads per block, 1..kMaxThreadsPerBlock
  unsigned maxBlocks = 65535;  // grid cap; the kernels stride over the rest
};

inline unsigned gridFor(std::size_t work, std::size_t perBlock, const LaunchShape& shape) {
  const std::size_t blocks = (work + perBlock - 1) / perBlock;
  if (blocks == 0) return 1;  // an encoder still writes the header
  return blocks < shape.maxBlocks ? static_cast<unsigned>(blocks) : shape.maxBlocks;
}

// N of tableN/tableNz from the format id (docs/formats.md: ids 11..18 and 23..28), 0 otherwise; the
// header-only kernels do not link lib/codec/format.cpp.
inline unsigned tableBitsOf(std::uint8_t formatId) {
  if (formatId >= 11 && formatId <= 18) return formatId - 10u;
  if (formatId >= 23 && formatId <= 28) return formatId - 20u;
  return 0;
}
inline bool tableHasZeroCode(std::uint8_t formatId) { return formatId >= 23 && formatId <= 28; }

inline std::size_t scaleBlockCount(std::size_t count) { return (count + kScaleBlock - 1) / kScaleBlock; }

template <class Code, class Launch>
void launchEncodeElementwise(Launch& launch, std::uint8_t formatId, const float* src, std::size_t count,
                             std::uint8_t* chunk, std::size_t paramsBytes, const LaunchShape& shape) {
  const std::size_t words = (count * Code::kBytes + 3) / 4 + 1;  // + 1: an unaligned payload spans one more
  launch(gridFor(words, shape.threads, shape), shape.threads,
         EncodeElementwise<Code>{src, count, chunk, paramsBytes, formatId});
}

template <class Math, class Launch>
void launchEncodeScaled(Launch& launch, std::uint8_t formatId, const float* src, std::size_t count,
                        std::uint8_t* chunk, std::size_t paramsBytes, const LaunchShape& shape) {
  launch(gridFor(scaleBlockCount(count), 1, shape), shape.threads,
         EncodeScaled<Math>{src, count, chunk, paramsBytes, formatId});
}

// Returns 0, or kLaunchUnsupported for a format id without a kernel.
template <class Launch>
int dispatchEncode(Launch&& launch, std::uint8_t formatId, const float* src, std::size_t count, void* chunk,
                   std::size_t paramsBytes, const LaunchShape& shape = {}) {
  auto* c = static_cast<std::uint8_t*>(chunk);
  switch (static_cast<Format>(formatId)) {
    case Format::kFp32: launchEncodeElementwise<F32Code>(launch, formatId, src, count, c, paramsBytes, shape); break;
    case Format::kBf16:
      launchEncodeElementwise<SmallFloatCode<detail::Bf16Math>>(launch, formatId, src, count, c, paramsBytes, shape);
      break;
    case Format::kFp16:
      launchEncodeElementwise<SmallFloatCode<detail::Fp16Math>>(launch, formatId, src, count, c, paramsBytes, shape);
      break;
    case Format::kFp8:
      launchEncodeElementwise<SmallFloatCode<detail::Fp8Math>>(launch, formatId, src, count, c, paramsBytes, shape);
      break;
    case Format::kFp8s: launchEncodeScaled<detail::Fp8Math>(launch, formatId, src, count, c, paramsBytes, shape); break;
    case Format::kE4m3: launchEncodeScaled<detail::E4m3Math>(launch, formatId, src, count, c, paramsBytes, shape); break;
    default: {
      const unsigned bits = tableBitsOf(formatId);
      if (bits == 0) return kLaunchUnsupported;
      const bool zero = tableHasZeroCode(formatId);
      // Table first (one block), then the codes against it, in stream order.
      launch(1u, shape.threads, TableBuild{src, count, c, paramsBytes, formatId, bits, zero});
      const std::size_t words = (count * bits + 7) / 8 / 4 + 2;
      launch(gridFor(words, shape.threads, shape), shape.threads, TableEncode{src, count, c, paramsBytes, bits, zero});
    }
  }
  return 0;
}

template <class Code, bool kAdd, class Launch>
void launchDecodeElementwise(Launch& launch, const std::uint8_t* chunk, std::size_t count, std::size_t paramsBytes,
                             float* out, const LaunchShape& shape) {
  launch(gridFor(count, shape.threads, shape), shape.threads,
         DecodeElementwise<Code, kAdd>{chunk, count, paramsBytes, out});
}

template <bool kAdd, class Launch>
int dispatchDecodeAs(Launch& launch, std::uint8_t formatId, const std::uint8_t* c, std::size_t count,
                     std::size_t paramsBytes, float* out, const LaunchShape& shape) {
  switch (static_cast<Format>(formatId)) {
    case Format::kFp32: launchDecodeElementwise<F32Code, kAdd>(launch, c, count, paramsBytes, out, shape); break;
    case Format::kBf16:
      launchDecodeElementwise<SmallFloatCode<detail::Bf16Math>, kAdd>(launch, c, count, paramsBytes, out, shape);
      break;
    case Format::kFp16:
      launchDecodeElementwise<SmallFloatCode<detail::Fp16Math>, kAdd>(launch, c, count, paramsBytes, out, shape);
      break;
    case Format::kFp8:
      launchDecodeElementwise<SmallFloatCode<detail::Fp8Math>, kAdd>(launch, c, count, paramsBytes, out, shape);
      break;
    case Format::kFp8s:
      launch(gridFor(scaleBlockCount(count), 1, shape), shape.threads,
             DecodeScaled<detail::Fp8Math, kAdd>{c, count, paramsBytes, out});
      break;
    case Format::kE4m3:
      launch(gridFor(scaleBlockCount(count), 1, shape), shape.threads,
             DecodeScaled<detail::E4m3Math, kAdd>{c, count, paramsBytes, out});
      break;
    default: {
      const unsigned bits = tableBitsOf(formatId);
      if (bits == 0) return kLaunchUnsupported;
      launch(gridFor(count, shape.threads, shape), shape.threads, TableDecode<kAdd>{c, count, paramsBytes, out, bits, tableWordElements(count, bits)});
    }
  }
  return 0;
}

// Decodes (add = false) or adds into out (add = true). A count of 0 launches nothing.
template <class Launch>
int dispatchDecode(Launch&& launch, std::uint8_t formatId, const void* chunk, float* out, std::size_t count,
                   std::size_t paramsBytes, bool add, const LaunchShape& shape = {}) {
  const auto* c = static_cast<const std::uint8_t*>(chunk);
  const bool supported = static_cast<Format>(formatId) == Format::kFp32 || static_cast<Format>(formatId) == Format::kBf16 ||
                         static_cast<Format>(formatId) == Format::kFp16 || static_cast<Format>(formatId) == Format::kFp8 ||
                         static_cast<Format>(formatId) == Format::kFp8s || static_cast<Format>(formatId) == Format::kE4m3 ||
                         tableBitsOf(formatId) != 0;
  if (!supported) return kLaunchUnsupported;
  if (count == 0) return 0;
  return add ? dispatchDecodeAs<true>(launch, formatId, c, count, paramsBytes, out, shape)
             : dispatchDecodeAs<false>(launch, formatId, c, count, paramsBytes, out, shape);
}

}  // namespace adaprec::kernels
