// timeline_overhead: the cost of ADAPREC_TIMELINE. Two Communicators on MPI_COMM_WORLD, one writing a
// timeline (CommunicatorOptions::timelinePath = PREFIX) and one without, run the same allreduce
// alternately, repetition by repetition, so machine noise hits both alike. Not a test: prints, per size,
// the median time of each (per repetition the slowest rank) and their ratio.
//   mpirun -np 4 timeline_overhead PREFIX [format=fp8] [algo=ring] [maxBytes=16777216]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "adaprec/communicator_mpi.hpp"
#include "mpi_verdict.hpp"

using namespace adaprec;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: timeline_overhead PREFIX [format] [algo] [maxBytes]\n");
    return 2;
  }
  AllreduceOptions options;
  options.format = parseFormatSpec(argc > 2 ? argv[2] : "fp8");
  options.algorithm = parseAlgorithm(argc > 3 ? argv[3] : "ring");
  const std::size_t maxBytes = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : (std::size_t{16} << 20);
  int rank = 0;
  int p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  CommunicatorOptions off = CommunicatorOptions::fromEnvironment();
  off.timelinePath.clear();
  CommunicatorOptions on = off;
  on.timelinePath = argv[1];
  Communicator plain = makeMpiCommunicator(MPI_COMM_WORLD, off);
  Communicator traced = makeMpiCommunicator(MPI_COMM_WORLD, on);
  if (rank == 0) {
    std::printf("# ranks %d, %s %s; microseconds, median over repetitions of the slowest rank\n", p,
                toString(options.format).c_str(), std::string(algorithmName(options.algorithm)).c_str());
    std::printf("%12s %6s %12s %12s %8s\n", "bytes", "reps", "off", "timeline", "ratio");
  }
  for (std::size_t bytes = 4096; bytes <= maxBytes; bytes *= 16) {
    const std::size_t count = bytes / sizeof(float);
    std::vector<float> send(count);
    std::vector<float> recv(count);
    for (std::size_t i = 0; i < count; ++i) send[i] = static_cast<float>((i * 7 + rank) % 13) * 0.01f;
    const int reps = bytes <= (1u << 16) ? 2000 : bytes <= (1u << 20) ? 200 : 20;
    std::vector<double> times[2];
    for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms up
      for (int v = 0; v < 2; ++v) {
        Communicator& comm = v == 0 ? plain : traced;
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = std::chrono::steady_clock::now();
        comm.allreduce(send.data(), recv.data(), count, options);
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rep >= 0) times[v].push_back(seconds);
      }
    }
    if (rank == 0) {
      std::printf("%12zu %6d %12.2f %12.2f %8.3f\n", bytes, reps, median(times[0]) * 1e6, median(times[1]) * 1e6,
                  median(times[1]) / median(times[0]));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return adaprec::test::mpiTestMain(&argc, &argv, "timeline_overhead", [&] { return run(argc, argv); });
}
