#include "codec/host_kernels.hpp"

#include <cstdlib>
#include <string_view>

#if defined(ADAPREC_HAVE_AVX2_KERNELS)
#include <cpuid.h>
#endif

#include "adaprec/error.hpp"
#include "config/environment_variables.hpp"

namespace adaprec::codec {

namespace generic {
extern const HostKernels kKernels;
}
#if defined(ADAPREC_HAVE_AVX2_KERNELS)
namespace avx2 {
extern const HostKernels kKernels;
}
#endif
#if defined(ADAPREC_HAVE_AVX512_KERNELS)
namespace avx512 {
extern const HostKernels kKernels;
}
#endif

const HostKernels& kernelsForIsa(std::string_view want) {
  if (want == "generic") return generic::kKernels;
  const HostKernels* wide = avx512HostKernels();
  const HostKernels* narrow = avx2HostKernels();
  if (want == "avx512") {
    ADAPREC_CHECK(wide != nullptr, ErrorCode::kUnsupported,
                  "ADAPREC_CPU_ISA=avx512 but this CPU or build has no x86-64-v4 (AVX-512) support");
    return *wide;
  }
  if (want == "avx2") {
    ADAPREC_CHECK(narrow != nullptr, ErrorCode::kUnsupported,
                  "ADAPREC_CPU_ISA=avx2 but this CPU or build has no x86-64-v3 (AVX2/F16C/FMA/BMI2) support");
    return *narrow;
  }
  return wide != nullptr ? *wide : narrow != nullptr ? *narrow : generic::kKernels;
}

const HostKernels& genericHostKernels() { return generic::kKernels; }

#if defined(ADAPREC_HAVE_AVX2_KERNELS)
// CPUID leaf 1, ECX bit 29. Read directly: clang 14's __builtin_cpu_supports does not know "f16c".
static bool cpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

const HostKernels* avx2HostKernels() {
#if defined(ADAPREC_HAVE_AVX2_KERNELS)
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                cpuHasF16c() && __builtin_cpu_supports("bmi2");
  return supported ? &avx2::kKernels : nullptr;
#else
  return nullptr;
#endif
}

const HostKernels* avx512HostKernels() {
#if defined(ADAPREC_HAVE_AVX512_KERNELS)
  static const bool supported = avx2HostKernels() != nullptr && __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                                __builtin_cpu_supports("avx512vl");
  return supported ? &avx512::kKernels : nullptr;
#else
  return nullptr;
#endif
}

const HostKernels& hostKernels() {
  static const HostKernels& kernels = kernelsForIsa(detail::readEnvironmentChoice(detail::kEnvCpuIsa).value_or(""));
  return kernels;
}

}  // namespace adaprec::codec
