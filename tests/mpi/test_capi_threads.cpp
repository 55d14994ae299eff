// AdaPrec_Allreduce from several threads at once (MPI_THREAD_MULTIPLE), each on a communicator of its
// own, with the format and algorithm of the environment (ADAPREC_FORMAT / ADAPREC_ALGO, set by the
// test's command line). Every thread's results must equal, bit for bit, the same calls made by one
// thread alone on fresh communicators afterwards (residuals of +ef formats included: they live per
// communicator; not for auto, whose choice follows measured times), and be identical on every rank: threads must not see each other's buffers, residuals
// or state. Counts straddle ADAPREC_MIN_BYTES so that calls passed through to MPI interleave with the
// engine's.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "adaprec/adaprec_mpi.h"
#include "mpi_verdict.hpp"

using adaprec::test::Verdict;

namespace {

constexpr int kThreads = 4;
constexpr int kCalls = 4;

// Values differ by rank, thread, call and index, with a scale per thread, so results that crossed
// between threads could not match the replay.
float value(int rank, int thread, int call, std::size_t i) {
  std::uint64_t x = (std::uint64_t(rank) << 48) ^ (std::uint64_t(thread) << 40) ^ (std::uint64_t(call) << 32) ^ i;
  x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  const double unit = static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
  return static_cast<float>(std::ldexp(unit, thread - 2 + static_cast<int>(i % 7)));
}

std::size_t countOf(int thread, int call) {
  // Around ADAPREC_MIN_BYTES (65536 bytes: 16384 floats) and well above it.
  const std::size_t counts[kCalls] = {200000, 16383, 131072 + 17 * std::size_t(thread), 16384};
  return counts[call];
}

// One thread's calls on `comm`: a hash of each result, and each return code.
struct Outcome {
  std::vector<std::uint64_t> hashes;
  std::vector<int> codes;
};

Outcome reduceOn(MPI_Comm comm, int rank, int thread) {
  Outcome outcome;
  for (int call = 0; call < kCalls; ++call) {
    const std::size_t n = countOf(thread, call);
    std::vector<float> send(n), recv(n);
    for (std::size_t i = 0; i < n; ++i) send[i] = value(rank, thread, call, i);
    const bool inPlace = call % 2 == 1;
    if (inPlace) recv = send;
    outcome.codes.push_back(AdaPrec_Allreduce(inPlace ? MPI_IN_PLACE : send.data(), recv.data(),
                                              static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm));
    outcome.hashes.push_back(adaprec::test::hashBytes(recv.data(), n * sizeof(float)));
  }
  return outcome;
}

int run() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Verdict verdict(MPI_COMM_WORLD);
  std::vector<MPI_Comm> comms(kThreads);
  for (MPI_Comm& comm : comms) MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::vector<Outcome> together(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { together[t] = reduceOn(comms[t], rank, t); });
  for (std::thread& thread : threads) thread.join();
  for (MPI_Comm& comm : comms) MPI_Comm_free(&comm);

  const char* algorithm = std::getenv("ADAPREC_ALGO");
  const bool autoAlgorithm = algorithm == nullptr || std::string(algorithm) == "auto";
  for (int t = 0; t < kThreads; ++t) {
    MPI_Comm fresh;
    MPI_Comm_dup(MPI_COMM_WORLD, &fresh);
    const Outcome alone = reduceOn(fresh, rank, t);
    MPI_Comm_free(&fresh);
    for (int call = 0; call < kCalls; ++call) {
      const std::string what = "thread " + std::to_string(t) + " call " + std::to_string(call);
      verdict.check(together[t].codes[call] == MPI_SUCCESS, what + ": rc " + std::to_string(together[t].codes[call]));
      // auto's choice follows measured times (its trial), which threads sharing the cores move: only a
      // fixed algorithm is bound to repeat its result alone.
      verdict.check(autoAlgorithm || together[t].hashes[call] == alone.hashes[call],
                    what + ": differs from the same calls made alone");
      verdict.check(adaprec::test::agreed(together[t].hashes[call]), what + ": results differ across ranks");
    }
  }
  AdaPrec_Stats stats;
  AdaPrec_GetStats(&stats);
  // Both threaded and alone: 3 calls of 4 per thread are at or above ADAPREC_MIN_BYTES.
  verdict.check(stats.intercepted == 2 * kThreads * 3, "intercepted " + std::to_string(stats.intercepted));
  return verdict.finish("test_capi_threads");
}

}  // namespace

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "test_capi_threads: MPI_THREAD_MULTIPLE not provided\n");
    MPI_Finalize();
    return 77;
  }
  int rc = 1;
  try {
    rc = run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_capi_threads: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return rc;
}
