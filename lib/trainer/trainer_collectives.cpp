#include "trainer_collectives.hpp"

#include <chrono>
#include <thread>

#include "adaprec/error.hpp"
#include "config/environment_variables.hpp"

namespace adaprec::trainer {
namespace {

// Polls a posted collective until it completes or the timeout passes. Spins first (these collectives
// are tiny and usually done within microseconds), then sleeps between tests so that a long wait
// leaves the core to the ranks that are still working (two ranks per core on small machines).
void waitOrThrow(MPI_Request& request, const char* what) {
  const double timeout = collectiveTimeoutSeconds();
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout);
  for (long polls = 0;; ++polls) {
    int done = 0;
    const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    ADAPREC_CHECK(rc == MPI_SUCCESS, ErrorCode::kTransport, what << ": MPI failed with code " << rc);
    if (done) return;
    if (polls > 1000) {
      ADAPREC_CHECK(std::chrono::steady_clock::now() < deadline, ErrorCode::kTransport,
                    "timed out after " << timeout << " s (ADAPREC_TIMEOUT) waiting for the other ranks in "
                                       << what << ": a rank stopped answering");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

double collectiveTimeoutSeconds() {
  static const double seconds = detail::readEnvironmentSeconds(detail::kEnvTimeout).value_or(0.0);
  return seconds;
}

void timedAllreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    const char* what) {
  if (collectiveTimeoutSeconds() <= 0) {
    const int rc = MPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
    ADAPREC_CHECK(rc == MPI_SUCCESS, ErrorCode::kTransport, what << ": MPI_Allreduce failed with code " << rc);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, &request);
  ADAPREC_CHECK(rc == MPI_SUCCESS, ErrorCode::kTransport, what << ": MPI_Iallreduce failed with code " << rc);
  waitOrThrow(request, what);
}

void timedBroadcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, const char* what) {
  if (collectiveTimeoutSeconds() <= 0) {
    const int rc = MPI_Bcast(buffer, count, type, root, comm);
    ADAPREC_CHECK(rc == MPI_SUCCESS, ErrorCode::kTransport, what << ": MPI_Bcast failed with code " << rc);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = MPI_Ibcast(buffer, count, type, root, comm, &request);
  ADAPREC_CHECK(rc == MPI_SUCCESS, ErrorCode::kTransport, what << ": MPI_Ibcast failed with code " << rc);
  waitOrThrow(request, what);
}

}  // namespace adaprec::trainer
