// How AdaPrec_CommAllreduceDevice (include/adaprec/adaprec_mpi.h) reaches a device. By default CUDA
// (lib/gpu/cuda_caller.hpp); a test swaps in another DeviceCodec, such as the CPU stand-in of a device
// (tests/loopback/cpu_device.hpp), to run the C entry point on a machine without a GPU
// (tests/mpi/test_capi_device.cpp). Internal: not in the public headers.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "algorithm/device_codec.hpp"

namespace adaprec::detail {

struct CapiDeviceBackend {
  // Called on every rank before the agreement round: throws Error when this rank cannot run the call
  // (its code and message become the call's).
  std::function<void(void* stream, const void* send, const void* recv, std::size_t bytes)> check;
  // The codec whose one stream is `stream`; called once per communicator and stream (the
  // communicator keeps it until AdaPrec_CommFree).
  std::function<std::shared_ptr<DeviceCodec>(void* stream)> make;
};

// The CUDA backend (checkCudaCall, makeCudaCallerCodec).
CapiDeviceBackend cudaCapiDeviceBackend();

// Replaces the backend for every later device call (streams a communicator has already seen keep
// their codec); returns the previous one. Not synchronized with running calls: for tests, between
// calls.
CapiDeviceBackend setCapiDeviceBackend(CapiDeviceBackend backend);
// The backend in use.
const CapiDeviceBackend& capiDeviceBackend();

}  // namespace adaprec::detail
