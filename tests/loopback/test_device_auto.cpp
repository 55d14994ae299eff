// auto on device buffers (the CPU stand-in of a device): the model's device figures are probed through
// the device on the call's own buffer and saved with the calibration; ranks whose buffers live in
// different memory get kMismatch from the agreement instead of a probe only some of them enter; a
// probe that fails on one rank fails on every rank instead of leaving the others waiting.
#include <catch2/catch.hpp>

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
  const int p = 3;
  const std::size_t count = std::size_t{1} << 17;
  LoopbackGroup group(p, 1);
  std::vector<ErrorCode> codes(p, ErrorCode::kOk);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options = CommunicatorOptions::fromEnvironment();
    options.timeoutSeconds = 30;
    Communicator comm(transport, options);
    std::vector<float> host(count, 1.0f);
    AllreduceOptions opt;
    opt.format = parseFormatSpec("fp8s");
    try {
      if (rank == 0) {  // rank 0's buffer on its device, the others' on the host
        auto device = std::make_shared<CpuStandInDevice>();
        comm.setDevice(device);
        detail::DeviceScratch buffer(*device);
        auto* d = static_cast<float*>(buffer.get(count * sizeof(float)));
        detail::HostStaging staging(*device, count * sizeof(float));
        std::copy(host.begin(), host.end(), staging.as<float>());
        device->copyToDevice(d, staging.as<float>(), count * sizeof(float));
        device->synchronize();
        comm.allreduce(d, count, opt);
      } else {
        comm.allreduce(host.data(), count, opt);
      }
    } catch (const Error& e) {
      codes[rank] = e.code();
      if (rank == 0) CHECK(std::string(e.what()).find("memory=cpu-stand-in") != std::string::npos);
    }
  });
  for (int r = 0; r < p; ++r) CHECK(codes[r] == ErrorCode::kMismatch);
}

TEST_CASE("a device probe that fails on one rank fails the call on every rank, not a hang", "[device][device_auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_device_auto_failure");
  const int p = 3;
  const std::size_t count = std::size_t{1} << 17;
  LoopbackGroup group(p, 1);
  std::vector<ErrorCode> codes(p, ErrorCode::kOk);
  std::vector<std::string> messages(p);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options = CommunicatorOptions::fromEnvironment();
    options.timeoutSeconds = 30;  // a rank left waiting would fail the test by its timeout, not hang it
    Communicator comm(transport, options);
    auto device = std::make_shared<CpuStandInDevice>();
    comm.setDevice(device);
    detail::DeviceScratch buffer(*device);
    auto* d = static_cast<float*>(buffer.get(count * sizeof(float)));
    device->fillZero(d, count * sizeof(float));
    device->synchronize();
    if (rank == 1) device->failAllocations(true);  // its device memory is exhausted from here on
    AllreduceOptions opt;
    opt.format = parseFormatSpec("fp8s");
    try {
      comm.allreduce(d, count, opt);
    } catch (const Error& e) {
      codes[rank] = e.code();
      messages[rank] = e.what();
    }
    device->failAllocations(false);
  });
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r << ": " << messages[r]);
    CHECK(codes[r] == ErrorCode::kCuda);
    CHECK(messages[r].find(r == 1 ? "auto's probe of the device failed: " : "failed on another rank") !=
          std::string::npos);
  }
}
