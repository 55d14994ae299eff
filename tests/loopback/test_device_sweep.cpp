// The engine sweep with device buffers (lib/algorithm/device_codec.hpp) through the CPU stand-in of a
// device (cpu_device.hpp: kernels/ functors, deferred stream, one device per rank-thread): every
// algorithm, auto and hierarchical included, x every format x ranks 1..8 and 16 x counts (0, 1, odd,
// 1000, 65539), in and out of place. Each run must be exact where lossless, within the documented
// bound where lossy, bit-identical on every rank, AND bit-identical to the host path for the same
// inputs (same algorithm and wire format). Error feedback (+ef, repeated calls, averaging) must give
// the host path's results and residuals bit for bit. Ranks are grouped two per emulated node.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "adaprec/codec.hpp"
#include "calibration_directory.hpp"
#include "cpu_device.hpp"
#include "device_memory_transport.hpp"
#include "device_run.hpp"
#include "engine_check.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

constexpr int kRanksPerNode = 2;

// Each rank on its own stand-in (serial launcher, or threaded with this many threads per block).
DeviceRunOptions onStandIn(unsigned threadsPerBlock = 0) {
  DeviceRunOptions run;
  run.makeDevice = [threadsPerBlock](int) { return std::make_shared<CpuStandInDevice>(threadsPerBlock); };
  run.flush = [](detail::DeviceCodec& device) { static_cast<CpuStandInDevice&>(device).drain(); };
  return run;
}

// Each rank's transport takes its stand-in's memory as it is (a CUDA-aware MPI or NCCL): encoded
// messages stay in device memory, nothing is staged through the host. Per rank, after the run: the bytes
// copied between host and device, and the messages handed over in device memory.
struct DirectCounts {
  std::vector<std::size_t> copyBytes;
  std::vector<std::size_t> deviceMessages;
};
void takeDeviceMemory(DeviceRunOptions& run, DirectCounts& counts, int p) {
  counts.copyBytes.assign(p, 0);
  counts.deviceMessages.assign(p, 0);
  run.wrapTransport = [](std::shared_ptr<Transport> inner, detail::DeviceCodec& device) -> std::shared_ptr<Transport> {
    return std::make_shared<DeviceMemoryTransport>(std::move(inner), static_cast<CpuStandInDevice&>(device));
  };
  run.inspect = [&counts](int rank, detail::DeviceCodec& device, Transport& transport) {
    counts.copyBytes[rank] = static_cast<CpuStandInDevice&>(device).hostDeviceCopyBytes();
    counts.deviceMessages[rank] = static_cast<DeviceMemoryTransport&>(transport).deviceMessages();
  };
}

// Staged messages (a transport that takes host memory only): per rank after the run, the bytes copied
// from pageable host memory and the transfers waited for while copies or decodes were still queued.
struct StagedCounts {
  std::vector<std::size_t> pageableBytes;
  std::vector<std::size_t> overlappedWaits;
};
void probeStaging(DeviceRunOptions& run, StagedCounts& counts, int p) {
  counts.pageableBytes.assign(p, 0);
  counts.overlappedWaits.assign(p, 0);
  run.wrapTransport = [](std::shared_ptr<Transport> inner, detail::DeviceCodec& device) -> std::shared_ptr<Transport> {
    return std::make_shared<QueueProbeTransport>(std::move(inner), static_cast<CpuStandInDevice&>(device));
  };
  run.inspect = [&counts](int rank, detail::DeviceCodec& device, Transport& transport) {
    counts.pageableBytes[rank] = static_cast<CpuStandInDevice&>(device).pageableCopyBytes();
    counts.overlappedWaits[rank] = static_cast<QueueProbeTransport&>(transport).overlappedWaits();
  };
}

