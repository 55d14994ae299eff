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
// --transport mpi the encoded messages are staged through host memory by the algorithms, or with a
// CUDA-aware MPI (MPIX_Query_cuda_support) handed to it in device memory (baseline: MPI_Allreduce of
// the buffer copied to the host and back, or of the device buffer itself), with --transport nccl they go over the
// NCCL transport (baseline: ncclAllReduce of the device buffers; a second baseline row, NCCL's own fp8
// sum, where NCCL >= 2.24 and every rank's GPU is sm_90 or newer: nccl_fp8.hpp).
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
#include <stdexcept>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "../support/cuda_probe.hpp"
#include "algorithm/auto_selector.hpp"
#include "communicator/signature_hash.hpp"
#include "gpu/cuda_device_codec.hpp"
#include "transport/nccl_transport.hpp"
#include "bench_options.hpp"
#include "bench_row.hpp"
#include "nccl_fp8.hpp"
#include "rank_collectives.hpp"
#include "sweep.hpp"

namespace adaprec::bench {

// A problem every rank has agreed on before any measurement (an output that cannot be written), and
// rank 0 has already reported: the job exits 2 without MPI_Abort.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
// moreBaselines: rows after the baseline's (SweepContext); moreNote: a comment line about them.
void benchRank(const BenchOptions& options, Communicator& comm, Baseline baseline,
               detail::DeviceCodec* device = nullptr, const std::string& deviceNote = "",
               std::vector<Baseline> moreBaselines = {}, const std::string& moreNote = "") {
  RankCollectives ranks(comm.transport());
  const int nodes = ranks.nodeCount();
  // --model: the library's cost model, calibrated as auto calibrates (the same probe, or the file
  // ADAPREC_CALIBRATION names), with the codec of every format the rows use.
  std::optional<detail::Calibration> model;
  double probeSeconds = 0;
  // One rank moves nothing between ranks: no link to measure, no prediction (the probe printed a
  // 0 GB/s link and every row a '-').
  const bool modelled = options.model && ranks.size() > 1;
  if (modelled) {
    detail::RankLayout layout;
    std::map<int, int> nodeIndex;
    for (int id : ranks.nodeIds()) layout.nodeOf.push_back(nodeIndex.emplace(id, static_cast<int>(nodeIndex.size())).first->second);
    const CommunicatorOptions environment = CommunicatorOptions::fromEnvironment();
    detail::AutoSelector selector(std::move(layout), {environment.maxQuantizations, environment.calibrationPath, false,
                                                      comm.interNodeMessageBytes(), environment.segmentCount});
    const detail::DevicePlace place{device, detail::deviceDirect(comm.transport(), device)};
    for (Format format : modelFormats(options)) selector.ensureCalibration(comm.transport(), format, place);
    model = selector.calibration();
    probeSeconds = ranks.maxOverRanks(selector.probeSeconds());
  }
  const bool root = ranks.rank() == 0;
  std::string outputs;  // rank 0 writes the files: every rank stops if it cannot
  if (root) {
    for (const std::string* path : {&options.jsonPath, &options.csvPath})
      if (!path->empty() && outputs.empty()) outputs = outputProblem(*path);
  }
  // Said before the agreement: loopback ranks are threads, and the first to leave it aborts the others'
  // waits (rank 0's line was lost in 3 of 5 runs).
  if (!outputs.empty()) std::fprintf(stderr, "adaprec-bench: %s\n", outputs.c_str());
  if (ranks.anyRank(!outputs.empty())) throw UsageError("");  // every rank, rank 0 having said why
  if (root) {
    std::printf("# adaprec-bench: transport %s, %d rank(s) on %d node(s), %d timed + %d warm-up iteration(s)%s, "
                "check %s, seed %llu\n",
                comm.transport().kind(), ranks.size(), nodes, options.iterations, options.warmup,
                options.interleave ? " interleaved over each size's rows" : "", options.check ? "on" : "off",
                static_cast<unsigned long long>(options.seed));
    std::printf("# time: median over iterations of the max over ranks; speedup: %s time / row time\n",
                baseline.name.c_str());
    if (device != nullptr) std::printf("# %s\n", deviceNote.c_str());
    if (!moreNote.empty()) std::printf("# %s\n", moreNote.c_str());
    if (options.model && !modelled) std::printf("# cost model: one rank moves nothing between ranks, no predictions\n");
    if (model)
      std::printf("# cost model (lib/algorithm/cost_model.hpp, as auto calibrates it; link probe %.0f ms, 0: loaded "
                  "from ADAPREC_CALIBRATION):\n%s",
                  probeSeconds * 1e3, detail::describeCalibration(*model, "#   ").c_str());
    printLine(tableHeader(model.has_value()));
  }
  SweepContext context{options, comm, ranks, std::move(baseline), comm.transport().kind(), model ? &*model : nullptr, nullptr, nullptr, device,
                       std::move(moreBaselines)};
  context.onRow = [&](const BenchRow& row) { printLine(tableLine(row, model.has_value())); };
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

// Device buffers over MPI: the algorithms stage the encoded messages through host memory, or hand them
// to a CUDA-aware MPI in device memory. The baseline does what a program without AdaPrec would: the
// fp32 buffer down to the host, MPI_Allreduce, back up; with a CUDA-aware MPI, MPI_Allreduce of it.
void runMpiOnDevice(const BenchOptions& options, const CudaProbe& probe) {
  MPI_Comm baselineComm;
  MPI_Comm_dup(MPI_COMM_WORLD, &baselineComm);
  {
    Communicator comm = makeMpiCommunicator(MPI_COMM_WORLD);
    const std::shared_ptr<detail::DeviceCodec> device = detail::makeCudaDeviceCodec();
    comm.setDevice(device);
    auto host = std::make_shared<std::vector<float>>();
    const bool cudaAware = comm.transport().acceptsDeviceMemory(device->memorySpace());
    Baseline baseline{cudaAware ? "MPI_Allreduce" : "MPI_Allreduce+copies",
                      [baselineComm, device, host, cudaAware](const float* send, float* recv, std::size_t count) {
                        if (cudaAware) {
                          device->synchronize();
                          const int rc = MPI_Allreduce(send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, baselineComm);
                          ADAPREC_CHECK(rc == MPI_SUCCESS, ErrorCode::kTransport, "MPI_Allreduce returned " << rc);
                          return;
                        }
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
              deviceNote(probe, cudaAware ? "CUDA-aware MPI: messages handed to MPI in device memory; baseline: "
                                            "MPI_Allreduce of the device buffers"
                                          : "messages staged through host memory by the algorithms (MPI is not "
                                            "CUDA-aware); baseline: the buffer copied to the host, MPI_Allreduce, "
                                            "copied back"));
  }
  MPI_Comm_free(&baselineComm);
}

void checkNccl(detail::NcclApi& api, detail::NcclResult result, const char* call) {
  ADAPREC_CHECK(result == detail::NcclResult::kSuccess, ErrorCode::kTransport,
                "NCCL " << call << ": " << api.errorString(result) << " " << api.lastError());
}

// The e5m2 send and receive buffers of the fp8 baseline, grown on demand: the first (untimed warm-up)
// call of each size allocates, so no timed call does.
class NcclFp8Buffers {
 public:
  explicit NcclFp8Buffers(std::shared_ptr<detail::NcclApi> api) : api_(std::move(api)) {}
  ~NcclFp8Buffers() { release(); }
  NcclFp8Buffers(const NcclFp8Buffers&) = delete;
  NcclFp8Buffers& operator=(const NcclFp8Buffers&) = delete;

  void reserve(std::size_t count) {
    if (count <= capacity_) return;
    release();
    void* memory = nullptr;
    const std::size_t stride = (count + 255) / 256 * 256;  // recv 256-byte aligned, as cudaMalloc's
    checkNccl(*api_, api_->deviceAlloc(&memory, 2 * stride), "cudaMalloc");
    send = static_cast<std::uint8_t*>(memory);
    recv = send + stride;
    capacity_ = count;
  }
  void release() {
    if (send != nullptr) api_->deviceFree(send);
    send = recv = nullptr;
    capacity_ = 0;
  }

  std::uint8_t* send = nullptr;
  std::uint8_t* recv = nullptr;

 private:
  std::shared_ptr<detail::NcclApi> api_;
  std::size_t capacity_ = 0;
};

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
    transportOptions.stageThroughDevice = true;  // device messages go as they are; the library's host ones staged
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
    // NCCL's own fp8 sum: a row only where every rank can run it (NCCL checks the smallest compute
    // capability of the communicator).
    const std::string unsupported = ncclFp8Unsupported();
    int fp8Everywhere = unsupported.empty() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &fp8Everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    std::vector<Baseline> moreBaselines;
    auto fp8 = std::make_shared<NcclFp8Buffers>(api);
    std::string fp8Note;
    if (fp8Everywhere != 0) {
      // One e5m2 rounding of the input, then one per addition (p-1 in any order NCCL picks): p
      // quantizations, within the p+1 the #wrong check allows (result_check.hpp).
      moreBaselines.push_back({"ncclAllReduce",
                               [api, ncclComm, stream, fp8](const float* send, float* recv, std::size_t count) {
                                 fp8->reserve(count);
                                 void* cudaStream = reinterpret_cast<void*>(stream);
                                 floatToE5m2(send, fp8->send, count, cudaStream);
                                 checkNccl(*api, api->allReduceSum(fp8->send, fp8->recv, count,
                                                                   detail::NcclDataType::kFloat8e5m2, ncclComm, stream),
                                           "ncclAllReduce(ncclFloat8e5m2)");
                                 e5m2ToFloat(fp8->recv, recv, count, cudaStream);
                                 checkNccl(*api, api->streamSynchronize(stream, ncclComm, std::chrono::milliseconds(0)),
                                           "cudaStreamSynchronize");
                               },
                               Format::kFp8, size});
      fp8Note = "second baseline, format fp8: the buffer converted to e5m2 on the device (RNE, saturating), "
                "ncclAllReduce(ncclFloat8e5m2), converted back, timed together";
    } else {
      fp8Note = "fp8 baseline ncclAllReduce(ncclFloat8e5m2) skipped: " +
                (unsupported.empty() ? std::string("needs sm_90 or newer on every rank; another rank's GPU is older")
                                     : unsupported);
    }
    benchRank(options, comm, std::move(baseline), device.get(),
              deviceNote(probe, "messages over the NCCL transport in device memory (no staging); baseline: "
                                "ncclAllReduce of the device buffers"),
              std::move(moreBaselines), fp8Note);
    fp8->release();
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

// Whether every rank was given the same arguments (argv[0] aside: the path may differ between nodes).
// Ranks started with different ones (an MPMD launch, a per-rank wrapper script) time different sizes
// and rows, and failed far from the cause (MPI_ERR_TRUNCATE in a baseline) or could wait for each other
// for ever. Compared before parsing, so that every rank also parses alike: a usage error (exit 2) is
// then every rank's. Rank 0 says which ranks differ and what it was given.
bool sameCommandLine(int argc, char** argv, int worldRank, int worldSize) {
  std::string line;
  std::uint64_t hash = detail::kFnv1aStart;
  for (int i = 1; i < argc; ++i) {
    hash = detail::fnv1a(std::string_view(argv[i], std::strlen(argv[i]) + 1), hash);  // with its NUL: "a b" != "a" "b"
    line += std::string(line.empty() ? "" : " ") + argv[i];
  }
  std::vector<std::uint64_t> hashes(static_cast<std::size_t>(worldSize));
  MPI_Allgather(&hash, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  std::string differing;
  for (int r = 1; r < worldSize; ++r) {
    if (hashes[static_cast<std::size_t>(r)] != hashes[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (differing.empty()) return true;
  if (worldRank == 0) {
    std::fprintf(stderr,
                 "adaprec-bench: rank(s) %s were given other arguments than rank 0 (\"%s\"); every rank must run "
                 "the same command line\n",
                 differing.c_str(), line.c_str());
  }
  return false;
}

int run(int argc, char** argv) {
  int worldRank = 0;
  int worldSize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  if (!sameCommandLine(argc, argv, worldRank, worldSize)) return 2;
  BenchOptions options;
  int exitCode = 0;
  if (!parseBenchOptions(argc, argv, worldRank == 0, options, exitCode)) return exitCode;
  if (options.cudaDevice || options.transport == TransportKind::kNccl) return runOnDevice(options, worldRank);
  if (options.transport == TransportKind::kLoopback) {
    if (worldSize != 1) {  // a usage error every rank sees alike: one line, exit 2, no MPI_Abort
      if (worldRank == 0)
        std::fprintf(stderr, "adaprec-bench: --transport loopback runs its ranks as threads: start it without "
                             "mpirun (or with -np 1), not with %d processes\n", worldSize);
      return 2;
    }
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
  } catch (const adaprec::bench::UsageError&) {
    exitCode = 2;  // every rank is here, agreed; the job ends as for a command-line error
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec-bench: %s\n", adaprec::messageForUsers(e).c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  // The table went to a full disk or /dev/full: the run's results are lost, which exit 0 would hide.
  if (!adaprec::standardStreamsComplete() && exitCode == 0) {
    std::fprintf(stderr, "adaprec-bench: cannot write the results to standard output\n");
    exitCode = 1;
  }
  MPI_Finalize();
  return exitCode;
}
