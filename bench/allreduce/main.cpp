// adaprec-bench: the precision-sweep allreduce benchmark. For every size of the sweep it times native
// MPI_Allreduce fp32 on the same buffers (the baseline, always printed), then AdaPrec's allreduce in
// every requested format x algorithm, and prints nccl-tests-style rows: time, algbw, busbw, wirebw,
// compression ratio, error vs the fp64 reference, #wrong and speedup over the baseline. Columns and
// formulas: docs/benchmarks.md.
//
//   mpirun -np 4 adaprec-bench -b 4 -e 256M -f 4 --formats all --algos all -J out.json
//   adaprec-bench --transport loopback --ranks 4 -b 1M -e 64M --formats fp32,fp8 --model
//   tools/vcluster run --nodes 4 --rate 1gbit -- adaprec-bench -b 64M -e 64M --formats all
//   mpirun -np 4 adaprec-bench --device cuda [--transport nccl] -b 1M -e 256M --formats all
//
// --device cuda (a -Dcuda=enabled build and a GPU per rank; exit 77 without one): the buffers live on
// the device and reach the engine through Communicator::setDevice with the CUDA device codec; with
// --transport mpi the encoded messages are staged through host memory by the algorithms (baseline:
// MPI_Allreduce of the buffer copied to the host and back), with --transport nccl they go over the
// NCCL transport (baseline: ncclAllReduce of the device buffers).
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "adaprec/communicator.hpp"
#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "../support/cuda_probe.hpp"
#include "algorithm/auto_selector.hpp"
#include "gpu/cuda_device_codec.hpp"
#include "transport/nccl_transport.hpp"
#include "bench_options.hpp"
#include "bench_row.hpp"
#include "rank_collectives.hpp"
#include "sweep.hpp"