// Checks a device run like the host sweep does and against the host run of the same (algorithm,
// wire format). Returns false for the one documented refusal (native with a format it cannot carry).
// direct: the transport takes device memory (takeDeviceMemory), and the run must not stage: besides
// the test's own input and result copies, only received chunks' 16-byte headers come down.
bool checkDeviceRun(Algorithm algorithm, Format format, int p, std::size_t count, bool outOfPlace,
                    unsigned threadsPerBlock = 0, bool direct = false) {
  const bool integers = isLossless(format);
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, count, integers));
  AllreduceOptions opt;
  opt.format.format = format;
  opt.algorithm = algorithm;
  INFO("algorithm " << algorithmName(algorithm) << " format " << formatName(format) << " ranks " << p << " count "
                    << count << " outOfPlace " << outOfPlace << " threads/block " << threadsPerBlock << " direct "
                    << direct << " seed " << kSeed);
  DeviceRunOptions run = onStandIn(threadsPerBlock);
  run.outOfPlace = outOfPlace;
  DirectCounts counts;
  StagedCounts staging;
  if (direct) {
    takeDeviceMemory(run, counts, p);
  } else {
    probeStaging(run, staging, p);
  }
  const DeviceOutcome got = runDeviceAllreduce(kRanksPerNode, inputs, std::vector<AllreduceOptions>(p, opt), run);
  if (got.anyError()) {
    const bool expected = algorithm == Algorithm::kNative && format != Format::kFp32 && format != Format::kBf16 &&
                          format != Format::kFp16;
    REQUIRE(expected);
    REQUIRE(got.allErrors(ErrorCode::kUnsupported));
    return false;
  }
  const Algorithm ran = got.stats[0].algorithm;
  const Format wire = got.stats[0].format;
  if (algorithm != Algorithm::kAuto) REQUIRE(ran == algorithm);
  const int nodes = (p + kRanksPerNode - 1) / kRanksPerNode;
  const int q = detail::quantizationsPerValue(ran, wire, p, nodes);
  const std::string failure = checkResults(inputs, got.outputs, wire, q, integers && isLossless(wire), false);
  INFO("ran " << algorithmName(ran) << " wire " << formatName(wire) << ": " << failure);
  REQUIRE(failure.empty());
  // The host path with what the device run resolved to (auto's choice may depend on timing).
  const DeviceOutcome host = runHostAsRan(kRanksPerNode, inputs, opt, got, run);
  REQUIRE_FALSE(host.anyError());
  const std::string differs = firstDifference(got, host);
  INFO("device vs host: " << differs);
  REQUIRE(differs.empty());
  REQUIRE(got.stats[0].wireBytes == host.stats[0].wireBytes);
  // Native's 16-bit sums round on the host, so they stay staged; everything else goes direct.
  const bool stagedAnyway = ran == Algorithm::kNative && wire != Format::kFp32;
  // Staging is pinned: only the test's own input and result copies are from pageable memory. And it
  // overlaps: the compressed algorithms wait for transfers with the device's copies and decodes still
  // queued (a GPU runs them meanwhile), on every rank.
  const std::size_t ownCopies = 2 * count * sizeof(float);  // the test's input up, result down
  if (!direct && p > 1 && count >= 1000) {
    const bool pipelined = ran == Algorithm::kRing || ran == Algorithm::kTwoShot ||
                           ran == Algorithm::kRabenseifner || ran == Algorithm::kRecursiveDoubling;
    for (int r = 0; r < p; ++r) {
      INFO("rank " << r << ": " << staging.pageableBytes[r] << " bytes copied from pageable memory, "
                   << staging.overlappedWaits[r] << " transfers waited for with device work queued");
      REQUIRE(staging.pageableBytes[r] == ownCopies);
      if (pipelined) REQUIRE(staging.overlappedWaits[r] > 0);
    }
  }
  if (direct && p > 1 && count >= 1000 && !stagedAnyway) {
    for (int r = 0; r < p; ++r) {
      INFO("rank " << r << ": " << counts.copyBytes[r] << " bytes copied, " << counts.deviceMessages[r]
                   << " device messages");
      REQUIRE(counts.deviceMessages[r] > 0);
      REQUIRE(counts.copyBytes[r] >= ownCopies);
      const std::size_t algorithmCopies = counts.copyBytes[r] - ownCopies;
      REQUIRE(algorithmCopies % kChunkHeaderBytes == 0);
      REQUIRE(algorithmCopies <= count);  // headers only: at most a quarter of the buffer's bytes
    }
  }
  return true;
}

void sweep(Algorithm algorithm) {
  const int rankCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};
  int cases = 0;
  for (Format format : allFormats()) {
    for (int p : rankCounts) {
      const std::size_t counts[] = {0, 1, 7, 1000, 65539};
      for (std::size_t count : counts) {
        const bool outOfPlace = (count + static_cast<std::size_t>(p)) % 2 == 1;
        // Half the cases hand device memory to the transport directly, in and out of place.
        const bool direct = (count / 2 + static_cast<std::size_t>(p)) % 2 == 1;
        if (checkDeviceRun(algorithm, format, p, count, outOfPlace, 0, direct)) ++cases;
      }
    }
  }
  CHECK(cases > 0);
}

}  // namespace

