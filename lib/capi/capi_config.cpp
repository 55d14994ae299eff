#include "capi/capi_config.hpp"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "adaprec/error.hpp"

namespace adaprec::detail {
namespace {

struct ParsedConfig {
  EnvironmentConfig config;
  std::optional<std::string> error;  // the user-facing line when the environment is invalid
};

// Parsed once per process: every later call (MPI_Init's check, the first allreduce, MPI_Finalize)
// sees the same result.
const ParsedConfig& parsedConfig() {
  static std::once_flag once;
  static ParsedConfig parsed;
  std::call_once(once, [] {
    try {
      parsed.config = EnvironmentConfig::fromEnvironment();
    } catch (const Error& e) {
      parsed.error = kMessagePrefix + messageForUsers(e);  // one line, without the check's file:line
    }
  });
  return parsed;
}

[[noreturn]] void reportAndAbort(const std::string& message) {
  // Threads of one process may find the error at once (each agreeing on its own communicator): one
  // reports and aborts, the others wait for that abort, so the job's log holds one line.
  static std::atomic<bool> reporting{false};
  if (reporting.exchange(true))
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

// A rank that is not to report gives the reporting rank's MPI_Abort time to end the job, so the job
// log holds one line, and reports itself only if the job is still alive (3 s was too short for
// mpirun to tear a loaded 4-rank job down; the wait ends with the job).
[[noreturn]] void waitForAbortThenReport(const std::string& message) {
  std::this_thread::sleep_for(std::chrono::seconds(30));
  reportAndAbort(message);
}

}  // namespace

const EnvironmentConfig& capiConfigOrAbort() {
  const ParsedConfig& parsed = parsedConfig();
  if (parsed.error) {
    // Called outside a collective: no way to know whether rank 0 also failed. Every rank usually
    // reads the same environment, so rank 0 reports and the others wait for its abort.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) waitForAbortThenReport(*parsed.error);
    reportAndAbort(*parsed.error);
  }
  return parsed.config;
}

void agreeOnConfig(MPI_Comm comm) {
  const ParsedConfig& parsed = parsedConfig();
  // One allreduce finds the lowest rank whose environment is invalid: it reports at once, whichever
  // rank it is (an invalid value on rank 1 only used to stop the job 30 s late, after rank 0 had
  // started work).
  int rank = 0, size = 1;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  const int mine = parsed.error ? rank : size;
  int first_invalid = size;
  if (PMPI_Allreduce(&mine, &first_invalid, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) {
    capiConfigOrAbort();  // no agreement possible: the uncoordinated path
    return;
  }
  if (first_invalid == size) return;
  if (rank == first_invalid) reportAndAbort(*parsed.error);
  // Name the reporting rank as MPI_COMM_WORLD numbers it (the job's log does).
  int world_rank = first_invalid;
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  if (PMPI_Comm_group(comm, &group) == MPI_SUCCESS && PMPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
    PMPI_Group_translate_ranks(group, 1, &first_invalid, world, &world_rank);
  }
  if (group != MPI_GROUP_NULL) PMPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) PMPI_Group_free(&world);
  waitForAbortThenReport(parsed.error ? *parsed.error
                                      : "adaprec: rank " + std::to_string(world_rank) +
                                            "'s ADAPREC_* environment is invalid (see its line above)");
}

namespace {
std::atomic<bool> agreedOnWorld{false};
}  // namespace

void agreeOnConfigAtInit() {
  // MPI_Init is collective over MPI_COMM_WORLD.
  agreeOnConfig(MPI_COMM_WORLD);
  agreedOnWorld.store(true);
}

bool configAgreedOnWorld() { return agreedOnWorld.load(); }

}  // namespace adaprec::detail
