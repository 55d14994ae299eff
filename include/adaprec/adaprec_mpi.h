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
#include <stddef.h>
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

/* ---- Explicit communicators: the API for language bindings (the Python module uses it) ----------
 *
 * Unlike AdaPrec_Allreduce, these calls take every choice as an argument, report errors as a return
 * code plus a message instead of MPI error handlers, and keep error-feedback state per named tensor.
 * Return value: ADAPREC_OK (0) or one of the ADAPREC_ERR_* codes; AdaPrec_LastError() then gives a
 * one-line message (per thread, valid until this thread's next call). */
#define ADAPREC_OK 0
#define ADAPREC_ERR_INVALID_ARGUMENT 1
#define ADAPREC_ERR_MALFORMED_INPUT 2
#define ADAPREC_ERR_MISMATCH 3
#define ADAPREC_ERR_UNSUPPORTED 4
#define ADAPREC_ERR_TRANSPORT 5
#define ADAPREC_ERR_IO 6
#define ADAPREC_ERR_INTERNAL 7
#define ADAPREC_ERR_CUDA 8
/* Another rank passed ADAPREC_LOCAL_INVALID: nothing was reduced anywhere. */
#define ADAPREC_ERR_PEER_INVALID 9

/* AdaPrec_CommAllreduce flags. */
/* Before any data moves, all ranks compare count, format, algorithm, averaging and whether a key was
 * given (one 3-word MPI allreduce), so a mismatch or a peer's invalid input becomes
 * ADAPREC_ERR_MISMATCH / ADAPREC_ERR_PEER_INVALID on every rank instead of a hang. Without it a
 * disagreement still gives ADAPREC_ERR_MISMATCH (the library's own 2-word check, also before the native
 * path), but a peer's invalid input is not reported. After MPI_Finalize (or before MPI_Init),
 * AdaPrec_CommCreate and AdaPrec_CommAllreduce return ADAPREC_ERR_TRANSPORT. */
#define ADAPREC_CHECK_AGREEMENT 1
/* This rank's input is unusable (the binding found a wrong dtype, say): take part in the agreement
 * and fail with ADAPREC_ERR_INVALID_ARGUMENT here and ADAPREC_ERR_PEER_INVALID elsewhere. Buffers and
 * count are ignored. Implies ADAPREC_CHECK_AGREEMENT. */
#define ADAPREC_LOCAL_INVALID 2

typedef struct AdaPrec_CommObject *AdaPrec_Comm;

/* What one allreduce did (adaprec::AllreduceStats). Names are NUL-terminated. */
typedef struct AdaPrec_CallStats {
  char algorithm[24];      /* what ran (auto resolved) */
  char format[24];         /* wire format used */
  uint64_t count;          /* elements reduced */
  uint64_t wireBytes;      /* bytes this rank sent */
  uint64_t fp32Bytes;      /* bytes this rank would have sent in fp32, same algorithm */
  double encodeSeconds;
  double decodeSeconds;
  double transferSeconds;
  double totalSeconds;
} AdaPrec_CallStats;

const char *AdaPrec_LastError(void);

/* Collective over comm (MPI must be initialised): an AdaPrec communicator on a duplicate of comm. */
int AdaPrec_CommCreate(MPI_Comm comm, AdaPrec_Comm *out);
/* Collective (frees the duplicate). NULL is accepted. */
int AdaPrec_CommFree(AdaPrec_Comm comm);
int AdaPrec_CommRank(AdaPrec_Comm comm, int *rank);
int AdaPrec_CommSize(AdaPrec_Comm comm, int *size);

/* Sum of every rank's `count` floats. send == recv (or send NULL) means in place. format: a format spec
 * ("fp8s", "table1+ef", "fastest"); algo: an algorithm name ("auto", "twoshot", ...); average: divide
 * by the rank count; key: the tensor's name, required with "+ef" (its error-feedback state); flags:
 * ADAPREC_CHECK_AGREEMENT | ADAPREC_LOCAL_INVALID. stats may be NULL. */
int AdaPrec_CommAllreduce(AdaPrec_Comm comm, const float *send, float *recv, int64_t count,
                          const char *format, const char *algo, int average, const char *key,
                          int flags, AdaPrec_CallStats *stats);

/* Error-feedback state (adaprec::Communicator). Save: writes the versioned blob into out when
 * capacity suffices and always sets *size to its length (call with out NULL to ask). Load replaces
 * all state. Reset: one key, or every key when key is NULL. */
int AdaPrec_CommSaveFeedback(AdaPrec_Comm comm, void *out, size_t capacity, size_t *size);
int AdaPrec_CommLoadFeedback(AdaPrec_Comm comm, const void *bytes, size_t size);
int AdaPrec_CommResetFeedback(AdaPrec_Comm comm, const char *key);
/* One key's residuals, to move them when tensors are regrouped. Info sets *count and *slots (0 and 0
 * for an unknown key) and copies the resolved algorithm's name into algo[algoCapacity]. Get copies
 * slot `slot` (zeros for a slot the algorithm never used). Set replaces the key's state with `slots`
 * slots of `count` floats stored one after another in data. */
int AdaPrec_CommFeedbackInfo(AdaPrec_Comm comm, const char *key, uint64_t *count, uint64_t *slots,
                             char *algo, size_t algoCapacity);
int AdaPrec_CommGetFeedback(AdaPrec_Comm comm, const char *key, uint64_t slot, float *out,
                            uint64_t count);
int AdaPrec_CommSetFeedback(AdaPrec_Comm comm, const char *key, const char *algo, uint64_t count,
                            uint64_t slots, const float *data);

#ifdef __cplusplus
}
#endif

#endif /* ADAPREC_ADAPREC_MPI_H */