TEST_CASE("device sweep ring", "[device_sweep][ring]") { sweep(Algorithm::kRing); }
TEST_CASE("device sweep twoshot", "[device_sweep][twoshot]") { sweep(Algorithm::kTwoShot); }
TEST_CASE("device sweep rabenseifner", "[device_sweep][rabenseifner]") { sweep(Algorithm::kRabenseifner); }
TEST_CASE("device sweep recursive_doubling", "[device_sweep][recursive_doubling]") {
  sweep(Algorithm::kRecursiveDoubling);
}
TEST_CASE("device sweep native", "[device_sweep][native]") { sweep(Algorithm::kNative); }
TEST_CASE("device sweep hierarchical", "[device_sweep][hierarchical]") { sweep(Algorithm::kHierarchical); }
TEST_CASE("device sweep auto", "[device_sweep][auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_device_sweep_auto");
  sweep(Algorithm::kAuto);
}

TEST_CASE("device runs with the threaded launcher match the host path", "[device][threaded]") {
  for (Format format : allFormats())
    for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot})
      checkDeviceRun(algorithm, format, 3, 1000, algorithm == Algorithm::kRing, 4, algorithm == Algorithm::kTwoShot);
}

namespace {

// Runs `inputs` on the stand-in and on the host path: no error on either, the same results and the
// same error-feedback state on every rank, bit for bit. Returns the device's outcome.
DeviceOutcome requireDeviceMatchesHost(const std::vector<std::vector<float>>& inputs,
                                       const std::vector<AllreduceOptions>& options, const DeviceRunOptions& run) {
  const DeviceOutcome got = runDeviceAllreduce(kRanksPerNode, inputs, options, run);
  const DeviceOutcome host = runHostAllreduce(kRanksPerNode, inputs, options, run);
  REQUIRE_FALSE(got.anyError());
  REQUIRE_FALSE(host.anyError());
  const std::string differs = firstDifference(got, host);
  INFO("device vs host: " << differs);
  REQUIRE(differs.empty());
  for (std::size_t r = 0; r < inputs.size(); ++r) {
    INFO("rank " << r);
    REQUIRE(got.feedbackState[r] == host.feedbackState[r]);
  }
  return got;
}

}  // namespace

TEST_CASE("device error feedback matches the host path, residuals included", "[device][ef]") {
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRabenseifner,
                              Algorithm::kRecursiveDoubling, Algorithm::kHierarchical}) {
    for (const char* spec : {"table1+ef", "table4+ef", "fp8s+ef", "bf16+ef"}) {
      for (int p : {3, 4, 6}) {
        const std::size_t count = 4097;
        INFO(algorithmName(algorithm) << " " << spec << " ranks " << p);
        std::vector<std::vector<float>> inputs;
        std::vector<std::vector<float>> later;
        for (int r = 0; r < p; ++r) {
          inputs.push_back(makeInput(r, count, false));
          later.push_back(makeInput(r, count, false, kSeed + 5));
        }
        AllreduceOptions opt;
        opt.format = parseFormatSpec(spec);
        opt.algorithm = algorithm;
        opt.average = true;
        opt.key = "grad";
        DeviceRunOptions run = onStandIn();
        run.repetitions = 3;
        run.laterInputs = &later;
        run.outOfPlace = p == 4;
        DirectCounts counts;
        if (p == 6) takeDeviceMemory(run, counts, p);  // residuals with messages in device memory too
        const DeviceOutcome got = requireDeviceMatchesHost(inputs, std::vector<AllreduceOptions>(p, opt), run);
        REQUIRE(got.feedbackState[0].size() > 40);  // rank 0 quantized something: a non-empty state
      }
    }
  }
}

namespace {

// The residual slots of the one key in a saveErrorFeedback() state (layout in
// lib/communicator/communicator.cpp): magic 8, version 4, keys 4, then key length 4, key, count 8,
// algorithm 1, slots 4, and each slot's length 8 and floats.
std::vector<std::vector<float>> onlyKeysSlots(const std::vector<std::byte>& state) {
  std::size_t at = 0;
  auto take = [&](int width) {
    std::uint64_t v = 0;
    for (int i = 0; i < width; ++i) v |= static_cast<std::uint64_t>(state.at(at++)) << (8 * i);
    return v;
  };
  at = 12;
  REQUIRE(take(4) == 1);  // one key
  at += take(4) + 8 + 1;
  std::vector<std::vector<float>> slots(take(4));
  for (auto& slot : slots) {
    slot.resize(take(8));
    for (float& v : slot) v = std::bit_cast<float>(static_cast<std::uint32_t>(take(4)));
  }
  return slots;
}

}  // namespace

