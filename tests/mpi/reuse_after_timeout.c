/* A C program calling AdaPrec_Allreduce with MPI_ERRORS_RETURN (as mpi4py does) on a duplicate of
 * MPI_COMM_WORLD: call 2 times out (rank 1 arrives argv[1] seconds late, beyond ADAPREC_TIMEOUT), and
 * the program carries on. Call 3, on the same communicator, must fail on every rank: its messages
 * would be mixed with call 2's late ones (it returned a wrong sum as success on rank 1). After
 * MPI_Comm_free and a new MPI_Comm_dup, call 4 is exact on every rank. Exit status 0 when all holds;
 * one line per rank and call on stdout. */
#include <adaprec/adaprec_mpi.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { kCount = 5000 };

/* Every rank's verdict on one call: rc and whether the result was exact. */
static int call(MPI_Comm comm, int number, int rank, int size, int *exact) {
  static float x[kCount], r[kCount];
  for (int i = 0; i < kCount; ++i) x[i] = (float)(number * 100 + rank + 1);
  const int rc = AdaPrec_Allreduce(x, r, kCount, MPI_FLOAT, MPI_SUM, comm);
  float want = 0;
  for (int q = 0; q < size; ++q) want += (float)(number * 100 + q + 1);
  *exact = 1;
  for (int i = 0; i < kCount; ++i) *exact &= r[i] == want;
  printf("rank %d call %d: rc %d, %s\n", rank, number, rc, *exact ? "exact" : "not exact");
  fflush(stdout);
  return rc;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, exact = 0, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const double late = argc > 1 ? atof(argv[1]) : 1.6;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  bad |= call(comm, 1, rank, size, &exact) != MPI_SUCCESS || !exact;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) usleep((useconds_t)(late * 1e6));
  bad |= call(comm, 2, rank, size, &exact) == MPI_SUCCESS;  /* the timeout */
  MPI_Barrier(MPI_COMM_WORLD);
  bad |= call(comm, 3, rank, size, &exact) == MPI_SUCCESS;  /* refused: the communicator is broken */
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm_free(&comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  bad |= call(comm, 4, rank, size, &exact) != MPI_SUCCESS || !exact;
  MPI_Comm_free(&comm);
  int anyBad = 0;
  MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf(anyBad ? "reuse after timeout: FAILED\n" : "reuse after timeout: ok\n");
  MPI_Finalize();
  return anyBad;
}
