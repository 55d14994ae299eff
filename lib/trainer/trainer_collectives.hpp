// The trainer's own small MPI collectives (agreed verdicts, evaluation and loss sums, weight hashes, the
// checkpoints' and the controller's agreements, the plain-MPI gradient reducer) under ADAPREC_TIMEOUT,
// as the Communicator's allreduce is: with the variable set, a rank that stopped answering (stopped,
// swapped out, stuck in its file system) turns the others' wait into Error(kTransport) naming the
// collective, which ends the job (adaprec-train's MPI_Abort) instead of hanging it. MPI cannot tell which
// rank is missing from a collective, so the message names what was waited for, not whom. Without the
// variable these are the blocking MPI calls, unchanged.
#pragma once

#include <mpi.h>

namespace adaprec::trainer {

// MPI_Allreduce (sendbuf may be MPI_IN_PLACE); `what` names it in the timeout's message.
void timedAllreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    const char* what);
// MPI_Bcast.
void timedBroadcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, const char* what);

// ADAPREC_TIMEOUT in seconds (0: wait forever), read once per process through its declaration.
double collectiveTimeoutSeconds();

}  // namespace adaprec::trainer
