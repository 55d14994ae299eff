// MPI suite: the loopback properties through real processes. Every algorithm x a set of formats x
// counts {0, 1, 7, p-1, 1000, 2^16+3}: exact for lossless formats on integer inputs, within the
// documented bound otherwise, bit-identical on every rank (hash of the result agreed by all ranks);
// mismatched counts/formats give kMismatch on every rank; error feedback and averaging; chooseFastest
// agreement. Every rank regenerates every rank's input (fixed seed) to build the fp64 reference.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <sstream>
#include <vector>

#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "engine_check.hpp"
#include "mpi_verdict.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

std::string describe(Algorithm a, std::string_view format, std::size_t count) {
  std::ostringstream os;
  os << algorithmName(a) << " " << format << " count " << count << " seed " << kSeed;
  return os.str();
}

int run() {
  int rank = 0;
  int p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Verdict verdict(MPI_COMM_WORLD);
  Communicator comm = makeMpiCommunicator(MPI_COMM_WORLD);
  verdict.check(comm.rank() == rank && comm.size() == p, "communicator rank/size");
  std::vector<int> nodeIds(p);
  int myNode = comm.transport().nodeId();
  PMPI_Allgather(&myNode, 1, MPI_INT, nodeIds.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::sort(nodeIds.begin(), nodeIds.end());
  const int nodes = static_cast<int>(std::unique(nodeIds.begin(), nodeIds.end()) - nodeIds.begin());
  {
    // A split keeps each rank's node and orders ranks by key.
    std::unique_ptr<Transport> reversed = comm.transport().split(0, p - rank);
    verdict.check(reversed->nodeId() == myNode && reversed->rank() == p - 1 - rank &&
                      reversed->size() == p,
                  "split transport: node, rank or size wrong");
  }

  const char* formats[] = {"fp32", "bf16", "fp16", "fp8", "fp8s", "e4m3", "table1", "table3", "table8"};
  const std::size_t counts[] = {0, 1, 7, static_cast<std::size_t>(p - 1), 1000, 65539};
  int caseIndex = 0;
  for (Algorithm algorithm : allAlgorithms()) {
    for (const char* formatText : formats) {
      const Format format = parseFormat(formatText);
      for (std::size_t count : counts) {
        const std::string what = describe(algorithm, formatText, count);
        const bool integers = isLossless(format);
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, count, integers));
        AllreduceOptions opt;
        opt.format.format = format;
        opt.algorithm = algorithm;
        std::vector<float> result(count);
        AllreduceStats stats;
        const bool outOfPlace = ++caseIndex % 2 == 0;
        try {
          if (outOfPlace) {
            stats = comm.allreduce(inputs[rank].data(), result.data(), count, opt);
          } else {
            result = inputs[rank];
            stats = comm.allreduce(result.data(), count, opt);
          }
        } catch (const Error& e) {
          const bool expected = algorithm == Algorithm::kNative && e.code() == ErrorCode::kUnsupported;
          verdict.check(expected, what + ": unexpected error: " + e.what());
          continue;
        }
        verdict.check(agreed(hashBytes(result.data(), count * sizeof(float))),
                      what + ": ranks are not bit-identical");
        const int q = detail::quantizationsPerValue(stats.algorithm, stats.format, p, nodes);
        const std::vector<std::vector<float>> outputs(p, result);
        const std::string failure = checkResults(inputs, outputs, stats.format, q,
                                                 integers && isLossless(stats.format), false);
        verdict.check(failure.empty(), what + " (ran " + std::string(algorithmName(stats.algorithm)) +
                                           "): " + failure);
      }
    }
  }

  if (p >= 2) {
    const Algorithm compressed[] = {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRabenseifner,
                                    Algorithm::kRecursiveDoubling, Algorithm::kHierarchical};
    for (Algorithm algorithm : compressed) {
      for (int variant = 0; variant < 2; ++variant) {
        // variant 0: the last rank passes one element fewer; variant 1: it uses fp16, not fp8.
        const bool odd = rank == p - 1;
        const std::size_t count = 50000 - (variant == 0 && odd ? 1 : 0);
        std::vector<float> buf = makeInput(rank, count, false);
        AllreduceOptions opt;
        opt.format.format = variant == 1 && odd ? Format::kFp16 : Format::kFp8;
        opt.algorithm = algorithm;
        bool mismatch = false;
        try {
          comm.allreduce(buf.data(), count, opt);
        } catch (const Error& e) {
          mismatch = e.code() == ErrorCode::kMismatch;
        }
        verdict.check(mismatch, describe(algorithm, variant == 0 ? "count mismatch" : "format mismatch",
                                         count) + ": expected kMismatch on every rank");
      }
    }

    // Error feedback: the mean of 16 reductions of the same data approaches the exact sum.
    const std::size_t count = 4000;
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, count, false));
    const InputStats s = inputStats(inputs);
    auto meanError = [&](const char* spec) {
      AllreduceOptions opt;
      opt.format = parseFormatSpec(spec);
      opt.algorithm = Algorithm::kTwoShot;
      opt.key = "layer0";
      std::vector<double> mean(count, 0.0);
      for (int rep = 0; rep < 16; ++rep) {
        std::vector<float> buf = inputs[rank];
        comm.allreduce(buf.data(), count, opt);
        for (std::size_t i = 0; i < count; ++i) mean[i] += buf[i] / 16.0;
      }
      double e = 0;
      for (std::size_t i = 0; i < count; ++i) e += std::fabs(mean[i] - s.exact[i]);
      return e / count;
    };
    const double plain = meanError("table2");
    const double feedback = meanError("table2+ef");
    verdict.check(plain > 0 && feedback < 0.35 * plain,
                  "error feedback: mean error " + std::to_string(feedback) + " vs " +
                      std::to_string(plain) + " without");

    // Averaging on integer inputs: exactly fl(sum / p) on every rank.
    std::vector<std::vector<float>> ints;
    for (int r = 0; r < p; ++r) ints.push_back(makeInput(r, count, true));
    AllreduceOptions avg;
    avg.algorithm = Algorithm::kRing;
    avg.average = true;
    std::vector<float> buf = ints[rank];
    comm.allreduce(buf.data(), count, avg);
    const std::string failure = checkResults(ints, std::vector(p, buf), Format::kFp32, 0, true, true);
    verdict.check(failure.empty(), "average: " + failure);
  }

  // chooseFastest: same decision everywhere.
  const std::vector<std::size_t> layers = {64, 200000};
  const std::vector<Format> candidates = {Format::kFp32, Format::kBf16, Format::kTable2};
  const std::vector<LayerChoice> choices = comm.chooseFastest(layers, candidates);
  for (const LayerChoice& c : choices)
    verdict.check(agreed(static_cast<std::uint64_t>(c.format)) &&
                      agreed(static_cast<std::uint64_t>(c.seconds * 1e9)),
                  "chooseFastest differs across ranks");
  return verdict.finish("test_mpi_engine");
}

}  // namespace

int main(int argc, char** argv) {
  return mpiTestMain(&argc, &argv, "test_mpi_engine", run);
}
