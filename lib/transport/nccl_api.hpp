// NcclApi: the NCCL (and the few CUDA stream) calls the NCCL transport makes, behind one interface, so
// the transport can run over real NCCL (nccl_real.cpp, CUDA builds only) or over a host fake whose ranks
// are threads (nccl_fake.hpp) — the way torchcomms (NcclxApi) and XLA test their NCCL layers without
// GPUs. The calls mirror NCCL's C API one to one and keep its semantics:
//   - send/recv/allReduce are *enqueued* on a stream; they have completed only after the caller
//     synchronizes that stream (streamSynchronize) or an event recorded after them (eventSynchronize).
//     A return of kSuccess means "enqueued", nothing more.
//   - between groupStart and groupEnd, operations are only collected; groupEnd posts them together, and
//     they progress concurrently. A send outside a group is a group of one.
//   - point-to-point matching is per (communicator, peer) in the order calls were made: NCCL has no
//     tags. A send completes only when its receive is posted (rendezvous), and the operations of one
//     communicator run in the order they were enqueued: a group whose operation waits for the peer's
//     *later* group blocks everything after it (a deadlock NCCL does not detect).
//   - a send and its receive must give the same byte count (the fake reports kMismatch; real NCCL's
//     behaviour is undefined: it hangs or corrupts).
// Errors are returned as codes, never thrown; lastError() gives the message of the calling thread's last
// failed call (ncclGetLastError).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace adaprec::detail {

// Opaque handles: ncclComm_t / cudaStream_t in the real implementation, the fake's own objects there.
using NcclComm = struct NcclCommOpaque*;
using NcclStream = struct NcclStreamOpaque*;
using NcclEvent = struct NcclEventOpaque*;

// ncclResult_t's values, plus two the fake reports where real NCCL cannot (see above).
enum class NcclResult : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
  kMismatch = 100,  // fake: a send and its receive disagree on the byte count
  kTimedOut = 101,  // streamSynchronize gave up after its timeout (the watchdog PyTorch puts around NCCL)
};

// The element types the transport uses (ncclUint8 for bytes; the native sum's types), and
// ncclFloat8e5m2 for adaprec-bench's fp8 baseline (NCCL >= 2.24 and sm_90: real NCCL returns
// kInvalidArgument otherwise; the fake sums it as NCCL's kernels do, nccl_fake.cpp).
enum class NcclDataType : int { kUint8, kFloat32, kBfloat16, kFloat16, kFloat8e5m2 };

// ncclUniqueId: 128 opaque bytes created once (rank 0) and given to every rank.
struct NcclUniqueId {
  char bytes[128] = {};
};

class NcclApi {
 public:
  virtual ~NcclApi() = default;

  virtual NcclResult getUniqueId(NcclUniqueId* id) = 0;
  // Collective over `nranks` callers with the same id.
  virtual NcclResult commInitRank(NcclComm* comm, int nranks, const NcclUniqueId& id, int rank) = 0;
  // Collective over the members of `comm`: ranks with the same color get a new communicator ordered by
  // (key, rank); ncclCommSplit.
  virtual NcclResult commSplit(NcclComm comm, int color, int key, NcclComm* newComm) = 0;
  // Waits for nothing: the caller synchronizes its streams first (ncclCommDestroy).
  virtual NcclResult commDestroy(NcclComm comm) = 0;
  // Abandons every operation of this rank on `comm` still in flight, so none of its buffers is touched
  // again, and frees the communicator (ncclCommAbort). Peers are not told: they hang or time out.
  virtual NcclResult commAbort(NcclComm comm) = 0;
  virtual NcclResult commCount(NcclComm comm, int* count) = 0;
  virtual NcclResult commUserRank(NcclComm comm, int* rank) = 0;

  virtual NcclResult groupStart() = 0;
  virtual NcclResult groupEnd() = 0;
  virtual NcclResult send(const void* data, std::size_t count, NcclDataType type, int peer,
                          NcclComm comm, NcclStream stream) = 0;
  virtual NcclResult recv(void* data, std::size_t count, NcclDataType type, int peer, NcclComm comm,
                          NcclStream stream) = 0;
  // Sum over the ranks of `comm`, bit-identical on every rank (ncclAllReduce with ncclSum).
  virtual NcclResult allReduceSum(const void* send, void* recv, std::size_t count, NcclDataType type,
                                  NcclComm comm, NcclStream stream) = 0;

  // The CUDA side: streams, stream-ordered copies and the device scratch the transport stages host
  // messages through. In the fake, "device" memory is host memory and a copy runs when the stream
  // reaches it.
  virtual NcclResult streamCreate(NcclStream* stream) = 0;
  virtual NcclResult streamDestroy(NcclStream stream) = 0;
  // Blocks until everything enqueued on `stream` has completed. timeout > 0: gives up after it with
  // kTimedOut (lastError names the peer of the oldest unfinished operation); 0 waits forever. An
  // operation that failed (kMismatch, a remote error) is reported here, as NCCL's asynchronous errors.
  virtual NcclResult streamSynchronize(NcclStream stream, NcclComm comm,
                                       std::chrono::milliseconds timeout) = 0;
  // cudaEvent: record marks the point the stream has reached when the event completes; synchronize
  // waits for it (timeout and errors as streamSynchronize: the stream's asynchronous error, a timeout
  // naming the peer of the stream's oldest unfinished operation).
  virtual NcclResult eventCreate(NcclEvent* event) = 0;
  virtual NcclResult eventDestroy(NcclEvent event) = 0;
  virtual NcclResult eventRecord(NcclEvent event, NcclStream stream) = 0;
  virtual NcclResult eventSynchronize(NcclEvent event, NcclComm comm,
                                      std::chrono::milliseconds timeout) = 0;
  virtual NcclResult deviceAlloc(void** ptr, std::size_t bytes) = 0;
  virtual NcclResult deviceFree(void* ptr) = 0;
  // Stream-ordered copy between host and device memory (either direction, cudaMemcpyDefault).
  virtual NcclResult memcpyAsync(void* dst, const void* src, std::size_t bytes, NcclStream stream) = 0;

  // Device memory handed over directly (docs/gpu.md, "Device memory straight to the transport").
  // movesMemory: whether send/recv/allReduceSum take the memory of a device whose DeviceCodec says
  // `memorySpace` ("cuda" for real NCCL; the fake moves host memory only). isDeviceMemory: whether
  // `p` is such memory (cudaPointerGetAttributes), so a transport that also gets host messages stages
  // only those; the fake: never.
  virtual bool movesMemory(std::string_view memorySpace) const = 0;
  virtual bool isDeviceMemory(const void* p) const = 0;

  // ncclGetErrorString / ncclGetLastError.
  virtual const char* errorString(NcclResult result) const = 0;
  virtual std::string lastError() const = 0;
};

// "ncclInvalidUsage" and friends, shared by both implementations' errorString.
const char* ncclResultName(NcclResult result);

// The real NcclApi over libnccl and the CUDA runtime; nullptr in a build without NCCL.
std::shared_ptr<NcclApi> makeRealNcclApi();

}  // namespace adaprec::detail
