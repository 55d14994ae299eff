// auto on device buffers (the CPU stand-in of a device): the model's device figures are probed through
// the device on the call's own buffer and saved with the calibration; ranks whose buffers live in
// different memory get kMismatch from the agreement instead of a probe only some of them enter; a
// probe that fails on one rank fails on every rank instead of leaving the others waiting; the query of
// auto's choice (resolveAlgorithm) answers for the device buffers a device communicator takes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "calibration_directory.hpp"
#include "cpu_device.hpp"
#include "device_run.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

std::string directoryText(const std::string& name) {
  std::string all;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::ostringstream s;
    s << in.rdbuf();
    all += s.str();
  }
  return all;
}

constexpr std::size_t kCount = std::size_t{1} << 17;  // past auto's guard

AllreduceOptions fp8s() {
  AllreduceOptions opt;
  opt.format = parseFormatSpec("fp8s");
  return opt;
}

// What each rank threw (kOk and "" where nothing).
struct RankErrors {
  std::vector<ErrorCode> codes;
  std::vector<std::string> messages;
};

// Runs call(rank, communicator) on p ranks, one per node, each with its own Communicator; a 30 s
// timeout, so that a rank left waiting fails the test by its timeout instead of hanging it.
template <class Call>
RankErrors errorsOfEveryRank(int p, Call&& call) {
  LoopbackGroup group(p, 1);
  RankErrors out{std::vector<ErrorCode>(p, ErrorCode::kOk), std::vector<std::string>(p)};
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options = CommunicatorOptions::fromEnvironment();
    options.timeoutSeconds = 30;
    Communicator comm(transport, options);
    try {
      call(rank, comm);
    } catch (const Error& e) {
      out.codes[rank] = e.code();
      out.messages[rank] = e.what();
    }
  });
  return out;
}

// kCount ones in `buffer`'s device memory (through pinned staging, as a user's upload).
float* deviceOnes(CpuStandInDevice& device, detail::DeviceScratch& buffer) {
  auto* d = static_cast<float*>(buffer.get(kCount * sizeof(float)));
  detail::HostStaging staging(device, kCount * sizeof(float));
  std::fill(staging.as<float>(), staging.as<float>() + kCount, 1.0f);
  device.copyToDevice(d, staging.as<float>(), kCount * sizeof(float));
  device.synchronize();
  return d;
}

}  // namespace

TEST_CASE("auto on device buffers probes the device's codec and staging and saves them", "[device][device_auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_device_auto");
  const int p = 4;
  const std::size_t count = std::size_t{1} << 17;  // past auto's guard
  std::vector<std::vector<float>> inputs(p, std::vector<float>(count, 1.0f));
  AllreduceOptions opt;
  opt.format = parseFormatSpec("table4");
  DeviceRunOptions run;
  run.makeDevice = [](int) { return std::make_shared<CpuStandInDevice>(); };
  run.flush = [](detail::DeviceCodec& device) { static_cast<CpuStandInDevice&>(device).drain(); };
  run.repetitions = 3;
  const DeviceOutcome got = runDeviceAllreduce(1, inputs, std::vector<AllreduceOptions>(p, opt), run);
  REQUIRE_FALSE(got.anyError());
  for (int r = 0; r < p; ++r) {
    CHECK(got.outputs[r] == std::vector<float>(count, 4.0f));  // table4 of one repeated value is exact
    CHECK(got.stats[r].algorithm == got.stats[0].algorithm);
  }
  const std::string text = directoryText("adaprec_device_auto");
  INFO(text);
  CHECK(text.find("device cpu-stand-in ") != std::string::npos);
  CHECK(text.find("device cpu-stand-in none") == std::string::npos);  // staged: staging measured
  CHECK(text.find("\ndevice_codec fp32 ") != std::string::npos);
  CHECK(text.find("\ndevice_codec table4 ") != std::string::npos);
  CHECK(text.find("\ncodec table4 ") != std::string::npos);  // the host's figures stay
}

