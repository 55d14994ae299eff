// nccl_fp8.hpp in a build without CUDA: --device cuda stops before any of this (selectCudaDevice says
// kNotBuilt), defined so the program links.
#include "../support/cuda_probe.hpp"
#include "adaprec/error.hpp"
#include "nccl_fp8.hpp"

namespace adaprec::bench {

std::string ncclFp8Unsupported() { return selectCudaDevice().description; }

void floatToE5m2(const float*, std::uint8_t*, std::size_t, void*) {
  ADAPREC_FAIL(ErrorCode::kUnsupported, selectCudaDevice().description);
}

void e5m2ToFloat(const std::uint8_t*, float*, std::size_t, void*) {
  ADAPREC_FAIL(ErrorCode::kUnsupported, selectCudaDevice().description);
}

}  // namespace adaprec::bench
