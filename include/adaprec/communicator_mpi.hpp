// Opt-in MPI entry points (this header includes mpi.h; the other public C++ headers do not).
#pragma once

#include <mpi.h>

#include <memory>

#include "adaprec/communicator.hpp"
#include "adaprec/transport.hpp"

namespace adaprec {

// Collective over `comm`. The transport works on its own duplicate of comm (MPI_Comm_dup), so its
// traffic never matches the application's; errors come back as Error(kTransport / kMismatch), not
// MPI aborts. MPI must stay initialized while the transport lives.
std::shared_ptr<Transport> makeMpiTransport(MPI_Comm comm);

// Collective: a Communicator over makeMpiTransport(comm).
Communicator makeMpiCommunicator(MPI_Comm comm,
                                 const CommunicatorOptions& options = CommunicatorOptions::fromEnvironment());

}  // namespace adaprec
