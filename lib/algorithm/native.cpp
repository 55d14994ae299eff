// native: the transport's own uncompressed allreduce (MPI_Allreduce under MPI), the fp32 baseline.
// For bf16/fp16 the values are rounded to 16 bits and summed with a 16-bit user op that adds in fp32
// and rounds after every addition (ChainerMN's fp16 allreduce); other formats are not supported.
// Bytes: whatever the transport's algorithm sends; stats report the bandwidth-optimal
// 2 (p-1)/p * elementBytes * count. Quantizations per value (16-bit): up to p (one per addition the
// transport performs, plus the initial rounding); fp32: none beyond fp32 summation rounding.
// A buffer on a device is staged through host memory (copy down, the transport's allreduce, copy up).
#include <optional>
#include <string>
#include <vector>

#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/device_codec.hpp"
#include "codec/half_sum.hpp"

namespace adaprec::detail {

bool nativeSupports(Format format) {
  return format == Format::kFp32 || format == Format::kBf16 || format == Format::kFp16;
}

std::string nativeFormatNames() {
  std::vector<std::string> names;
  for (Format format : allFormats())
    if (nativeSupports(format)) names.emplace_back(formatName(format));
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

void nativeAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count) {
  ADAPREC_CHECK(nativeSupports(ctx.format), ErrorCode::kUnsupported,
                "algorithm native carries " << nativeFormatNames() << ", not " << formatName(ctx.format));
  const int p = ctx.transport.size();
  if (p == 1 || count == 0) return;
  const std::size_t elementBytes = ctx.format == Format::kFp32 ? 4 : 2;
  const std::size_t moved = 2 * static_cast<std::size_t>(p - 1) * count / static_cast<std::size_t>(p);
  ctx.stats.wireBytes += moved * elementBytes;
  ctx.stats.fp32Bytes += moved * sizeof(float);
  // On a device: fp32 goes to a transport that takes device memory as it is (CUDA-aware MPI, NCCL),
  // after the stream is drained; otherwise (and for the 16-bit formats, rounded on the host) it is
  // copied down, reduced by the transport from host memory and copied up.
  DeviceCodec* device = ctx.device != nullptr && !ctx.device->hostMemory() ? ctx.device : nullptr;
  if (device != nullptr && ctx.format == Format::kFp32 && deviceDirect(ctx.transport, device)) {
    device->synchronize();
    ctx.transport.nativeAllreduce(buf, count, NativeType::kFp32);
    return;
  }
  // Staged through the workspace (the device's pinned staging memory), or, when the workspace is device
  // memory (direct, a 16-bit format), through staging of its own.
  std::optional<HostStaging> ownStaging;
  float* host = buf;
  if (device != nullptr) {
    if (deviceDirect(ctx.transport, device)) {
      ownStaging.emplace(*device, count * sizeof(float));
      host = ownStaging->as<float>();
    } else {
      host = ctx.workspace.floats(Workspace::kNativeHostSlot, count).data();
    }
    device->copyToHost(host, buf, count * sizeof(float));
    device->synchronize();
  }
  if (ctx.format == Format::kFp32) {
    ctx.transport.nativeAllreduce(host, count, NativeType::kFp32);
  } else {
    std::vector<std::uint16_t> half(count);
    roundToHalf(ctx.format, host, half.data(), count);
    ctx.transport.nativeAllreduce(half.data(), count,
                                  ctx.format == Format::kBf16 ? NativeType::kBf16 : NativeType::kFp16);
    widenHalf(ctx.format, half.data(), host, count);
  }
  if (device != nullptr) {
    device->copyToDevice(buf, host, count * sizeof(float));
    device->synchronize();
  }
}

}  // namespace adaprec::detail
