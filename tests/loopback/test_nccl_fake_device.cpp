// Device buffers over the NCCL transport, as adaprecNcclAllReduce runs them (issue 17): each rank's
// buffers on its own CPU stand-in of a device (cpu_device.hpp), the codec on its deferred stream, and
// the encoded messages handed to NCCL in device memory with no copy through the host (NCCL moves device
// memory; NcclTransport stages only the library's own host messages). The NCCL fake moves the stand-in's
// memory through StandInNcclApi, which refuses a buffer handed over while the stand-in still has work
// queued. Every algorithm (auto too) x fp32, bf16, fp8s, table4, table4+ef x ranks 1..5, 8 x counts,
// in and out of place: the host sweep's properties, bit-identical on every rank and to the loopback
// host path with what ran; and nothing staged: only received chunks' 16-byte headers come down.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "adaprec/codec.hpp"
#include "cpu_device.hpp"
#include "device_run.hpp"
#include "engine_check.hpp"
#include "nccl_fake_run.hpp"
#include "stand_in_nccl_api.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

constexpr int kRanksPerNode = 2;

// Runs on the NCCL fake with one stand-in per rank; after the run, what each rank's device copied
// between host and device and how many NCCL operations got its device memory.
struct NcclDeviceRun {
  std::vector<std::shared_ptr<CpuStandInDevice>> devices;
  std::vector<std::shared_ptr<StandInNcclApi>> apis;
  DeviceRunOptions run;

  explicit NcclDeviceRun(int p) : devices(p), apis(p) {
    for (auto& d : devices) d = std::make_shared<CpuStandInDevice>();
    run.makeDevice = [this](int rank) { return devices[rank]; };
    run.flush = [](detail::DeviceCodec& device) { static_cast<CpuStandInDevice&>(device).drain(); };
    run.runRanks = [this](int ranks, int ranksPerNode, const std::function<void(int, std::shared_ptr<Transport>)>& body) {
      RunSetup setup{ranks, ranksPerNode, true};  // stageThroughDevice: host messages staged, as adaprecNcclAllReduce
      setup.rankApi = [this](int rank, const std::shared_ptr<detail::NcclFake>& fake) {
        apis[rank] = std::make_shared<StandInNcclApi>(fake, *devices[rank]);
        return apis[rank];
      };
      runOnNcclFake(setup, body);
    };
  }
};

void check(Algorithm algorithm, const char* spec, int p, std::size_t count, bool outOfPlace) {
  AllreduceOptions opt;
  opt.format = parseFormatSpec(spec);
  opt.algorithm = algorithm;
  opt.key = "grad";
  const Format format = opt.format.format;
  const bool integers = isLossless(format);
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<float>> later;
  for (int r = 0; r < p; ++r) {
    inputs.push_back(makeInput(r, count, integers));
    later.push_back(makeInput(r, count, integers, kSeed + 3));
  }
  INFO("algorithm " << algorithmName(algorithm) << " format " << spec << " ranks " << p << " count " << count
                    << " outOfPlace " << outOfPlace);
  NcclDeviceRun nccl(p);
  nccl.run.outOfPlace = outOfPlace;
  // The second call uses the first's residuals. Not for auto, whose trial runs native first and its
  // pick second (the replay call by call is nccl-fake-sweep-auto's, on host buffers).
  nccl.run.repetitions = opt.format.errorFeedback && algorithm != Algorithm::kAuto ? 2 : 1;
  nccl.run.laterInputs = &later;
  const std::vector<AllreduceOptions> options(p, opt);
  const DeviceOutcome got = runDeviceAllreduce(kRanksPerNode, inputs, options, nccl.run);
  if (got.anyError()) {
    REQUIRE(algorithm == Algorithm::kNative);  // native refuses lossy formats, on every rank
    REQUIRE(got.allErrors(ErrorCode::kUnsupported));
    return;
  }
  const Algorithm ran = got.stats[0].algorithm;
  const Format wire = got.stats[0].format;
  if (algorithm != Algorithm::kAuto) REQUIRE(ran == algorithm);
  if (nccl.run.repetitions == 1) {
    const int nodes = (p + kRanksPerNode - 1) / kRanksPerNode;
    const int q = detail::quantizationsPerValue(ran, wire, p, nodes);
    const std::string failure = checkResults(inputs, got.outputs, wire, q, integers && isLossless(wire), false);
    INFO("ran " << algorithmName(ran) << " wire " << formatName(wire) << ": " << failure);
    REQUIRE(failure.empty());
  }
  const DeviceOutcome host = runHostAsRan(kRanksPerNode, inputs, opt, got, nccl.run);
  REQUIRE_FALSE(host.anyError());
  const std::string differs = firstDifference(got, host);
  INFO("over NCCL on device memory vs loopback on host memory: " << differs);
  REQUIRE(differs.empty());
  if (got.feedbackState[0].size() > 0) REQUIRE(got.feedbackState == host.feedbackState);
  // Nothing staged: besides the run's own input and result copies only 16-byte headers came down
  // (native's 16-bit sums round on the host and stay staged).
  // Error feedback is left out: saveErrorFeedback copies the residuals down.
  if (p > 1 && count >= 1000 && !opt.format.errorFeedback && !(ran == Algorithm::kNative && wire != Format::kFp32)) {
    const std::size_t ownCopies = 2 * count * sizeof(float);
    for (int r = 0; r < p; ++r) {
      const std::size_t copied = nccl.devices[r]->hostDeviceCopyBytes();
      INFO("rank " << r << ": " << copied << " bytes copied, " << nccl.apis[r]->deviceOperations()
                   << " NCCL operations on device memory");
      REQUIRE(nccl.apis[r]->deviceOperations() > 0);
      REQUIRE(copied >= ownCopies);
      REQUIRE((copied - ownCopies) % kChunkHeaderBytes == 0);
      REQUIRE(copied - ownCopies <= count);
    }
  }
}

