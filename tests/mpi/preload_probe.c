/* A plain C MPI program (no AdaPrec include) used to test libadaprec-preload.so: it calls
 * MPI_Allreduce with int/double/float, SUM/MAX/PROD/a user op, in place and out of place, tiny and
 * large counts, on MPI_COMM_WORLD and a split communicator. Rank 0 prints one line per call:
 *   <case> <fnv64 of the result bytes>
 * and the program checks that every rank got identical bytes and that each result equals the fp64
 * reference (all inputs are small integers, so plain MPI is exact): within tolerance * sum|x| for the
 * cases named floatsum-large-* (argv[1], default 0), exactly for every other case.
 * Exit status 0 when every check passed on every rank. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank_ = 0, size_ = 1, failures_ = 0;
static double tolerance_ = 0.0;

static uint64_t fnv(const void *data, size_t bytes) {
  const unsigned char *p = (const unsigned char *)data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* Input value of element i on rank r: a small integer, different per rank. */
static int value(int r, int i) { return ((i * 7 + r * 13 + 3) % 41) - 20; }

static void report(const char *name, const void *result, size_t bytes, MPI_Comm comm) {
  uint64_t h[2] = {fnv(result, bytes), 0}, m[2];
  h[1] = ~h[0];
  MPI_Allreduce(h, m, 2, MPI_UINT64_T, MPI_MAX, comm);
  if (m[0] != h[0] || m[1] != h[1]) {
    fprintf(stderr, "rank %d: FAILED %s: ranks differ\n", rank_, name);
    ++failures_;
  }
  if (rank_ == 0) printf("%s %016llx\n", name, (unsigned long long)h[0]);
}

static void fail(const char *name, int i, double got, double want) {
  if (failures_ < 20) fprintf(stderr, "rank %d: FAILED %s element %d: got %g want %g\n", rank_, name, i, got, want);
  ++failures_;
}

static void userMax(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  float *a = (float *)in, *b = (float *)inout;
  for (int i = 0; i < *len; ++i) b[i] = fabsf(a[i]) > fabsf(b[i]) ? a[i] : b[i];
}

static void floatSum(const char *name, int count, int inPlace, MPI_Comm comm) {
  int r, p;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &p);
  float *send = malloc(sizeof(float) * (count + 1)), *recv = malloc(sizeof(float) * (count + 1));
  for (int i = 0; i < count; ++i) send[i] = recv[i] = (float)value(r, i);
  if (inPlace) MPI_Allreduce(MPI_IN_PLACE, recv, count, MPI_FLOAT, MPI_SUM, comm);
  else MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, comm);
  const int lossy = strncmp(name, "floatsum-large", 14) == 0;
  /* Rank q of `comm` is world rank q (the split below keeps every rank, in order). */
  for (int i = 0; i < count; ++i) {
    double exact = 0, absSum = 0;
    for (int q = 0; q < p; ++q) {
      exact += value(q, i);
      absSum += fabs((double)value(q, i));
    }
    const double bound = lossy ? tolerance_ * absSum : 0.0;
    if (!(fabs(recv[i] - exact) <= bound)) fail(name, i, recv[i], exact);
  }
  report(name, recv, sizeof(float) * count, comm);
  free(send);
  free(recv);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (argc > 1) tolerance_ = atof(argv[1]);
  const int big = 100000;

  /* int SUM, tiny and large, in place and not. */
  int *ibuf = malloc(sizeof(int) * big), *iout = malloc(sizeof(int) * big);
  for (int n = 1; n <= big; n *= 100) {
    for (int i = 0; i < n; ++i) ibuf[i] = value(rank_, i);
    MPI_Allreduce(ibuf, iout, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i) {
      int want = 0;
      for (int q = 0; q < size_; ++q) want += value(q, i);
      if (iout[i] != want) fail("int-sum", i, iout[i], want);
    }
    char name[64];
    snprintf(name, sizeof name, "int-sum-%d", n);
    report(name, iout, sizeof(int) * n, MPI_COMM_WORLD);
  }
  for (int i = 0; i < big; ++i) iout[i] = value(rank_, i);
  MPI_Allreduce(MPI_IN_PLACE, iout, big, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  for (int i = 0; i < big; ++i) {
    int want = -1000;
    for (int q = 0; q < size_; ++q) want = value(q, i) > want ? value(q, i) : want;
    if (iout[i] != want) fail("int-max", i, iout[i], want);
  }
  report("int-max-inplace", iout, sizeof(int) * big, MPI_COMM_WORLD);

  /* double SUM (integer values: exact in any order). */
  double *dbuf = malloc(sizeof(double) * big), *dout = malloc(sizeof(double) * big);
  for (int i = 0; i < big; ++i) dbuf[i] = value(rank_, i);
  MPI_Allreduce(dbuf, dout, big, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < big; ++i) {
    double want = 0;
    for (int q = 0; q < size_; ++q) want += value(q, i);
    if (dout[i] != want) fail("double-sum", i, dout[i], want);
  }
  report("double-sum", dout, sizeof(double) * big, MPI_COMM_WORLD);

  /* float PROD (values 1 or 2: exact) and float MAX, large. */
  float *fbuf = malloc(sizeof(float) * big), *fout = malloc(sizeof(float) * big);
  for (int i = 0; i < big; ++i) fbuf[i] = (float)(1 + ((i + rank_) % 2));
  MPI_Allreduce(fbuf, fout, big, MPI_FLOAT, MPI_PROD, MPI_COMM_WORLD);
  for (int i = 0; i < big; ++i) {
    double want = 1;
    for (int q = 0; q < size_; ++q) want *= 1 + ((i + q) % 2);
    if (fout[i] != want) fail("float-prod", i, fout[i], want);
  }
  report("float-prod", fout, sizeof(float) * big, MPI_COMM_WORLD);
  for (int i = 0; i < big; ++i) fbuf[i] = (float)value(rank_, i);
  MPI_Allreduce(fbuf, fout, big, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  report("float-max", fout, sizeof(float) * big, MPI_COMM_WORLD);

  /* A user op on floats: never intercepted; the hash shows it is untouched. */
  MPI_Op op;
  MPI_Op_create(userMax, 1, &op);
  MPI_Allreduce(fbuf, fout, big, MPI_FLOAT, op, MPI_COMM_WORLD);
  report("float-userop", fout, sizeof(float) * big, MPI_COMM_WORLD);
  MPI_Op_free(&op);

  /* Float sums: empty, tiny (below any sensible threshold), large in/out of place, on a sub-comm. */
  floatSum("floatsum-empty", 0, 0, MPI_COMM_WORLD);
  floatSum("floatsum-tiny", 3, 0, MPI_COMM_WORLD);
  floatSum("floatsum-tiny-inplace", 5, 1, MPI_COMM_WORLD);
  floatSum("floatsum-large-out", big, 0, MPI_COMM_WORLD);
  floatSum("floatsum-large-inplace", big + 3, 1, MPI_COMM_WORLD);
  MPI_Comm half;
  /* Same members in reverse order, a different communicator: its ranks are not the world's (the
   * timeline still names each process's file by its world rank, run_timeline.py). */
  MPI_Comm_split(MPI_COMM_WORLD, 0, -rank_, &half);
  floatSum("floatsum-large-dupcomm", big, 0, half);
  MPI_Comm_free(&half);

  int total = 0;
  MPI_Allreduce(&failures_, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) printf("failures %d\n", total);
  free(ibuf); free(iout); free(dbuf); free(dout); free(fbuf); free(fout);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
