// --device cuda of the benchmarks: whether this build and this machine can run it, and on which device.
// One implementation per build: cuda_probe_cuda.cpp (-Dcuda=enabled) asks the CUDA runtime,
// cuda_probe_none.cpp says how to configure a build that has CUDA.
#pragma once

#include <string>

namespace adaprec::bench {

enum class CudaAvailability {
  kReady,     // a device is current; description names it
  kNotBuilt,  // this build has no CUDA: description is the line to print (exit 1)
  kNoDevice,  // a CUDA build, but no usable device: description says why (exit kSkippedExit)
};

struct CudaProbe {
  CudaAvailability availability;
  std::string description;  // kReady: "device 0: NVIDIA H100 ..., sm_90, 132 SMs, 81559 MiB"
};

// Makes device `index` modulo the device count current (a rank's index on its node spreads the ranks
// of a node over its GPUs) and describes it.
CudaProbe selectCudaDevice(int index = 0);

// Exit status of a benchmark that found no device: "skipped" to meson and tools/gpu-check.
inline constexpr int kSkippedExit = 77;

}  // namespace adaprec::bench