void sweep(Algorithm algorithm) {
  for (const char* spec : {"fp32", "bf16", "fp8s", "table4", "table4+ef"})
    for (int p : {1, 2, 3, 4, 5, 8})
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65539}})
        check(algorithm, spec, p, count, (count + static_cast<std::size_t>(p)) % 2 == 1);
}

}  // namespace

TEST_CASE("NCCL device ring", "[nccl_device][ring]") { sweep(Algorithm::kRing); }
TEST_CASE("NCCL device twoshot", "[nccl_device][twoshot]") { sweep(Algorithm::kTwoShot); }
TEST_CASE("NCCL device rabenseifner", "[nccl_device][rabenseifner]") { sweep(Algorithm::kRabenseifner); }
TEST_CASE("NCCL device recursive_doubling", "[nccl_device][recursive_doubling]") {
  sweep(Algorithm::kRecursiveDoubling);
}
TEST_CASE("NCCL device native", "[nccl_device][native]") { sweep(Algorithm::kNative); }
TEST_CASE("NCCL device hierarchical", "[nccl_device][hierarchical]") { sweep(Algorithm::kHierarchical); }
TEST_CASE("NCCL device auto", "[nccl_device][auto]") { sweep(Algorithm::kAuto); }

// A device buffer handed to NCCL with the codec's work still queued (a missing synchronization between
// the codec's stream and NCCL's) is refused, not sent stale: the stand-in skips one synchronization.
TEST_CASE("NCCL device: a skipped synchronization is refused", "[nccl_device][deferred]") {
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kHierarchical}) {
    INFO(algorithmName(algorithm));
    const int p = 4;
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, 3000, false));
    AllreduceOptions opt;
    opt.format = parseFormatSpec("table4");
    opt.algorithm = algorithm;
    NcclDeviceRun nccl(p);
    nccl.run.timeoutSeconds = 2;
    nccl.run.repetitions = 2;
    nccl.run.beforeRepetition = skipNextSynchronizeAfterFirstCall;
    bool refused = false;
    try {
      const DeviceOutcome got = runDeviceAllreduce(kRanksPerNode, inputs, std::vector<AllreduceOptions>(p, opt), nccl.run);
      refused = got.anyError();
    } catch (const Error& e) {
      refused = e.code() == ErrorCode::kTransport || e.code() == ErrorCode::kInternal;
      INFO(e.what());
    }
    CHECK(refused);
  }
}
