// adaprec-codec-bench --device cuda: the codec on device buffers, timed with CUDA events against two
// baselines on the same buffer in the same run (a device-to-device cudaMemcpy and
// cub::DeviceRadixSort of the values). The CUDA side (device_bench_cuda.cu) is compiled only in a
// build with -Dcuda=enabled; device_bench_none.cpp stands in for it otherwise.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "adaprec/format.hpp"

namespace adaprec::bench {

// Median seconds of one call, over the interleaved rounds.
struct DeviceFormatTiming {
  double copySeconds;       // cudaMemcpy device to device of the fp32 buffer, timed in turns with:
  double encodeSeconds;
  double decodeSeconds;
  double decodeAddSeconds;
};

class DeviceCodecBench {
 public:
  virtual ~DeviceCodecBench() = default;
  // The baselines timed in turns: copy and cub::DeviceRadixSort::SortKeys of the same n floats.
  virtual void timeBaselines(int reps, double& copySeconds, double& sortSeconds) = 0;
  // encode, decode and decodeAdd of `format` through the CUDA device codec (CudaDeviceCodec), each
  // in turn with the copy. Leaves the encoded chunk and its decode on the device for fetch().
  virtual DeviceFormatTiming timeFormat(Format format, int reps) = 0;
  // The last timed format's chunk and decoded values, copied to the host.
  virtual void fetch(std::vector<unsigned char>& chunk, std::vector<float>& decoded) = 0;
};

// Uploads x (n floats) to the current CUDA device; throws Error with a clear line when the device
// memory does not hold the buffers.
std::unique_ptr<DeviceCodecBench> makeCudaCodecBench(const std::vector<float>& x);

}  // namespace adaprec::bench
