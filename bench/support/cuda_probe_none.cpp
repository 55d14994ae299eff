// cuda_probe.hpp in a build without CUDA: the one line that says how to get a build with it.
#include "cuda_probe.hpp"

namespace adaprec::bench {

CudaProbe selectCudaDevice(int) {
  return {CudaAvailability::kNotBuilt,
          "this build has no CUDA support: configure a build with -Dcuda=enabled (meson setup build-gpu "
          "-Dcuda=enabled) to use --device cuda"};
}

}  // namespace adaprec::bench
