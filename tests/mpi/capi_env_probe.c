/* A C program calling the C API directly (no preload library: nothing intercepts MPI_Init), for
 * run_capi_env.py. Its first AdaPrec_Allreduce is an int sum (passed through to MPI) when argv[1] is
 * "int-first", else a float sum; then a float sum of 100000 values; with "threads", four threads
 * (MPI_THREAD_MULTIPLE) each make that float sum on a communicator of their own at once. Prints
 * "sum ok" on rank 0 when every result is exact (small integers; the default fp32 format is lossless). */
#include <adaprec/adaprec_mpi.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A float sum of 100000 values on `comm`: 0 when exact. */
static int floatSum(MPI_Comm comm) {
  enum { kCount = 100000 };
  int size = 1, bad = 0;
  MPI_Comm_size(comm, &size);
  float *data = malloc(kCount * sizeof(float));
  if (data == NULL) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int i = 0; i < kCount; ++i) data[i] = (float)(i % 5);
  AdaPrec_Allreduce(MPI_IN_PLACE, data, kCount, MPI_FLOAT, MPI_SUM, comm);
  for (int i = 0; i < kCount; ++i) bad |= data[i] != (float)(size * (i % 5));
  free(data);
  return bad;
}

enum { kThreads = 4 };
struct ThreadSum {
  MPI_Comm comm;
  int bad;
};

static void *threadSum(void *arg) {
  struct ThreadSum *sum = arg;
  sum->bad = floatSum(sum->comm);
  return NULL;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 && strcmp(argv[1], "threads") == 0;
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
  int rank = 0, size = 1, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (threads) {
    if (provided < MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, 3);
    struct ThreadSum sums[kThreads];
    pthread_t ids[kThreads];
    for (int t = 0; t < kThreads; ++t) MPI_Comm_dup(MPI_COMM_WORLD, &sums[t].comm);
    for (int t = 0; t < kThreads; ++t) pthread_create(&ids[t], NULL, threadSum, &sums[t]);
    for (int t = 0; t < kThreads; ++t) {
      pthread_join(ids[t], NULL);
      bad |= sums[t].bad;
      MPI_Comm_free(&sums[t].comm);
    }
  } else {
    if (argc > 1 && strcmp(argv[1], "int-first") == 0) {
      int one = 1, total = 0;
      AdaPrec_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      bad |= total != size;
    }
    bad |= floatSum(MPI_COMM_WORLD);
  }
  if (rank == 0) printf(bad ? "sum wrong\n" : "sum ok\n");
  MPI_Finalize();
  return bad;
}
