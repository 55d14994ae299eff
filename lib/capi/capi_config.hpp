// The environment configuration of the C API and the preload library, read once per process.
#pragma once

#include <mpi.h>

#include "adaprec/communicator.hpp"

namespace adaprec::detail {

// Reads ADAPREC_* on first use. An invalid value prints one line ("adaprec: ADAPREC_FORMAT='x' is
// invalid; valid values: ...") to stderr and calls MPI_Abort(MPI_COMM_WORLD, 1): never a silent
// fallback. MPI must be initialized.
const EnvironmentConfig& capiConfigOrAbort();

// The same check made collectively over `comm` (every rank of it must call it together): the lowest
// rank with an invalid value reports its line and aborts the job at once, whichever rank it is; the
// others wait for that abort. Returns when every rank's environment is valid. capiConfigOrAbort alone
// cannot know whether rank 0 saw the error too, so there the ranks other than 0 wait 30 s for rank 0's
// abort before reporting themselves.
void agreeOnConfig(MPI_Comm comm);

// agreeOnConfig over MPI_COMM_WORLD inside MPI_Init (the preload library): afterwards every process's
// environment is known to be valid, and configAgreedOnWorld() is true.
void agreeOnConfigAtInit();
bool configAgreedOnWorld();

}  // namespace adaprec::detail