TEST_CASE("device error feedback forgets the residuals of overflowed sums as the host does", "[device][ef]") {
  // 40001 on every rank is finite alone in fp16 and fp8 and Inf once two are summed (recursive
  // doubling's last round adds in fp32, so its sum must overflow at the first): every rank's residual
  // there must be reset after the call (ForgetResidualsOfNonFiniteSums on the stand-in's stream), as the
  // host path does; the next call and the saved state must match the host's bit for bit.
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRecursiveDoubling,
                              Algorithm::kHierarchical}) {
    for (const char* spec : {"fp16+ef", "fp8+ef"}) {
      const int p = 4;
      const std::size_t count = 3001;
      INFO(algorithmName(algorithm) << " " << spec);
      std::vector<std::vector<float>> inputs, later;
      for (int r = 0; r < p; ++r) {
        inputs.push_back(makeInput(r, count, false));
        for (std::size_t i : {std::size_t{0}, std::size_t{1500}, count - 1}) inputs.back()[i] = 40001.0f;
        later.push_back(makeInput(r, count, false, kSeed + 5));
      }
      AllreduceOptions opt;
      opt.format = parseFormatSpec(spec);
      opt.algorithm = algorithm;
      opt.key = "grad";
      DeviceRunOptions run = onStandIn();
      run.repetitions = 2;
      run.laterInputs = &later;
      const std::vector<AllreduceOptions> options(p, opt);
      requireDeviceMatchesHost(inputs, options, run);
      // Right after the overflowing call alone, no rank keeps a residual at those positions.
      run.repetitions = 1;
      const DeviceOutcome once = runDeviceAllreduce(kRanksPerNode, inputs, options, run);
      REQUIRE_FALSE(once.anyError());
      for (int r = 0; r < p; ++r) {
        const auto slots = onlyKeysSlots(once.feedbackState[r]);
        REQUIRE_FALSE(slots.empty());
        for (const auto& slot : slots) {
          if (slot.empty()) continue;
          REQUIRE(slot.size() == count);
          for (std::size_t i : {std::size_t{0}, std::size_t{1500}, count - 1}) {
            INFO("rank " << r << " position " << i);
            REQUIRE(std::isinf(once.outputs[r][i]));
            REQUIRE(slot[i] == 0.0f);
          }
        }
      }
    }
  }
}

TEST_CASE("fastest on device buffers matches the host path with the format it chose", "[device][fastest]") {
  for (int p : {1, 3, 4}) {
    INFO("ranks " << p);
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, 1000, false));
    AllreduceOptions opt;
    opt.format = parseFormatSpec("fastest");
    opt.algorithm = Algorithm::kTwoShot;
    const DeviceOutcome got =
        runDeviceAllreduce(kRanksPerNode, inputs, std::vector<AllreduceOptions>(p, opt), onStandIn());
    REQUIRE_FALSE(got.anyError());
    const Format wire = got.stats[0].format;
    const int q = detail::quantizationsPerValue(Algorithm::kTwoShot, wire, p, (p + 1) / 2);
    REQUIRE(checkResults(inputs, got.outputs, wire, q, false, false).empty());
    AllreduceOptions hostOpt;
    hostOpt.format.format = wire;
    hostOpt.algorithm = Algorithm::kTwoShot;
    const DeviceOutcome host = runHostAllreduce(kRanksPerNode, inputs, std::vector<AllreduceOptions>(p, hostOpt));
    INFO("wire " << formatName(wire));
    REQUIRE(firstDifference(got, host).empty());
  }
}

