// engine_timing: measures Communicator allreduce against native MPI_Allreduce (fp32) on the same
// communicator, in the same run, sizes 4 B .. max bytes (x4 steps). Not a test: it asserts nothing
// and prints, per size, the median time of native MPI_Allreduce, of `auto` with fp32 and the ratio,
// then `auto` and an explicit algorithm with lossy formats, with the encode/decode/transfer split.
// Variants are interleaved repetition by repetition so machine noise hits them alike.
//   mpirun -np 4 engine_timing [maxBytes=268435456] [lossy formats=fp8,bf16,table1] [algo=twoshot]
//                              [minBytes=4]
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

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int run(int argc, char** argv) {
  const std::size_t maxBytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (std::size_t{256} << 20);
  const std::vector<std::string> lossy = splitList(argc > 2 ? argv[2] : "fp8,bf16,table1");
  const Algorithm explicitAlgo = parseAlgorithm(argc > 3 ? argv[3] : "twoshot");
  const std::size_t minBytes = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 4;
  int rank = 0;
  int p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Communicator comm = makeMpiCommunicator(MPI_COMM_WORLD);

  struct Variant {
    std::string name;
    bool native;
    AllreduceOptions options;
  };
  std::vector<Variant> variants = {{"native", true, {}}, {"auto:fp32", false, {}}};
  for (const std::string& f : lossy) {
    Variant a{"auto:" + f, false, {}};
    a.options.format.format = parseFormat(f);
    variants.push_back(a);
    Variant e{std::string(algorithmName(explicitAlgo)) + ":" + f, false, a.options};
    e.options.algorithm = explicitAlgo;
    variants.push_back(e);
  }
  if (rank == 0) {
    std::printf("# ranks %d; times in microseconds (median; per repetition the slowest rank)\n", p);
    std::printf("%12s", "bytes");
    for (const Variant& v : variants) std::printf(" %14s", v.name.c_str());
    std::printf(" %10s  %s\n", "auto/nat", "split of the last variant: enc/dec/xfer us, ran");
  }
  for (std::size_t bytes = std::max<std::size_t>(minBytes, 4); bytes <= maxBytes; bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    std::vector<float> send(count);
    std::vector<float> recv(count);
    for (std::size_t i = 0; i < count; ++i) send[i] = static_cast<float>((i * 7 + rank) % 13) * 0.01f;
    const int reps = bytes <= (1u << 16) ? 1000 : bytes <= (16u << 20) ? 30 : 5;
    std::vector<std::vector<double>> times(variants.size());
    AllreduceStats last;
    for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms up
      for (std::size_t v = 0; v < variants.size(); ++v) {
        PMPI_Barrier(MPI_COMM_WORLD);
        const auto start = std::chrono::steady_clock::now();
        if (variants[v].native) {
          PMPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD);
        } else {
          last = comm.allreduce(send.data(), recv.data(), count, variants[v].options);
        }
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        PMPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rep >= 0) times[v].push_back(seconds);
      }
    }
    if (rank == 0) {
      std::printf("%12zu", bytes);
      for (const auto& t : times) std::printf(" %14.1f", median(t) * 1e6);
      std::printf(" %10.3f  %.0f/%.0f/%.0f %s\n", median(times[1]) / median(times[0]),
                  last.encodeSeconds * 1e6, last.decodeSeconds * 1e6, last.transferSeconds * 1e6,
                  std::string(algorithmName(last.algorithm)).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return adaprec::test::mpiTestMain(&argc, &argv, "engine_timing", [&] { return run(argc, argv); });
}
