// cuda_probe.hpp in a -Dcuda=enabled build: the CUDA runtime says which devices there are.
#include <cuda_runtime.h>

#include <cstddef>
#include <sstream>

#include "cuda_probe.hpp"

namespace adaprec::bench {

CudaProbe selectCudaDevice(int index) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    return {CudaAvailability::kNoDevice,
            std::string("no CUDA device (cudaGetDeviceCount: ") +
                (status != cudaSuccess ? cudaGetErrorString(status) : "0 devices") + ")"};
  }
  const int device = (index % devices + devices) % devices;
  cudaDeviceProp properties{};
  status = cudaSetDevice(device);
  if (status == cudaSuccess) status = cudaGetDeviceProperties(&properties, device);
  if (status != cudaSuccess) {
    return {CudaAvailability::kNoDevice, "no usable CUDA device (device " + std::to_string(device) + ": " +
                                             cudaGetErrorString(status) + ")"};
  }
  std::ostringstream text;
  text << "device " << device << ": " << properties.name << ", sm_" << properties.major << properties.minor << ", "
       << properties.multiProcessorCount << " SMs, " << properties.totalGlobalMem / (std::size_t{1} << 20) << " MiB";
  return {CudaAvailability::kReady, text.str()};
}

}  // namespace adaprec::bench
