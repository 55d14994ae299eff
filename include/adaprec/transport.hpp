// Transport: the only way algorithms move bytes between ranks.
//
// A transport connects `size()` ranks and offers non-blocking point-to-point byte messages, so an
// algorithm can post a receive, encode the next segment, and only then wait for the transfer. Messages
// between one (sender, receiver, tag) triple are delivered in the order they were posted, as in MPI.
// Algorithms never call MPI or NCCL themselves; they are written once against this interface.
//
// Implementations here: loopback (N ranks as threads of one process, for exhaustive tests) and MPI
// (adaprec/transport_mpi.hpp, opt-in because it includes mpi.h). NCCL comes with the CUDA build.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace adaprec {

// Tags an algorithm may use: [0, kMaxAlgorithmTag). Split transports reserve the space above.
inline constexpr int kMaxAlgorithmTag = 1024;

class Transport;

// One posted send or receive. wait() blocks until it completes and returns the bytes transferred (for
// a receive: what the sender sent, which may be fewer than the capacity posted). A receive of a message
// longer than its capacity throws Error(kMismatch). When the transport had a timeout set at the time the
// request was posted (Transport::setTimeout), a wait() that has not completed within it throws
// Error(kTransport) naming the peer and the tag. Destroying a request that was not waited for (error
// unwinding) cancels a pending receive and completes a pending send; buffers must outlive requests.
class Request {
 public:
  virtual ~Request() = default;
  virtual std::size_t wait() = 0;
  virtual bool done() const = 0;
};
using RequestPtr = std::unique_ptr<Request>;

// The element types a transport's native (uncompressed) allreduce sums. 16-bit types are summed in
// fp32 and rounded back to 16 bits after every addition, the ChainerMN fp16-allreduce semantics.
enum class NativeType : std::uint8_t { kFp32, kBf16, kFp16 };

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Short description for logs and stats ("loopback", "mpi").
  virtual const char* kind() const = 0;

  // Non-blocking byte messages. `data` must stay valid and unmodified until the request completes.
  // 0 <= tag < kMaxAlgorithmTag. peer == rank() is not allowed.
  virtual RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) = 0;
  virtual RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) = 0;

  // Blocking convenience: post the receive first, then the send, then wait for both.
  std::size_t sendRecv(int sendPeer, const void* sendData, std::size_t sendBytes, int recvPeer,
                       void* recvData, std::size_t recvCapacityBytes, int tag);

  // Element-wise max over ranks, in place, on every rank. Used for agreement checks (a value and its
  // complement give min and max in one call) and for timing decisions every rank must share. The
  // default is a dissemination exchange over isend/irecv (any rank count); MPI overrides it.
  virtual void allreduceMax(std::uint64_t* values, std::size_t count);
  // Collective: returns once every rank has called it (one allreduceMax of nothing). For timings that
  // must start together on every rank (auto's probe and trial).
  void barrier();

  // Uncompressed sum over ranks of `count` elements of `type` stored in `recv` (in place), bit-identical
  // on every rank. The default gathers to rank 0, sums in rank order and broadcasts; MPI overrides it
  // with MPI_Allreduce (fp32) or MPI_Allreduce with a 16-bit user op.
  virtual void nativeAllreduce(void* recv, std::size_t count, NativeType type);
  // Same sum out of place: recv = sum of every rank's send (send is not modified; send == recv means
  // in place). The default copies and calls nativeAllreduce; MPI passes both buffers to MPI_Allreduce.
  virtual void nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                         NativeType type);

  // Collective: ranks passing the same color get a transport over just them, ranked by (key, rank).
  // Sub-transports are independent of the parent's traffic and start with the parent's timeout.
  virtual std::unique_ptr<Transport> split(int color, int key) = 0;

  // Whether isend/irecv and nativeAllreduce* also take device memory of `memorySpace` (what the
  // Communicator's device says it is, DeviceCodec::memorySpace(): "cuda" for CUDA device memory): a
  // CUDA-aware MPI (MPIX_Query_cuda_support) or NCCL. Then the algorithms keep encoded messages in
  // device memory and hand them over directly instead of staging them through host memory
  // (docs/gpu.md, "Device memory straight to the transport"). The caller synchronizes the device's
  // stream before it hands a buffer over; host memory stays accepted too. Sub-transports from split()
  // answer the same. Default: false (host memory only).
  virtual bool acceptsDeviceMemory(std::string_view memorySpace) const;

  // Largest message the algorithms send to a rank on another node (0: no limit, one message per
  // segment or range): what suits the transport's protocol between nodes. MPI answers 48 KiB, under
  // Open MPI's TCP eager limit, so that no message waits for a rendezvous handshake queued behind bulk
  // data (docs/algorithms.md, twoshot); loopback answers the same so that the algorithms' piece paths
  // run in process; NCCL answers 0 (it cuts and pipelines large sends itself, and every extra message
  // is an extra ncclSend). Wrapping transports forward it. Default: 0.
  virtual std::size_t interNodeMessageBytes() const;

  // Failure detection, like Gloo's per-call timeout: a wait of a request posted after this call, and
  // the collectives (allreduceMax, nativeAllreduce*; loopback's split rendezvous) give up after
  // `timeout` without progress and throw Error(kTransport) whose message names the peer that did not
  // answer ("timed out after 5.0 s waiting for a message from rank 3 (tag 17) ..."). 0 (the default)
  // waits forever. With a timeout set, every algorithm (lib/algorithm runAlgorithm) and the default
  // nativeAllreduce end with a completion vote (one allreduceMax), so that a failure seen by one rank
  // becomes an error on every rank instead of a result on some; MPI's allreduceMax then uses the
  // point-to-point dissemination, whose timeouts name the peer. After a timeout (or any kTransport
  // error) the transport, its sub-transports and a Communicator over it may hold messages of the
  // failed call and must not be used again: destroy them. MPI: MPI_Comm_split itself is blocking and
  // cannot time out; an MPI_Iallreduce that times out names no rank (MPI cannot say which is missing).
  virtual void setTimeout(std::chrono::milliseconds timeout);
  virtual std::chrono::milliseconds timeout() const;

  // Which node (shared-memory domain) this rank is on: equal ids share memory. Loopback groups can
  // emulate several nodes; MPI uses MPI_Comm_split_type(SHARED). ADAPREC_RANKS_PER_NODE overrides both
  // to emulate a multi-node layout on one machine (consecutive ranks grouped).
  virtual int nodeId() const = 0;

  // This rank's identity in the whole job, for names that must not collide between processes (the
  // timeline's file): MPI's rank in MPI_COMM_WORLD; by default rank(), for transports without a wider
  // job (loopback). Wrappers forward their inner transport's.
  virtual int jobRank() const { return rank(); }

 private:
  // The default nativeAllreduce without its completion vote.
  void gatherSumBroadcast(void* recv, std::size_t count, NativeType type);

  std::chrono::milliseconds timeout_{0};
};

