// Checks that an MPI job launched by tools/vcluster sees the emulated cluster it asked for:
//  - MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups exactly ranksPerNode ranks per node and finds
//    `nodes` nodes, and every node reports its own host name;
//  - an MPI_Allreduce (fp32, integer-valued so the sum is exact) is correct on every rank;
//  - optionally (--bandwidth-bytes), a timed send of a big buffer from node 0 to node 1 does not beat
//    the configured link rate (--rate-bits), i.e. the shaper is really on the path.
// Exits 0 when all ranks pass, 1 otherwise; the verdict is agreed across ranks.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <set>
#include <string>
#include <vector>

namespace {

struct Options {
  int nodes = 0;
  int ranksPerNode = 1;
  long count = 1000;
  long bandwidthBytes = 0;
  double rateBits = 0;  // configured link rate in bit/s; 0 = do not check
};

long parseLong(const char* flag, const char* text) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0) {
    std::fprintf(stderr, "vcluster_check: invalid value '%s' for %s\n", text, flag);
    std::exit(2);
  }
  return value;
}

Options parseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "vcluster_check: %s needs a value\n", flag.c_str());
      std::exit(2);
    }
    const char* value = argv[++i];
    if (flag == "--nodes") options.nodes = static_cast<int>(parseLong(argv[i - 1], value));
    else if (flag == "--ranks-per-node") options.ranksPerNode = static_cast<int>(parseLong(argv[i - 1], value));
    else if (flag == "--count") options.count = parseLong(argv[i - 1], value);
    else if (flag == "--bandwidth-bytes") options.bandwidthBytes = parseLong(argv[i - 1], value);
    else if (flag == "--rate-bits") options.rateBits = static_cast<double>(parseLong(argv[i - 1], value));
    else {
      std::fprintf(stderr,
                   "usage: vcluster_check --nodes N [--ranks-per-node K] [--count C] "
                   "[--bandwidth-bytes B --rate-bits R]\n");
      std::exit(2);
    }
  }
  if (options.nodes < 1 || options.ranksPerNode < 1) {
    std::fprintf(stderr, "vcluster_check: --nodes and --ranks-per-node must be >= 1\n");
    std::exit(2);
  }
  return options;
}

