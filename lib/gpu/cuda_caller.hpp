// A caller's CUDA buffers and stream, as the C API (AdaPrec_CommAllreduceDevice) receives them: the
// checks a rank makes before the agreement round, and the device codec bound to the caller's stream.
// Compiled in every build; without CUDA every entry reports kUnsupported with kBuildWithCuda.
#pragma once

#include <cstddef>
#include <memory>

#include "algorithm/device_codec.hpp"

namespace adaprec::detail {

// The one line that says how to get a build with CUDA (the C API's AdaPrec_HasCuda and
// ADAPREC_ERR_UNSUPPORTED, makeCudaDeviceCodec, and through them the Python package).
inline constexpr const char* kBuildWithCuda =
    "this AdaPrec build has no CUDA support; rebuild it with CUDA (needs nvcc): meson setup build "
    "-Dcuda=enabled, or for the Python package pip install . -Csetup-args=-Dcuda=enabled";

// True in a build with CUDA (ADAPREC_HAVE_CUDA).
bool cudaBuilt();

// Throws unless this rank can run a device allreduce of `bytes` bytes per buffer on `stream`:
// kUnsupported without CUDA in the build; kCuda with the runtime's reason when no device is usable or
// the stream reports an error of earlier work; kInvalidArgument when send or recv (bytes > 0) is not
// memory of the current device. Launches nothing.
void checkCudaCall(void* stream, const void* send, const void* recv, std::size_t bytes);

// makeCudaDeviceCodec on the caller's stream; null is CUDA's legacy default stream (stream 0), not a
// stream of the codec's own.
std::shared_ptr<DeviceCodec> makeCudaCallerCodec(void* stream);

}  // namespace adaprec::detail
