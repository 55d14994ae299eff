#include "adaprec/communicator_mpi.hpp"

namespace adaprec {

Communicator makeMpiCommunicator(MPI_Comm comm, const CommunicatorOptions& options) {
  return Communicator(makeMpiTransport(comm), options);
}

}  // namespace adaprec
