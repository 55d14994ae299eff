#include "capi/capi_config.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "adaprec/error.hpp"

namespace adaprec::detail {

const EnvironmentConfig& capiConfigOrAbort() {
  static std::once_flag once;
  static EnvironmentConfig config;
  std::call_once(once, [] {
    try {
      config = EnvironmentConfig::fromEnvironment();
    } catch (const Error& e) {
      // e.what() ends with the file:line of the check; the first part is the user-facing line.
      std::string message = e.what();
      const std::size_t cut = message.find(" [");
      if (cut != std::string::npos) message.resize(cut);
      // Every rank reads the same environment: rank 0 reports and aborts the job; the others give it
      // time to do so, so the job log holds one line, and report themselves only if it did not. (3 s
      // was too short for mpirun to tear a loaded 4-rank job down; the wait ends with the job.)
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank != 0) std::this_thread::sleep_for(std::chrono::seconds(30));
      std::fprintf(stderr, "%s\n", message.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
      std::exit(1);
    }
  });
  return config;
}

}  // namespace adaprec::detail
