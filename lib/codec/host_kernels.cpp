#include "codec/host_kernels.hpp"

#include <cstdlib>
#include <string_view>

#include "adaprec/error.hpp"

namespace adaprec::codec {

namespace generic {
extern const HostKernels kKernels;
}
#if defined(ADAPREC_HAVE_AVX2_KERNELS)
namespace avx2 {
extern const HostKernels kKernels;
}
#endif

namespace {

const HostKernels& chooseKernels() {
  const char* forced = std::getenv("ADAPREC_CPU_ISA");
  const std::string_view want = forced != nullptr ? forced : "";
  ADAPREC_CHECK_ARG(want.empty() || want == "generic" || want == "avx2",
                    "ADAPREC_CPU_ISA='" << want << "' is not valid; valid values: generic, avx2");
  if (want == "generic") return generic::kKernels;
  const HostKernels* fast = avx2HostKernels();
  ADAPREC_CHECK(want != "avx2" || fast != nullptr, ErrorCode::kUnsupported,
                "ADAPREC_CPU_ISA=avx2 but this CPU or build has no x86-64-v3 (AVX2/F16C/FMA) support");
  return fast != nullptr ? *fast : generic::kKernels;
}

}  // namespace

const HostKernels& genericHostKernels() { return generic::kKernels; }

const HostKernels* avx2HostKernels() {
#if defined(ADAPREC_HAVE_AVX2_KERNELS)
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  return supported ? &avx2::kKernels : nullptr;
#else
  return nullptr;
#endif
}

const HostKernels& hostKernels() {
  static const HostKernels& kernels = chooseKernels();
  return kernels;
}

}  // namespace adaprec::codec