TEST_CASE("ranks with buffers in different memory get kMismatch from auto, not a hang", "[device][device_auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_device_auto_mismatch");
  const RankErrors got = errorsOfEveryRank(3, [](int rank, Communicator& comm) {
    std::vector<float> host(kCount, 1.0f);
    if (rank == 0) {  // rank 0's buffer on its device, the others' on the host
      auto device = std::make_shared<CpuStandInDevice>();
      comm.setDevice(device);
      detail::DeviceScratch buffer(*device);
      comm.allreduce(deviceOnes(*device, buffer), kCount, fp8s());
    } else {
      comm.allreduce(host.data(), kCount, fp8s());
    }
  });
  for (int r = 0; r < 3; ++r) CHECK(got.codes[r] == ErrorCode::kMismatch);
  CHECK(got.messages[0].find("memory=cpu-stand-in") != std::string::npos);
}

TEST_CASE("a device probe that fails on one rank fails the call on every rank, not a hang", "[device][device_auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_device_auto_failure");
  const RankErrors got = errorsOfEveryRank(3, [](int rank, Communicator& comm) {
    auto device = std::make_shared<CpuStandInDevice>();
    comm.setDevice(device);
    detail::DeviceScratch buffer(*device);
    auto* d = static_cast<float*>(buffer.get(kCount * sizeof(float)));
    device->fillZero(d, kCount * sizeof(float));
    device->synchronize();
    if (rank == 1) device->failAllocations(true);  // its device memory is exhausted from here on
    try {
      comm.allreduce(d, kCount, fp8s());
    } catch (...) {
      device->failAllocations(false);
      throw;
    }
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << got.messages[r]);
    CHECK(got.codes[r] == ErrorCode::kCuda);
    CHECK(got.messages[r].find(r == 1 ? "auto's probe of the device failed: " : "failed on another rank") !=
          std::string::npos);
  }
}

TEST_CASE("resolveAlgorithm on a device communicator answers for device buffers", "[device][device_auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_device_auto_resolve");
  const int p = 3;
  std::vector<Algorithm> resolvedFirst(p), ranLast(p), resolvedLast(p);
  std::string savedAfterResolve;
  const RankErrors got = errorsOfEveryRank(p, [&](int rank, Communicator& comm) {
    auto device = std::make_shared<CpuStandInDevice>();
    comm.setDevice(device);
    detail::DeviceScratch buffer(*device);
    float* d = deviceOnes(*device, buffer);
    // Before any allreduce: the query alone consults the model for device buffers (the device's
    // codec probed, not the host's figures reused for them).
    resolvedFirst[rank] = comm.resolveAlgorithm(Algorithm::kAuto, Format::kFp8s, kCount);
    if (rank == 0) savedAfterResolve = directoryText("adaprec_device_auto_resolve");
    // Through the trial and past it: the query then names what the settled calls run.
    for (int call = 0; call < kAutoTrialCalls + 2; ++call) ranLast[rank] = comm.allreduce(d, kCount, fp8s()).algorithm;
    resolvedLast[rank] = comm.resolveAlgorithm(Algorithm::kAuto, Format::kFp8s, kCount);
  });
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r << ": " << got.messages[r]);
    REQUIRE(got.codes[r] == ErrorCode::kOk);
    CHECK(resolvedFirst[r] == resolvedFirst[0]);
    CHECK(resolvedLast[r] == ranLast[r]);
  }
  INFO(savedAfterResolve);
  CHECK(savedAfterResolve.find("\ndevice_codec fp8s ") != std::string::npos);
}

TEST_CASE("resolveAlgorithm on ranks with buffers in different memory gets kMismatch", "[device][device_auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_device_auto_resolve_mismatch");
  const RankErrors got = errorsOfEveryRank(3, [](int rank, Communicator& comm) {
    if (rank == 0) comm.setDevice(std::make_shared<CpuStandInDevice>());
    comm.resolveAlgorithm(Algorithm::kAuto, Format::kFp8s, kCount);
  });
  for (int r = 0; r < 3; ++r) CHECK(got.codes[r] == ErrorCode::kMismatch);
  CHECK(got.messages[0].find("memory=cpu-stand-in") != std::string::npos);
}
