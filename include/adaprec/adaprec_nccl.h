/* AdaPrec C API for NCCL programs: a drop-in for ncclAllReduce with the same signature. Available in
 * a build with CUDA and NCCL (meson options cuda, nccl); opt-in header because it includes nccl.h.
 *
 * ncclFloat32 + ncclSum of at least ADAPREC_MIN_BYTES bytes goes through the compressed allreduce with
 * the format of ADAPREC_FORMAT and the algorithm of ADAPREC_ALGO (default fp32 + auto: passed
 * through, the very same ncclAllReduce); every other call goes to ncclAllReduce unchanged. Every rank
 * must call it in the same order with the same arguments, as for ncclAllReduce; the first compressed
 * call on a communicator is collective and creates AdaPrec's state for it: two-rank communicators split
 * from `comm` (ncclCommSplit) per direction of each pair, and their streams.
 *
 * The compressed path runs on the device buffers themselves: the codec's kernels are queued on
 * `stream` after the caller's work there, the encoded messages go to NCCL in device memory (no copy
 * through the host; only AdaPrec's few control messages are staged), and the call synchronizes
 * `stream` before it returns: it blocks the host until the result is in recvbuff (ncclAllReduce only
 * enqueues). sendbuff and recvbuff must be device memory of the current GPU (else
 * ncclInvalidArgument). See docs/gpu.md, "Device memory straight to the transport".
 *
 * NCCL does not say which ranks share a node, so `hierarchical` (and auto's view of the topology) sees
 * one node unless ADAPREC_RANKS_PER_NODE is set.
 *
 * Returns ncclSuccess or an ncclResult_t error; a one-line message goes to stderr. An invalid ADAPREC_*
 * value gives ncclInvalidArgument on every float sum, on every rank of its communicator (the ranks
 * agree first, so a value invalid on some ranks only fails the call everywhere instead of leaving the
 * others waiting); other calls are ncclAllReduce's. No C++ exception crosses this API. */
#ifndef ADAPREC_ADAPREC_NCCL_H
#define ADAPREC_ADAPREC_NCCL_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

ncclResult_t adaprecNcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream);

/* Frees AdaPrec's state for `comm` (its split communicators, streams and device codecs). Call it on
 * every rank before ncclCommDestroy(comm) if adaprecNcclAllReduce used the communicator: the state is
 * kept per ncclComm_t value, and a later communicator that NCCL gives the same address would find it.
 * Where that one differs in size, rank or device, adaprecNcclAllReduce sets the old state aside
 * (never freed) and starts afresh, with one line naming this function; one alike in all three cannot
 * be told apart. */
ncclResult_t adaprecNcclCommFree(ncclComm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* ADAPREC_ADAPREC_NCCL_H */
