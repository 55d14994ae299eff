// Transport timeouts under MPI (run with 2-3 ranks): with setTimeout, allreduces still give exact
// results (compressed algorithms poll MPI_Test, native runs MPI_Iallreduce); then the last rank sleeps
// instead of calling allreduce and every other rank must fail with Error(kTransport) within the
// timeout plus a margin, with a message naming the sleeping rank.
#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "engine_check.hpp"
#include "mpi_verdict.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

constexpr std::chrono::milliseconds kTimeout{1000};
// The correctness part runs with a timeout too, but a generous one: a rank descheduled for a second on
// a loaded 2-core CI machine is slow, not dead.
constexpr std::chrono::milliseconds kGenerousTimeout{30000};

int run() {
  int rank = 0;
  int p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Verdict verdict(MPI_COMM_WORLD);
  const std::size_t count = 20000;
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, count, true));

  std::shared_ptr<Transport> transport = makeMpiTransport(MPI_COMM_WORLD);
  transport->setTimeout(kGenerousTimeout);
  Communicator comm(transport);
  for (Algorithm algorithm : {Algorithm::kNative, Algorithm::kTwoShot, Algorithm::kRing}) {
    AllreduceOptions options;
    options.algorithm = algorithm;
    std::vector<float> buf = inputs[rank];
    comm.allreduce(buf.data(), count, options);
    std::vector<std::vector<float>> outputs(p, buf);
    const std::string failure = checkResults(inputs, outputs, Format::kFp32, 0, true, false);
    verdict.check(failure.empty(), std::string(algorithmName(algorithm)) + " with a timeout: " + failure);
  }
  if (p == 1) return verdict.finish("test_mpi_timeout");

  // Every rank is here before the short timeout starts counting.
  MPI_Barrier(MPI_COMM_WORLD);
  transport->setTimeout(kTimeout);
  const int sleeper = p - 1;
  if (rank == sleeper) {
    std::this_thread::sleep_for(3 * kTimeout);  // alive, but not in the allreduce
  } else {
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    ErrorCode code = ErrorCode::kOk;
    try {
      std::vector<float> buf = inputs[rank];
      AllreduceOptions options;
      options.algorithm = Algorithm::kTwoShot;
      comm.allreduce(buf.data(), count, options);
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank %d: %.2f s: %s\n", rank, seconds, message.c_str());
    verdict.check(code == ErrorCode::kTransport, "the allreduce without rank " +
                                                     std::to_string(sleeper) + " must time out");
    verdict.check(seconds < 2.0 * kTimeout.count() / 1000.0 + 0.5,
                  "timed out after " + std::to_string(seconds) + " s, more than timeout + margin");
    verdict.check(message.find("timed out after 1.0 s waiting for a message from rank " +
                               std::to_string(sleeper)) != std::string::npos,
                  "the message names rank " + std::to_string(sleeper) + ": " + message);
  }
  // The communicator is unusable after a timeout: it is only destroyed.
  return verdict.finish("test_mpi_timeout");
}

}  // namespace

int main(int argc, char** argv) {
  return mpiTestMain(&argc, &argv, "test_mpi_timeout", run);
}
