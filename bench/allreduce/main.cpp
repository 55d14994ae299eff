// adaprec-bench: the precision-sweep allreduce benchmark. For every size of the sweep it times native
// MPI_Allreduce fp32 on the same buffers (the baseline, always printed), then AdaPrec's allreduce in
// every requested format x algorithm, and prints nccl-tests-style rows: time, algbw, busbw, wirebw,
// compression ratio, error vs the fp64 reference, #wrong and speedup over the baseline. Columns and
// formulas: docs/benchmarks.md.
//
//   mpirun -np 4 adaprec-bench -b 4 -e 256M -f 4 --formats all --algos all -J out.json
//   adaprec-bench --transport loopback --ranks 4 -b 1M -e 64M --formats fp32,fp8 --model
//   tools/vcluster run --nodes 4 --rate 1gbit -- adaprec-bench -b 64M -e 64M --formats all
#include <mpi.h>

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
#include "algorithm/auto_selector.hpp"
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
void benchRank(const BenchOptions& options, Communicator& comm, Baseline baseline) {
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
    if (model)
      std::printf("# cost model (lib/algorithm/cost_model.hpp, as auto calibrates it; link probe %.0f ms, 0: loaded "
                  "from ADAPREC_CALIBRATION):\n%s",
                  probeSeconds * 1e3, detail::describeCalibration(*model, "#   ").c_str());
    printLine(tableHeader(options.model));
  }
  SweepContext context{options, comm, ranks, std::move(baseline), comm.transport().kind(), model ? &*model : nullptr, nullptr, nullptr};
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

int run(int argc, char** argv) {
  int worldRank = 0;
  int worldSize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  BenchOptions options;
  int exitCode = 0;
  if (!parseBenchOptions(argc, argv, worldRank == 0, options, exitCode)) return exitCode;
  if (options.cudaDevice || options.transport == TransportKind::kNccl) {
    // Same answer on every rank, so every rank can leave without MPI_Abort.
    if (worldRank == 0) {
      std::fprintf(stderr, "adaprec-bench: this benchmark drives host buffers over --transport mpi or loopback; "
                           "--device cuda and --transport nccl are not available in it\n");
    }
    return 2;
  }
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
