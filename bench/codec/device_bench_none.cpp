// adaprec-codec-bench --device cuda in a build without CUDA: never reached (selectCudaDevice says
// kNotBuilt first), defined so the program links.
#include "../support/cuda_probe.hpp"
#include "adaprec/error.hpp"
#include "device_bench.hpp"

namespace adaprec::bench {

std::unique_ptr<DeviceCodecBench> makeCudaCodecBench(const std::vector<float>&) {
  ADAPREC_FAIL(ErrorCode::kUnsupported, selectCudaDevice().description);
}

}  // namespace adaprec::bench
