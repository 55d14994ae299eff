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

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace adaprec {

// Tags an algorithm may use: [0, kMaxAlgorithmTag). Split transports reserve the space above.
inline constexpr int kMaxAlgorithmTag = 1024;

class Transport;

// One posted send or receive. wait() blocks until it completes and returns the bytes transferred (for
// a receive: what the sender sent, which may be fewer than the capacity posted). A receive of a message
// longer than its capacity throws Error(kMismatch). Destroying a request that was not waited for (error
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

  // Uncompressed sum over ranks of `count` elements of `type` stored in `recv` (in place), bit-identical
  // on every rank. The default gathers to rank 0, sums in rank order and broadcasts; MPI overrides it
  // with MPI_Allreduce (fp32) or MPI_Allreduce with a 16-bit user op.
  virtual void nativeAllreduce(void* recv, std::size_t count, NativeType type);
  // Same sum out of place: recv = sum of every rank's send (send is not modified; send == recv means
  // in place). The default copies and calls nativeAllreduce; MPI passes both buffers to MPI_Allreduce.
  virtual void nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                         NativeType type);

  // Collective: ranks passing the same color get a transport over just them, ranked by (key, rank).
  // Sub-transports are independent of the parent's traffic.
  virtual std::unique_ptr<Transport> split(int color, int key) = 0;

  // Which node (shared-memory domain) this rank is on: equal ids share memory. Loopback groups can
  // emulate several nodes; MPI uses MPI_Comm_split_type(SHARED). ADAPREC_RANKS_PER_NODE overrides both
  // to emulate a multi-node layout on one machine (consecutive ranks grouped).
  virtual int nodeId() const = 0;
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

// Runs fn(rank, transport) on one thread per rank of `group` and joins them. If any rank throws, the
// group is aborted (so no rank hangs) and the first exception (lowest rank) is rethrown after the join.
void runLoopback(LoopbackGroup& group, const std::function<void(int rank, std::shared_ptr<Transport>)>& fn);

}  // namespace adaprec
