// The environment configuration of the C API and the preload library, read once per process.
#pragma once

#include "adaprec/communicator.hpp"

namespace adaprec::detail {

// Reads ADAPREC_* on first use. An invalid value prints one line ("adaprec: ADAPREC_FORMAT='x' is
// invalid; valid values: ...") to stderr and calls MPI_Abort(MPI_COMM_WORLD, 1): never a silent
// fallback. MPI must be initialized.
const EnvironmentConfig& capiConfigOrAbort();

// The same check made collectively inside MPI_Init (which every rank of MPI_COMM_WORLD calls): the
// lowest rank with an invalid value reports its line and aborts the job at once, whichever rank it
// is; returns when every rank's environment is valid. Call only where all ranks call it together.
void agreeOnConfigAtInit();

}  // namespace adaprec::detail
