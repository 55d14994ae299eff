/* AdaPrec C API for MPI programs: a drop-in for MPI_Allreduce with the same signature.
 *
 * MPI_FLOAT + MPI_SUM (including MPI_IN_PLACE) of at least ADAPREC_MIN_BYTES bytes goes through the
 * compressed allreduce with the format of ADAPREC_FORMAT (default fp32) and the algorithm of
 * ADAPREC_ALGO (default auto); every other call goes to PMPI_Allreduce unchanged, so it behaves exactly
 * like plain MPI. Invalid environment values print one error line naming the variable and its valid
 * values and call MPI_Abort. No C++ exception ever crosses this API. libadaprec-preload.so exports
 * MPI_Allreduce on top of this, so unmodified programs can use it through LD_PRELOAD. */
#ifndef ADAPREC_ADAPREC_MPI_H
#define ADAPREC_ADAPREC_MPI_H

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same contract and return values as MPI_Allreduce (MPI_SUCCESS or an MPI error class). */
int AdaPrec_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      MPI_Comm comm);

/* Counters of this process since start (or the last reset). */
typedef struct AdaPrec_Stats {
  uint64_t intercepted;  /* calls served by the compressed allreduce */
  uint64_t passedThrough; /* calls forwarded to PMPI_Allreduce */
  uint64_t fp32Bytes;    /* bytes the intercepted calls would have sent in fp32 (same algorithm) */
  uint64_t wireBytes;    /* bytes the intercepted calls sent */
  double seconds;        /* wall time inside intercepted calls */
} AdaPrec_Stats;

void AdaPrec_GetStats(AdaPrec_Stats *stats);
void AdaPrec_ResetStats(void);

/* Collective over MPI_COMM_WORLD: sums every rank's counters and, on rank 0, prints one line to
 * stderr. The preload library calls it from MPI_Finalize when ADAPREC_STATS=1. */
void AdaPrec_PrintStats(void);

#ifdef __cplusplus
}
#endif

#endif /* ADAPREC_ADAPREC_MPI_H */