// A loopback group: `size` ranks exchanging messages through shared memory inside one process, one
// thread per rank. ranksPerNode > 0 emulates nodes of that many consecutive ranks (for hierarchical).
class LoopbackGroup {
 public:
  explicit LoopbackGroup(int size, int ranksPerNode = 0);
  ~LoopbackGroup();
  LoopbackGroup(const LoopbackGroup&) = delete;
  LoopbackGroup& operator=(const LoopbackGroup&) = delete;

  int size() const;
  // The transport of one rank; use each from its own thread.
  std::shared_ptr<Transport> transport(int rank);
  // Makes every blocked and future operation of the group throw Error(kTransport): call it when one
  // rank fails so the others do not wait forever.
  void abort();

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::vector<std::shared_ptr<Transport>> transports_;
};

// Integrity checking, a decorator over any transport: every isend carries a 4-byte CRC32C trailer
// (Castagnoli; the SSE4.2 crc32 instruction where the CPU has it) computed over the sender, receiver,
// tag, the message's sequence number on its (sender, receiver, tag) channel and the payload. Receives
// are posted with capacity + 4 and checked on wait(), which reports the payload size. A message whose
// bits were flipped, that was cut short, reordered, replayed, or that arrives after a lost one on its
// channel throws Error(kTransport) on its receiver: "checksum mismatch on message #N from rank P to
// rank R (tag T, B bytes) ..." (kTransport, not kMalformedInput: the caller's bytes were fine, the
// transport damaged them, and the transport must not be used again).
// Covered: every isend/irecv, so every compressed algorithm (ring, twoshot, rabenseifner,
// recursive_doubling, hierarchical's intra-node fp32 messages and its leaders' compressed algorithm).
// Not covered: allreduceMax, nativeAllreduce and nativeAllreduceOutOfPlace delegate to the inner
// transport unchanged, so the native algorithm (MPI_Allreduce under MPI), hierarchical's native inner
// step (fp32) and the agreement checks carry no CRC. split() wraps the sub-transport; setTimeout and
// timeout forward to the inner transport. Every rank of a job must use it or none (the trailer changes
// every message's size). Cost: one copy and one CRC pass per message on each side.
std::shared_ptr<Transport> makeChecksumTransport(std::shared_ptr<Transport> inner);

// Runs fn(rank, transport) on one thread per rank of `group` and joins them. If any rank throws, the
// group is aborted (so no rank hangs) and the first exception (lowest rank) is rethrown after the join.
void runLoopback(LoopbackGroup& group, const std::function<void(int rank, std::shared_ptr<Transport>)>& fn);

}  // namespace adaprec
