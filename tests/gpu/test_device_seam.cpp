// Device buffers through every algorithm on a real GPU: the CUDA implementation of the device seam
// (lib/gpu/cuda_device_codec.cpp) under the loopback transport, ranks as threads, each with its own
// CUDA stream on the one GPU. The same checks as the CPU stand-in's sweep (tests/loopback/
// test_device_sweep.cpp): exact where lossless, within the documented bound where lossy, bit-identical
// on every rank and to the host path; error feedback's results and residuals equal the host path's.
// Exits 77 (skipped) when no CUDA device is visible.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "adaprec/gpu_codec.hpp"
#include "device_run.hpp"
#include "engine_check.hpp"
#include "gpu/cuda_device_codec.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

constexpr int kRanksPerNode = 2;

DeviceRunOptions onGpu() {
  DeviceRunOptions run;
  run.makeDevice = [](int) { return detail::makeCudaDeviceCodec(); };
  return run;
}

void checkGpuRun(Algorithm algorithm, Format format, int p, std::size_t count, bool outOfPlace) {
  const bool integers = isLossless(format);
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, count, integers));
  AllreduceOptions opt;
  opt.format.format = format;
  opt.algorithm = algorithm;
  INFO("algorithm " << algorithmName(algorithm) << " format " << formatName(format) << " ranks " << p << " count "
                    << count << " outOfPlace " << outOfPlace);
  DeviceRunOptions run = onGpu();
  run.outOfPlace = outOfPlace;
  const DeviceOutcome got = runDeviceAllreduce(kRanksPerNode, inputs, std::vector<AllreduceOptions>(p, opt), run);
  if (got.anyError()) {
    REQUIRE(algorithm == Algorithm::kNative);
    REQUIRE(got.allErrors(ErrorCode::kUnsupported));
    return;
  }
  const Algorithm ran = got.stats[0].algorithm;
  const Format wire = got.stats[0].format;
  const int q = detail::quantizationsPerValue(ran, wire, p, (p + kRanksPerNode - 1) / kRanksPerNode);
  const std::string failure = checkResults(inputs, got.outputs, wire, q, integers && isLossless(wire), false);
  INFO("ran " << algorithmName(ran) << " wire " << formatName(wire) << ": " << failure);
  REQUIRE(failure.empty());
  const DeviceOutcome host = runHostAsRan(kRanksPerNode, inputs, opt, got, run);
  const std::string differs = firstDifference(got, host);
  INFO("GPU vs host: " << differs);
  REQUIRE(differs.empty());
}

}  // namespace

TEST_CASE("GPU device buffers through every algorithm", "[gpu][device_seam]") {
  for (Algorithm algorithm : allAlgorithms())
    for (Format format : allFormats())
      for (int p : {1, 2, 3, 4, 8})
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65539}})
          checkGpuRun(algorithm, format, p, count, (count + static_cast<std::size_t>(p)) % 2 == 1);
}

TEST_CASE("GPU error feedback matches the host path, residuals included", "[gpu][device_seam]") {
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRabenseifner,
                              Algorithm::kRecursiveDoubling, Algorithm::kHierarchical}) {
    for (const char* spec : {"table1+ef", "table4+ef", "fp8s+ef", "bf16+ef", "fp16+ef", "fp8+ef"}) {
      const int p = 4;
      INFO(algorithmName(algorithm) << " " << spec);
      std::vector<std::vector<float>> inputs;
      std::vector<std::vector<float>> later;
      const bool narrow = std::string(spec).rfind("fp16", 0) == 0 || std::string(spec).rfind("fp8+", 0) == 0;
      for (int r = 0; r < p; ++r) {
        inputs.push_back(makeInput(r, 4097, false));
        // fp16/fp8: finite alone, Inf once two are summed; the residuals there must be forgotten
        // (ForgetResidualsOfNonFiniteSums) as on the host.
        if (narrow)
          for (std::size_t i : {std::size_t{0}, std::size_t{1500}, std::size_t{4096}}) inputs.back()[i] = 40001.0f;
        later.push_back(makeInput(r, 4097, false, kSeed + 5));
      }
      AllreduceOptions opt;
      opt.format = parseFormatSpec(spec);
      opt.algorithm = algorithm;
      opt.average = true;
      opt.key = "grad";
      DeviceRunOptions run = onGpu();
      run.repetitions = 3;
      run.laterInputs = &later;
      const std::vector<AllreduceOptions> options(p, opt);
      const DeviceOutcome got = runDeviceAllreduce(kRanksPerNode, inputs, options, run);
      const DeviceOutcome host = runHostAllreduce(kRanksPerNode, inputs, options, run);
      REQUIRE_FALSE(got.anyError());
      REQUIRE(firstDifference(got, host).empty());
      for (int r = 0; r < p; ++r) REQUIRE(got.feedbackState[r] == host.feedbackState[r]);
    }
  }
}

int main(int argc, char** argv) {
  if (!gpu::deviceAvailable()) {
    std::printf("no CUDA device visible: GPU device-seam tests skipped\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
