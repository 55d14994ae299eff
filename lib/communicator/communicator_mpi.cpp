#include "adaprec/communicator_mpi.hpp"

namespace adaprec {

Communicator makeMpiCommunicator(MPI_Comm comm) { return Communicator(makeMpiTransport(comm)); }

}  // namespace adaprec
