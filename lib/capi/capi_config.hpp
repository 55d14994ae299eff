// The environment configuration of the C API and the preload library, read once per process.
#pragma once

#include "adaprec/communicator.hpp"

namespace adaprec::detail {

// Reads ADAPREC_* on first use. An invalid value prints one line ("adaprec: ADAPREC_FORMAT='x' is
// invalid; valid values: ...") to stderr and calls MPI_Abort(MPI_COMM_WORLD, 1): never a silent
// fallback. MPI must be initialized.
const EnvironmentConfig& capiConfigOrAbort();

}  // namespace adaprec::detail
