/* A C program calling the C API directly (no preload library: nothing intercepts MPI_Init), for
 * run_capi_env.py. Its first AdaPrec_Allreduce is an int sum (passed through to MPI) when argv[1] is
 * "int-first", else a float sum; then a float sum of 100000 values. Prints "sum ok" on rank 0 when
 * every result is exact (small integers; the default fp32 format is lossless). */
#include <adaprec/adaprec_mpi.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && strcmp(argv[1], "int-first") == 0) {
    int one = 1, total = 0;
    AdaPrec_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    bad |= total != size;
  }
  enum { kCount = 100000 };
  float *data = malloc(kCount * sizeof(float));
  if (data == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int i = 0; i < kCount; ++i) data[i] = (float)(i % 5);
  AdaPrec_Allreduce(MPI_IN_PLACE, data, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < kCount; ++i) bad |= data[i] != (float)(size * (i % 5));
  free(data);
  if (rank == 0) printf(bad ? "sum wrong\n" : "sum ok\n");
  MPI_Finalize();
  return bad;
}
