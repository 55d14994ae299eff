// adaprec-codec-bench --device cuda in a build without CUDA (device_bench.hpp): says how to get one.
#include "adaprec/error.hpp"
#include "device_bench.hpp"

namespace adaprec::bench {

DeviceProbe probeCudaDevice() {
  return {DeviceAvailability::kNotBuilt,
          "this build has no CUDA support: configure a build with -Dcuda=enabled (meson setup build-gpu "
          "-Dcuda=enabled) to use --device cuda"};
}

std::unique_ptr<DeviceCodecBench> makeCudaCodecBench(const std::vector<float>&) {
  ADAPREC_FAIL(ErrorCode::kUnsupported, probeCudaDevice().description);
}

}  // namespace adaprec::bench