namespace adaprec::bench {
namespace {

// Wire formats whose codec the cost model must know: the fixed ones asked for, every one for fastest.
std::vector<Format> modelFormats(const BenchOptions& options) {
  std::set<Format> formats;
  for (const FormatSpec& spec : options.formats) {
    if (spec.selection == Selection::kFixed) {
      formats.insert(spec.format);
    } else {
      for (Format format : allFormats()) formats.insert(format);
    }
  }
  return {formats.begin(), formats.end()};
}

void printLine(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Runs the sweep on one rank; rank 0 prints and writes the files.
// device: --device cuda's codec (the buffers live there), described by deviceNote; null: host memory.
void benchRank(const BenchOptions& options, Communicator& comm, Baseline baseline,
               detail::DeviceCodec* device = nullptr, const std::string& deviceNote = "") {
  RankCollectives ranks(comm.transport());
  const int nodes = ranks.nodeCount();
  // --model: the library's cost model, calibrated as auto calibrates (the same probe, or the file
  // ADAPREC_CALIBRATION names), with the codec of every format the rows use.
  std::optional<detail::Calibration> model;
  double probeSeconds = 0;
  if (options.model) {
    detail::RankLayout layout;
    std::map<int, int> nodeIndex;
    for (int id : ranks.nodeIds()) layout.nodeOf.push_back(nodeIndex.emplace(id, static_cast<int>(nodeIndex.size())).first->second);
    const CommunicatorOptions environment = CommunicatorOptions::fromEnvironment();
    detail::AutoSelector selector(std::move(layout), {environment.maxQuantizations, environment.calibrationPath, false});
    for (Format format : modelFormats(options)) selector.ensureCalibration(comm.transport(), format);
    model = selector.calibration();
    probeSeconds = ranks.maxOverRanks(selector.probeSeconds());
  }
  const bool root = ranks.rank() == 0;
  if (root) {
    std::printf("# adaprec-bench: transport %s, %d rank(s) on %d node(s), %d timed + %d warm-up iteration(s), "
                "check %s, seed %llu\n",
                comm.transport().kind(), ranks.size(), nodes, options.iterations, options.warmup,
                options.check ? "on" : "off", static_cast<unsigned long long>(options.seed));
    std::printf("# time: median over iterations of the max over ranks; speedup: %s time / row time\n",
                baseline.name.c_str());
    if (device != nullptr) std::printf("# %s\n", deviceNote.c_str());
    if (model)
      std::printf("# cost model (lib/algorithm/cost_model.hpp, as auto calibrates it; link probe %.0f ms, 0: loaded "
                  "from ADAPREC_CALIBRATION):\n%s",
                  probeSeconds * 1e3, detail::describeCalibration(*model, "#   ").c_str());
    printLine(tableHeader(options.model));
  }
  SweepContext context{options, comm, ranks, std::move(baseline), comm.transport().kind(), model ? &*model : nullptr, nullptr, nullptr, device};
  context.onRow = [&](const BenchRow& row) { printLine(tableLine(row, options.model)); };
  context.onNote = [](const std::string& note) { printLine("# " + note); };
  const std::vector<BenchRow> rows = runSweep(context);
  if (root && !options.jsonPath.empty()) writeJson(options.jsonPath, rows);
  if (root && !options.csvPath.empty()) writeCsv(options.csvPath, rows);
}

void runMpi(const BenchOptions& options) {
  MPI_Comm baselineComm;
  MPI_Comm_dup(MPI_COMM_WORLD, &baselineComm);
  Communicator comm = makeMpiCommunicator(MPI_COMM_WORLD);
  Baseline baseline{"MPI_Allreduce", [baselineComm](const float* send, float* recv, std::size_t count) {
                      const int rc = MPI_Allreduce(send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, baselineComm);
                      ADAPREC_CHECK(rc == MPI_SUCCESS, ErrorCode::kTransport, "MPI_Allreduce returned " << rc);
                    }};
  benchRank(options, comm, std::move(baseline));
  MPI_Comm_free(&baselineComm);
}

// Ranks as threads of this process; the baseline is the loopback transport's own fp32 sum.
void runLoopback(const BenchOptions& options) {
  LoopbackGroup group(options.loopbackRanks, options.loopbackRanksPerNode);
  adaprec::runLoopback(group, [&](int, std::shared_ptr<Transport> transport) {
    Communicator comm(transport);
    Transport* raw = transport.get();
    Baseline baseline{"loopback_native", [raw](const float* send, float* recv, std::size_t count) {
                        std::memcpy(recv, send, count * sizeof(float));
                        raw->nativeAllreduce(recv, count, NativeType::kFp32);
                      }};
    benchRank(options, comm, std::move(baseline));
  });
}

// --- --device cuda ------------------------------------------------------------------------------------

// Where this process sits: its index among the ranks of its node (which GPU it takes) and the node's
// first world rank (the node's id for the NCCL transport).
struct NodePlace {
  int localRank = 0;
  int nodeLeader = 0;
};

NodePlace nodePlace() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  NodePlace place;
  MPI_Comm_rank(node, &place.localRank);
  MPI_Comm_rank(MPI_COMM_WORLD, &place.nodeLeader);
  MPI_Bcast(&place.nodeLeader, 1, MPI_INT, 0, node);
  MPI_Comm_free(&node);
  return place;
}

std::string deviceNote(const CudaProbe& probe, const char* path) {
  return "device: CUDA " + probe.description + " (rank 0's); buffers on the device through " +
         "Communicator::setDevice (the CUDA device codec); " + path;
}

// Device buffers over MPI: the algorithms stage the encoded messages through host memory. The baseline
// does what a program without AdaPrec would: the fp32 buffer down to the host, MPI_Allreduce, back up.
void runMpiOnDevice(const BenchOptions& options, const CudaProbe& probe) {
  MPI_Comm baselineComm;
  MPI_Comm_dup(MPI_COMM_WORLD, &baselineComm);
  {
    Communicator comm = makeMpiCommunicator(MPI_COMM_WORLD);
    const std::shared_ptr<detail::DeviceCodec> device = detail::makeCudaDeviceCodec();
    comm.setDevice(device);
    auto host = std::make_shared<std::vector<float>>();
    Baseline baseline{"MPI_Allreduce+copies", [baselineComm, device, host](const float* send, float* recv, std::size_t count) {
                        host->resize(count);
                        device->copyToHost(host->data(), send, count * sizeof(float));
                        device->synchronize();
                        const int rc = MPI_Allreduce(MPI_IN_PLACE, host->data(), static_cast<int>(count), MPI_FLOAT,
                                                     MPI_SUM, baselineComm);
                        ADAPREC_CHECK(rc == MPI_SUCCESS, ErrorCode::kTransport, "MPI_Allreduce returned " << rc);
                        device->copyToDevice(recv, host->data(), count * sizeof(float));
                        device->synchronize();
                      }};
    benchRank(options, comm, std::move(baseline), device.get(),
              deviceNote(probe, "messages staged through host memory by the algorithms; baseline: the buffer "
                                "copied to the host, MPI_Allreduce, copied back"));
  }
  MPI_Comm_free(&baselineComm);
}

void checkNccl(detail::NcclApi& api, detail::NcclResult result, const char* call) {
  ADAPREC_CHECK(result == detail::NcclResult::kSuccess, ErrorCode::kTransport,
                "NCCL " << call << ": " << api.errorString(result) << " " << api.lastError());
}

// Device buffers over the NCCL transport (one communicator over all ranks, bootstrapped over MPI), the
// device codec on the same stream; the baseline is ncclAllReduce of the device buffers.
void runNcclOnDevice(const BenchOptions& options, const CudaProbe& probe, const NodePlace& place) {
  const std::shared_ptr<detail::NcclApi> api = detail::makeRealNcclApi();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  detail::NcclUniqueId id;
  if (rank == 0) checkNccl(*api, api->getUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(id.bytes, sizeof id.bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
  detail::NcclStream stream = nullptr;
  checkNccl(*api, api->streamCreate(&stream), "cudaStreamCreate");
  detail::NcclComm ncclComm = nullptr;
  checkNccl(*api, api->commInitRank(&ncclComm, size, id, rank), "ncclCommInitRank");
  {
    detail::NcclTransportOptions transportOptions;
    transportOptions.nodeId = place.nodeLeader;
    transportOptions.jobRank = rank;
    transportOptions.stageThroughDevice = true;  // the engine's messages are host memory (the device seam stages)
    transportOptions.ownsComm = false;           // the baseline uses it too; destroyed below
    auto transport = std::make_shared<detail::NcclTransport>(api, ncclComm, stream, transportOptions);
    Communicator comm(transport);
    const std::shared_ptr<detail::DeviceCodec> device = detail::makeCudaDeviceCodec(stream);
    comm.setDevice(device);
    Baseline baseline{"ncclAllReduce", [api, ncclComm, stream](const float* send, float* recv, std::size_t count) {
                        checkNccl(*api, api->allReduceSum(send, recv, count, detail::NcclDataType::kFloat32, ncclComm, stream),
                                  "ncclAllReduce");
                        checkNccl(*api, api->streamSynchronize(stream, ncclComm, std::chrono::milliseconds(0)),
                                  "cudaStreamSynchronize");
                      }};
    benchRank(options, comm, std::move(baseline), device.get(),
              deviceNote(probe, "messages over the NCCL transport (staged through device scratch); baseline: "
                                "ncclAllReduce of the device buffers"));
  }
  checkNccl(*api, api->commDestroy(ncclComm), "ncclCommDestroy");
  checkNccl(*api, api->streamDestroy(stream), "cudaStreamDestroy");
}

// --device cuda / --transport nccl: the same answer on every rank (so every rank leaves without
// MPI_Abort), printed once: 2 for a usage error, 1 for a build without CUDA or NCCL, 77 (skipped)
// when a rank sees no CUDA device.
int runOnDevice(const BenchOptions& options, int worldRank) {
  const auto say = [&](const std::string& line) {
    if (worldRank == 0) std::fprintf(stderr, "adaprec-bench: %s\n", line.c_str());
  };
  if (!options.cudaDevice) {
    say("--transport nccl moves device buffers: add --device cuda");
    return 2;
  }
  if (options.transport == TransportKind::kLoopback) {
    say("--device cuda runs over --transport mpi or nccl (with mpirun); --transport loopback drives host buffers");
    return 2;
  }
  const NodePlace place = nodePlace();
  const CudaProbe probe = selectCudaDevice(place.localRank);
  if (probe.availability == CudaAvailability::kNotBuilt) {  // the same on every rank: one build
    say("--device cuda: " + probe.description);
    return 1;
  }
  if (options.transport == TransportKind::kNccl && detail::makeRealNcclApi() == nullptr) {
    say("--transport nccl: this build has no NCCL: configure with -Dnccl=enabled (NCCL under -Dcuda-root)");
    return 1;
  }
  int firstWithout = probe.availability == CudaAvailability::kReady ? INT_MAX : worldRank;
  MPI_Allreduce(MPI_IN_PLACE, &firstWithout, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (firstWithout != INT_MAX) {
    if (worldRank == firstWithout) {
      std::fprintf(stderr, "adaprec-bench: --device cuda: %s%s; nothing timed (exit 77: skipped)\n",
                   worldRank == 0 ? "" : ("rank " + std::to_string(worldRank) + ": ").c_str(), probe.description.c_str());
    }
    return kSkippedExit;
  }
  if (options.transport == TransportKind::kNccl) {
    runNcclOnDevice(options, probe, place);
  } else {
    runMpiOnDevice(options, probe);
  }
  return 0;
}

int run(int argc, char** argv) {
  int worldRank = 0;
  int worldSize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  BenchOptions options;
  int exitCode = 0;
  if (!parseBenchOptions(argc, argv, worldRank == 0, options, exitCode)) return exitCode;
  if (options.cudaDevice || options.transport == TransportKind::kNccl) return runOnDevice(options, worldRank);
  if (options.transport == TransportKind::kLoopback) {
    ADAPREC_CHECK_ARG(worldSize == 1, "--transport loopback runs its ranks as threads: start it without mpirun "
                                      "(or with -np 1), not with " << worldSize << " processes");
    runLoopback(options);
  } else {
    runMpi(options);
  }
  return 0;
}

}  // namespace
}  // namespace adaprec::bench

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int exitCode = 1;
  try {
    exitCode = adaprec::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec-bench: %s\n", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return exitCode;
}
