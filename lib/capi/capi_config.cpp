#include "capi/capi_config.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

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
      std::fprintf(stderr, "%s\n", message.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
      std::exit(1);
    }
  });
  return config;
}

}  // namespace adaprec::detail