// A missing synchronization must be a wrong result, not luck: the same two allreduces (inputs A, then
// B) on one communicator, with the stand-in told to skip the first synchronize of the second call
// (the one that makes the first encoded chunk, or hierarchical's host copy, ready before it is sent).
// The second call then sends stale bytes (the first call's) and must not give the host result for B.
TEST_CASE("a skipped synchronization gives a wrong result", "[device][deferred]") {
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRabenseifner,
                              Algorithm::kRecursiveDoubling, Algorithm::kHierarchical, Algorithm::kNative}) {
    for (const char* spec : {"bf16", "table4"}) {
      if (algorithm == Algorithm::kNative && std::string(spec) != "bf16") continue;
      const int p = 4;
      const std::size_t count = 3000;
      INFO(algorithmName(algorithm) << " " << spec);
      std::vector<std::vector<float>> a;
      std::vector<std::vector<float>> b;
      for (int r = 0; r < p; ++r) {
        a.push_back(makeInput(r, count, false));
        b.push_back(makeInput(r, count, false, kSeed + 99));
      }
      AllreduceOptions opt;
      opt.format = parseFormatSpec(spec);
      opt.algorithm = algorithm;
      const std::vector<AllreduceOptions> options(p, opt);
      DeviceRunOptions run = onStandIn();
      run.repetitions = 2;
      run.laterInputs = &b;
      run.timeoutSeconds = 20;  // a rank that fails takes the others with it (completion vote)
      const DeviceOutcome host = runHostAllreduce(kRanksPerNode, a, options, run);
      // Control: nothing skipped, the device run is the host run.
      const DeviceOutcome clean = runDeviceAllreduce(kRanksPerNode, a, options, run);
      REQUIRE_FALSE(clean.anyError());
      REQUIRE(firstDifference(clean, host).empty());
      run.beforeRepetition = skipNextSynchronizeAfterFirstCall;
      const DeviceOutcome skipped = runDeviceAllreduce(kRanksPerNode, a, options, run);
      const bool wrong = skipped.anyError() || !firstDifference(skipped, host).empty();
      CHECK(wrong);
      // Direct to a transport that takes device memory: the buffer handed over with the skipped work
      // still queued is refused on the spot (what a CUDA-aware MPI would send as stale bytes). bf16
      // native rounds on the host and stays staged: covered above.
      if (algorithm == Algorithm::kNative) continue;
      DirectCounts counts;
      takeDeviceMemory(run, counts, p);
      run.beforeRepetition = nullptr;
      const DeviceOutcome directClean = runDeviceAllreduce(kRanksPerNode, a, options, run);
      REQUIRE_FALSE(directClean.anyError());
      REQUIRE(firstDifference(directClean, host).empty());
      run.beforeRepetition = skipNextSynchronizeAfterFirstCall;
      run.timeoutSeconds = 2;  // a rank that failed alone releases the others soon
      const DeviceOutcome directSkipped = runDeviceAllreduce(kRanksPerNode, a, options, run);
      CHECK(directSkipped.anyError());
      CHECK(std::count(directSkipped.errors.begin(), directSkipped.errors.end(), ErrorCode::kInternal) > 0);
    }
  }
}

// Saved error-feedback state moves between host and device: three +ef steps on the host, against two
// on a device, saveErrorFeedback (residuals copied down), loadErrorFeedback into a fresh communicator
// on a fresh device (uploaded on first use), the third step there. The third results must be equal.
TEST_CASE("device error-feedback state saves and loads like the host's", "[device][ef]") {
  const int p = 4;
  const std::size_t count = 3001;
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kHierarchical, Algorithm::kRecursiveDoubling}) {
    INFO(algorithmName(algorithm));
    AllreduceOptions opt;
    opt.format = parseFormatSpec("table2+ef");
    opt.algorithm = algorithm;
    opt.key = "w";
    auto input = [&](int rank, int step) { return makeInput(rank, count, false, kSeed + 31u * step); };
    std::vector<std::vector<float>> hostOut(p);
    std::vector<std::vector<float>> deviceOut(p);
    {
      LoopbackGroup group(p, kRanksPerNode);
      runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
        Communicator comm(transport);
        for (int step = 0; step < 3; ++step) {
          hostOut[rank] = input(rank, step);
          comm.allreduce(hostOut[rank].data(), count, opt);
        }
      });
    }
    {
      LoopbackGroup group(p, kRanksPerNode);
      runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
        auto step = [&](Communicator& comm, CpuStandInDevice& device, int s) {
          auto* d = static_cast<float*>(device.allocate(count * sizeof(float)));
          const std::vector<float> in = input(rank, s);
          std::vector<float> out(count);
          device.copyToDevice(d, in.data(), count * sizeof(float));
          device.synchronize();
          comm.allreduce(d, count, opt);
          device.copyToHost(out.data(), d, count * sizeof(float));
          device.release(d);
          device.synchronize();
          return out;
        };
        std::vector<std::byte> saved;
        {
          auto device = std::make_shared<CpuStandInDevice>();
          Communicator comm(transport);
          comm.setDevice(device);
          step(comm, *device, 0);
          step(comm, *device, 1);
          saved = comm.saveErrorFeedback();
        }
        auto device = std::make_shared<CpuStandInDevice>();
        Communicator comm(transport);
        comm.setDevice(device);
        comm.loadErrorFeedback(saved);
        deviceOut[rank] = step(comm, *device, 2);
      });
    }
    for (int r = 0; r < p; ++r) {
      INFO("rank " << r);
      REQUIRE(std::memcmp(hostOut[r].data(), deviceOut[r].data(), count * sizeof(float)) == 0);
    }
  }
}
