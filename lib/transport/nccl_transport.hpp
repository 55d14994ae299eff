// The NCCL transport: adaprec::Transport over NcclApi (real NCCL, or the host fake in tests).
//
// Why channels. NCCL's point-to-point rules ("ncclSend ... is blocking for the GPU"; operations that
// must progress concurrently go in one group; a communicator runs its groups in order, a group
// completing as a whole) do not fit the algorithms' MPI-style pattern — post receives ahead, send as
// soon as data is ready, wait one message at a time — on a single communicator. The first design here
// (everything on the transport's communicator and stream, each wait launching the pending sends and
// the receives posted up to the waited one as one group) deadlocked over the NCCL fake: ring at 2
// ranks and 65539 elements sends its pipelined segments in one group that the receiver takes one wait
// at a time, and twoshot puts a send in a group with a receive whose partner the peer sends only
// after its own waits. Grouping everything pending at a wait deadlocks ring's allgather instead (it
// posts every step's receive before the sends they match exist).
//
// Design: one *channel* per ordered pair of ranks — a two-rank communicator (from ncclCommSplit, in
// rounds of a round-robin pairing) and a stream of its own, carrying only A's sends to B. Like
// PyTorch's per-pair NCCL communicators, but one per direction, so nothing couples a rank's sends with
// its receives. Channels progress independently; on each, one rank only sends and the other only
// receives, in order.
//   - isend/irecv launch at once: ncclSend/ncclRecv of bytes (ncclUint8) as a group of one on the
//     channel's stream, followed by an event. A send is in flight from its post, as an MPI send; it
//     completes when the receive is posted (NCCL's rendezvous), which never blocks the sender's host.
//   - wait() waits for the operation's event with the transport's timeout (Transport::setTimeout); a
//     stuck channel throws Error(kTransport) naming the peer. On a channel everything launched before
//     the waited operation has then completed too.
//   - within a channel NCCL matches in order without tags; the engine posts one peer's receives in
//     the order that peer sends, so the tags would pair the same messages. Tags are range-checked only.
//   - done() is true once the request (or a later one on its channel) was waited for. Destroying an
//     unwaited request aborts the transport (NCCL may still touch its buffer): error unwinding only.
// The native sum (ncclAllReduce) and split (ncclCommSplit) use the transport's own communicator and
// the caller's stream. Cost: 2(p-1) two-rank communicators and streams per rank, per transport and
// sub-transport, created collectively at construction.
// A zero-byte message is completed at once without NCCL (both sides skip it). Sizes: NCCL has no
// "received fewer bytes"; a receive must be posted with the exact size (the engine always does), and
// wait() returns it; a difference is Error(kMismatch) from the fake (real NCCL: hang or corruption).
// Host messages on real NCCL: NCCL moves device memory only. With stageThroughDevice a message (or a
// native sum) in host memory is copied to device scratch on its channel's stream before the send and
// back after the receive (the native sum likewise, on the caller's stream); device memory
// (NcclApi::isDeviceMemory) goes as it is — the engine's encoded messages when the Communicator's
// device is CUDA (acceptsDeviceMemory), so only the library's own control messages are staged.
// Not thread-safe: one thread per transport, like every Transport.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "adaprec/transport.hpp"
#include "transport/nccl_api.hpp"

namespace adaprec::detail {

struct NcclTransportOptions {
  int nodeId = 0;          // which node this rank is on (NCCL does not say); ADAPREC_RANKS_PER_NODE wins
  int jobRank = -1;        // this rank in the whole job, for ADAPREC_RANKS_PER_NODE; -1: the comm rank
  bool stageThroughDevice = false;  // messages may be host memory: copy those through device scratch
  bool ownsComm = true;    // destroy the communicator with the transport
};

class NcclTransport final : public Transport {
 public:
  // `stream` must outlive the transport and every sub-transport (they queue on it too).
  NcclTransport(std::shared_ptr<NcclApi> api, NcclComm comm, NcclStream stream,
                NcclTransportOptions options = {});
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "nccl"; }
  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override;
  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override;
  void nativeAllreduce(void* recv, std::size_t count, NativeType type) override;
  void nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                 NativeType type) override;
  std::unique_ptr<Transport> split(int color, int key) override;
  int nodeId() const override;
  // What NCCL moves (NcclApi::movesMemory): CUDA device memory, as it is. Host messages are staged
  // through device scratch with stageThroughDevice.
  bool acceptsDeviceMemory(std::string_view memorySpace) const override;

  // The caller's stream for the next operations, of this transport and its sub-transports (which share
  // it): adaprecNcclAllReduce queues on the stream it is given. Nothing may be in flight.
  void setStream(NcclStream stream);

  struct Op;

 private:
  struct Channel;
  friend class NcclRequest;
  NcclTransport(std::shared_ptr<NcclApi> api, NcclComm comm, std::shared_ptr<NcclStream> stream,
                NcclTransportOptions options);
  void openChannels();
  std::size_t waitFor(Op& op);
  void forget(Op& op);  // its request was destroyed unwaited
  void launch(const std::shared_ptr<Op>& op);
  void complete(Op& op);
  void synchronizeAll();
  void sumOnStream(const void* send, void* recv, std::size_t count, NativeType type);
  void check(NcclResult result, const char* call);
  void requireUsable() const;
  void abandon();

  std::shared_ptr<NcclApi> api_;
  NcclComm comm_;
  std::shared_ptr<NcclStream> stream_;  // shared with the sub-transports
  NcclTransportOptions options_;
  int rank_ = 0;
  int size_ = 0;
  bool broken_ = false;
  std::vector<std::unique_ptr<Channel>> sendTo_;    // [peer]: this rank's sends to peer
  std::vector<std::unique_ptr<Channel>> recvFrom_;  // [peer]: peer's sends to this rank
};

}  // namespace adaprec::detail
