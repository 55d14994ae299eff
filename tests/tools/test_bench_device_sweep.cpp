// adaprec-bench's measurement loop (bench/allreduce/sweep.cpp) with its buffers on a device, run here on
// the CPU stand-in of a device (tests/loopback/cpu_device.hpp: deferred stream, addresses the host
// cannot dereference) over loopback ranks: what --device cuda does on a GPU, short of the GPU. The rows
// must be the host sweep's (same formats, algorithms and skips, #wrong 0, the same maxerr and ratio:
// the device path reduces bit-identically), so the upload of the input, the zeroed output and the
// copy back before the check are where they must be.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/transport.hpp"
#include "bench_options.hpp"
#include "cpu_device.hpp"
#include "rank_collectives.hpp"
#include "sweep.hpp"

namespace {

using namespace adaprec;
using namespace adaprec::bench;

std::vector<BenchRow> sweepRows(const BenchOptions& options, bool onDevice) {
  LoopbackGroup group(3, 0);
  std::vector<BenchRow> rows;
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    Communicator comm(transport);
    RankCollectives ranks(comm.transport());
    std::shared_ptr<test::CpuStandInDevice> device;
    Transport* raw = transport.get();
    Baseline baseline{"loopback_native", [raw](const float* send, float* recv, std::size_t count) {
                        std::memcpy(recv, send, count * sizeof(float));
                        raw->nativeAllreduce(recv, count, NativeType::kFp32);
                      }};
    if (onDevice) {
      device = std::make_shared<test::CpuStandInDevice>();
      comm.setDevice(device);
      auto host = std::make_shared<std::vector<float>>();
      baseline.allreduce = [raw, device, host](const float* send, float* recv, std::size_t count) {
        host->resize(count);
        device->copyToHost(host->data(), send, count * sizeof(float));
        device->synchronize();
        raw->nativeAllreduce(host->data(), count, NativeType::kFp32);
        device->copyToDevice(recv, host->data(), count * sizeof(float));
        device->synchronize();
      };
    }
    SweepContext context{options, comm, ranks, baseline, "loopback", nullptr, nullptr, nullptr, device.get()};
    std::vector<BenchRow> mine = runSweep(context);
    if (rank == 0) rows = std::move(mine);
  });
  return rows;
}

}  // namespace

TEST_CASE("adaprec-bench's sweep on device buffers gives the host sweep's rows", "[bench_device]") {
  BenchOptions options;
  options.minBytes = 4;
  options.maxBytes = 16 << 10;
  options.factor = 16;
  options.iterations = 1;
  options.warmup = 0;
  options.formats = parseFormatList("fp32,bf16,fp8s,table4,table4+ef");
  // Not auto: it chooses from measured times, which differ between the two runs.
  options.algorithms = parseAlgorithmList("ring,twoshot,rabenseifner,recursive_doubling,hierarchical,native");
  // Rows one after another, and --interleave's rounds (each row checked after its warm-up, the
  // error-feedback row's residuals kept under its own key while the others run).
  options.interleave = GENERATE(false, true);
  INFO("interleave " << options.interleave);
  const std::vector<BenchRow> host = sweepRows(options, false);
  const std::vector<BenchRow> device = sweepRows(options, true);
  REQUIRE(host.size() > 20);
  REQUIRE(device.size() == host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    INFO(host[i].format << " x " << host[i].algo << " at " << host[i].count << " elements");
    CHECK(device[i].format == host[i].format);
    CHECK(device[i].algo == host[i].algo);
    CHECK(device[i].count == host[i].count);
    REQUIRE(device[i].wrong.has_value());
    REQUIRE(host[i].maxerr.has_value());
    REQUIRE(device[i].maxerr.has_value());
    CHECK(*device[i].wrong == 0);
    CHECK(*device[i].maxerr == *host[i].maxerr);
    CHECK(device[i].ratio == host[i].ratio);
  }
}
