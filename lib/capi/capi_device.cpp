#include "capi/capi_device.hpp"

#include <utility>

#include "gpu/cuda_caller.hpp"

namespace adaprec::detail {

namespace {

CapiDeviceBackend& installed() {
  static CapiDeviceBackend backend = cudaCapiDeviceBackend();
  return backend;
}

}  // namespace

CapiDeviceBackend cudaCapiDeviceBackend() { return {checkCudaCall, makeCudaCallerCodec}; }

CapiDeviceBackend setCapiDeviceBackend(CapiDeviceBackend backend) {
  return std::exchange(installed(), std::move(backend));
}

const CapiDeviceBackend& capiDeviceBackend() { return installed(); }

}  // namespace adaprec::detail
