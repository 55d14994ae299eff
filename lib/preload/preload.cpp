// libadaprec-preload.so: exports MPI_Allreduce (over AdaPrec_Allreduce) so that an unmodified MPI
// program gets compressed float-sum allreduce with
//   mpirun -x LD_PRELOAD=/path/libadaprec-preload.so -x ADAPREC_FORMAT=fp8 ./trainer
// The real implementation stays reachable through PMPI_*, which the MPI profiling interface
// guarantees. MPI_Init/MPI_Init_thread are wrapped to validate the environment at start-up (an invalid
// value stops the job before any work), MPI_Finalize to print the counters when ADAPREC_STATS=1.
#include <mpi.h>

#include "adaprec/adaprec_mpi.h"
#include "capi/capi_config.hpp"

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) adaprec::detail::capiConfigOrAbort();
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) adaprec::detail::capiConfigOrAbort();
  return rc;
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm) {
  return AdaPrec_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Finalize(void) {
  if (adaprec::detail::capiConfigOrAbort().stats) AdaPrec_PrintStats();
  return PMPI_Finalize();
}

}  // extern "C"
