// libadaprec-preload.so: exports MPI_Allreduce (over AdaPrec_Allreduce) so that an unmodified MPI
// program gets compressed float-sum allreduce with
//   mpirun -x LD_PRELOAD=/path/libadaprec-preload.so -x ADAPREC_FORMAT=fp8 ./trainer
// The real implementation stays reachable through PMPI_*, which the MPI profiling interface
// guarantees. MPI_Init/MPI_Init_thread are wrapped to validate the environment at start-up (an invalid
// value stops the job before any work), MPI_Finalize to print the counters when any rank sets
// ADAPREC_STATS=1.
#include <mpi.h>

#include "adaprec/adaprec_mpi.h"
#include "capi/capi_config.hpp"

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) adaprec::detail::agreeOnConfigAtInit();
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) adaprec::detail::agreeOnConfigAtInit();
  return rc;
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm) {
  return AdaPrec_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Finalize(void) {
  // AdaPrec_PrintStats is collective, and ranks need not agree on ADAPREC_STATS: every rank passes
  // here, so first agree whether any rank wants the counters (a rank that skipped the print while
  // another entered it hung the job), then all take part.
  int mine = adaprec::detail::capiConfigOrAbort().stats ? 1 : 0, any = 0;
  PMPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any != 0) AdaPrec_PrintStats();
  return PMPI_Finalize();
}

}  // extern "C"
