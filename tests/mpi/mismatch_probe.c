/* A plain C MPI program (no AdaPrec include) whose second float sum is erroneous: every rank passes a
 * different count (100000 + rank). Under libadaprec-preload.so with a compressed format the engine's
 * agreement check turns that into an error, and MPI's default error handler aborts the job: what
 * run_timeline.py checks is that the ranks' ADAPREC_TIMELINE files still hold the calls up to the
 * error and the error itself. Exits 0 only if the erroneous call returned (it must not). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  enum { kCount = 100000 };
  float *data = calloc(kCount + 64, sizeof(float));
  if (data == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int i = 0; i < kCount + 64; ++i) data[i] = (float)((i + rank) % 7);
  MPI_Allreduce(MPI_IN_PLACE, data, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* a good call */
  MPI_Allreduce(MPI_IN_PLACE, data, kCount + rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* erroneous */
  printf("erroneous call returned on rank %d\n", rank);
  free(data);
  MPI_Finalize();
  return 0;
}