// Node layout as MPI sees it; returns whether it matches what was asked for.
bool checkTopology(const Options& options, int rank, int size) {
  bool ok = true;
  if (size != options.nodes * options.ranksPerNode) {
    std::fprintf(stderr, "rank %d: world size %d, expected %d x %d\n", rank, size, options.nodes,
                 options.ranksPerNode);
    ok = false;
  }
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int localRank = 0;
  int localSize = 0;
  MPI_Comm_rank(local, &localRank);
  MPI_Comm_size(local, &localSize);
  if (localSize != options.ranksPerNode) {
    std::fprintf(stderr, "rank %d: %d rank(s) share its node, expected %d\n", rank, localSize,
                 options.ranksPerNode);
    ok = false;
  }
  int leader = localRank == 0 ? 1 : 0;
  int nodeCount = 0;
  MPI_Allreduce(&leader, &nodeCount, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (nodeCount != options.nodes) {
    std::fprintf(stderr, "rank %d: MPI sees %d node(s), expected %d\n", rank, nodeCount, options.nodes);
    ok = false;
  }

  // Host names: one per node, identical inside a node.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int nameLength = 0;
  MPI_Get_processor_name(name, &nameLength);
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  std::set<std::string> names;
  for (int r = 0; r < size; ++r) names.insert(std::string(&all[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]));
  if (static_cast<int>(names.size()) != options.nodes) {
    std::fprintf(stderr, "rank %d: %zu distinct host name(s), expected %d\n", rank, names.size(), options.nodes);
    ok = false;
  }
  std::vector<char> leaderName(MPI_MAX_PROCESSOR_NAME);
  std::memcpy(leaderName.data(), name, MPI_MAX_PROCESSOR_NAME);
  MPI_Bcast(leaderName.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, local);
  if (std::strcmp(leaderName.data(), name) != 0) {
    std::fprintf(stderr, "rank %d: host %s differs from its node leader's %s\n", rank, name, leaderName.data());
    ok = false;
  }
  if (rank == 0) {
    std::printf("vcluster_check: %d rank(s), %d node(s) by MPI_COMM_TYPE_SHARED, hosts:", size, nodeCount);
    for (const auto& host : names) std::printf(" %s", host.c_str());
    std::printf("\n");
  }
  MPI_Comm_free(&local);
  return ok;
}

// Element i of rank r is (i % 97) + r: small integers, so the fp32 sum is exact.
bool checkAllreduce(const Options& options, int rank, int size) {
  std::vector<float> data(static_cast<std::size_t>(options.count));
  for (long i = 0; i < options.count; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(i % 97 + rank);
  MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(options.count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  long wrong = 0;
  const long rankSum = static_cast<long>(size) * (size - 1) / 2;
  for (long i = 0; i < options.count; ++i) {
    const float expected = static_cast<float>((i % 97) * size + rankSum);
    if (data[static_cast<std::size_t>(i)] != expected) ++wrong;
  }
  if (wrong != 0) std::fprintf(stderr, "rank %d: %ld wrong element(s) after MPI_Allreduce\n", rank, wrong);
  if (rank == 0) std::printf("vcluster_check: MPI_Allreduce of %ld float(s) checked\n", options.count);
  return wrong == 0;
}

// Node 0's first rank sends `bandwidthBytes` to node 1's first rank, which answers with an empty
// message once everything arrived. One warm-up round opens the TCP connection first. The tbf bucket
// lets its burst through at full speed, so the message must be much larger than the burst.
bool checkBandwidth(const Options& options, int rank) {
  if (options.bandwidthBytes == 0) return true;
  if (options.nodes < 2) {
    if (rank == 0) std::fprintf(stderr, "vcluster_check: --bandwidth-bytes needs at least 2 nodes\n");
    return false;
  }
  const int sender = 0;
  const int receiver = options.ranksPerNode;
  std::vector<char> buffer(static_cast<std::size_t>(options.bandwidthBytes), 1);
  auto round = [&](long bytes) {
    if (rank == sender) {
      MPI_Send(buffer.data(), static_cast<int>(bytes), MPI_CHAR, receiver, 1, MPI_COMM_WORLD);
      MPI_Recv(nullptr, 0, MPI_CHAR, receiver, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == receiver) {
      MPI_Recv(buffer.data(), static_cast<int>(bytes), MPI_CHAR, sender, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(nullptr, 0, MPI_CHAR, sender, 2, MPI_COMM_WORLD);
    }
  };
  round(1024);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  round(options.bandwidthBytes);
  const double seconds = MPI_Wtime() - start;
  bool ok = true;
  if (rank == sender) {
    const double achievedBits = static_cast<double>(options.bandwidthBytes) * 8.0 / seconds;
    std::printf("vcluster_check: sent %ld bytes node 0 -> node 1 in %.3f s: %.1f Mbit/s achieved", options.bandwidthBytes,
                seconds, achievedBits / 1e6);
    if (options.rateBits > 0) {
      std::printf(" vs %.1f Mbit/s configured (%.1f%%)", options.rateBits / 1e6, 100.0 * achievedBits / options.rateBits);
      // Payload cannot outrun the shaper (headers come on top); 5% slack for the initial burst.
      if (achievedBits > 1.05 * options.rateBits) {
        std::printf("\n");
        std::fprintf(stderr, "vcluster_check: achieved rate exceeds the configured one: link not shaped\n");
        ok = false;
      }
    }
    std::printf("\n");
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    const Options options = parseOptions(argc, argv);
    int ok = checkTopology(options, rank, size) ? 1 : 0;
    ok &= checkAllreduce(options, rank, size) ? 1 : 0;
    ok &= checkBandwidth(options, rank) ? 1 : 0;
    int allOk = 0;
    MPI_Allreduce(&ok, &allOk, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) std::printf("vcluster_check: %s\n", allOk ? "PASS" : "FAIL");
    MPI_Finalize();
    return allOk ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
