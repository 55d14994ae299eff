// adaprec::gpu (include/adaprec/gpu_codec.hpp): argument checks and error mapping around the CUDA
// launchers in kernels/. Without CUDA in the build every call reports kUnsupported.
#include "adaprec/gpu_codec.hpp"

#include "adaprec/error.hpp"
#include "codec/chunk_header.hpp"

#if defined(ADAPREC_HAVE_CUDA)
#include <cuda_runtime.h>

#include "codec_launch.hpp"
#endif

namespace adaprec::gpu {

#if defined(ADAPREC_HAVE_CUDA)

namespace {

void checkLaunch(int status, Format format, const char* what) {
  ADAPREC_CHECK(status != kernels::kLaunchUnsupported, ErrorCode::kUnsupported,
                "no GPU " << what << " for " << formatName(format));
  ADAPREC_CHECK(status == 0, ErrorCode::kCuda,
                "GPU " << what << " of " << formatName(format) << ": "
                       << cudaGetErrorString(static_cast<cudaError_t>(status)));
}

void decodeWith(bool add, Format format, const void* chunk, float* out, std::size_t count, void* stream) {
  ADAPREC_CHECK_ARG(chunk != nullptr && (out != nullptr || count == 0), "null device buffer");
  const codec::ChunkLayout layout = codec::chunkLayout(format, count);
  checkLaunch(kernels::launchDecode(static_cast<std::uint8_t>(format), chunk, out, count, layout.paramsBytes, add,
                                    stream),
              format, add ? "decodeAdd" : "decode");
}

}  // namespace

bool deviceAvailable() { return kernels::deviceCount() > 0; }

void encode(Format format, const float* src, std::size_t count, void* chunk, void* stream) {
  ADAPREC_CHECK_ARG(chunk != nullptr && (src != nullptr || count == 0), "null device buffer");
  const codec::ChunkLayout layout = codec::chunkLayout(format, count);
  checkLaunch(kernels::launchEncode(static_cast<std::uint8_t>(format), src, count, chunk, layout.paramsBytes, stream),
              format, "encode");
}

void decode(Format format, const void* chunk, float* dst, std::size_t count, void* stream) {
  decodeWith(false, format, chunk, dst, count, stream);
}

void decodeAdd(Format format, const void* chunk, float* acc, std::size_t count, void* stream) {
  decodeWith(true, format, chunk, acc, count, stream);
}

#else

namespace {
[[noreturn]] void noCuda() {
  ADAPREC_FAIL(ErrorCode::kUnsupported, "this AdaPrec build has no CUDA support (configure with -Dcuda=enabled)");
}
}  // namespace

bool deviceAvailable() { return false; }
void encode(Format, const float*, std::size_t, void*, void*) { noCuda(); }
void decode(Format, const void*, float*, std::size_t, void*) { noCuda(); }
void decodeAdd(Format, const void*, float*, std::size_t, void*) { noCuda(); }

#endif

}  // namespace adaprec::gpu
