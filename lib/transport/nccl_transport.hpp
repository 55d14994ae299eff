// The NCCL transport: adaprec::Transport over NcclApi (real NCCL, or the host fake in tests).
//
// isend/irecv only record the operation. A wait() launches a batch as one NCCL group (groupStart,
// ncclSend/ncclRecv of bytes as ncclUint8, groupEnd) on the transport's stream and synchronizes the
// stream. Batching rule — why it cannot deadlock where the algorithms are correct under MPI semantics:
//   the batch launched by wait(X) holds every pending send, and the pending receives posted up to and
//   including X; receives posted after X stay pending.
// Sends go at the first wait after they are posted, so a peer blocked on one of them is never waiting
// for this rank to reach a later wait. Receives posted ahead (ring's allgather posts all of its steps'
// receives at once; each is matched by a send the peer makes only after its own earlier wait) must
// not go early: NCCL runs a communicator's groups in order and a group completes only when all of its
// operations have, so a group holding a receive whose send comes in the peer's *later* group would
// block both ranks for good. Per peer, receives keep their posting order, so NCCL's tagless in-order
// matching pairs the same messages the tags would (every algorithm posts one peer's receives in the
// order that peer sends). Tags are checked for range and otherwise ignored.
// A zero-byte message is completed at once without NCCL (both sides skip it).
// Sizes: NCCL has no "received fewer bytes"; a receive must be posted with the exact size (the engine
// always does), and wait() returns that size. A difference is Error(kMismatch) from the fake; real NCCL
// would hang or corrupt.
// Timeouts: wait() synchronizes with the transport's timeout (Transport::setTimeout); a stuck stream
// throws Error(kTransport) naming the peer (from the fake; real NCCL: the polling watchdog in
// nccl_real.cpp, which cannot name the peer).
// Host messages on real NCCL: NCCL moves device memory only. With stageThroughDevice every message is
// copied to a device scratch buffer on the stream before its group and back after it (and the native
// sum likewise): correct, not fast — the device-buffer path is for the device seam to replace.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "adaprec/transport.hpp"
#include "transport/nccl_api.hpp"

namespace adaprec::detail {

struct NcclTransportOptions {
  int nodeId = 0;          // which node this rank is on (NCCL does not say); ADAPREC_RANKS_PER_NODE wins
  int jobRank = -1;        // this rank in the whole job, for ADAPREC_RANKS_PER_NODE; -1: the comm rank
  bool stageThroughDevice = false;  // messages are host memory: copy through device scratch
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

  // The caller's stream for the next operations, of this transport and its sub-transports (which share
  // it): adaprecNcclAllReduce queues on the stream it is given. Nothing may be in flight.
  void setStream(NcclStream stream);

  struct Op;

 private:
  friend class NcclRequest;
  NcclTransport(std::shared_ptr<NcclApi> api, NcclComm comm, std::shared_ptr<NcclStream> stream,
                NcclTransportOptions options);
  std::size_t waitFor(Op& op);
  void forget(Op& op);  // its request was destroyed unwaited
  void launch(const Op* upTo);  // nullptr: everything pending
  void synchronize();
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
  std::deque<std::shared_ptr<Op>> pending_;
  std::vector<std::shared_ptr<Op>> inflight_;  // launched, not yet synchronized
  std::vector<void*> scratch_;                 // device buffers of the in-flight operations
};

}  // namespace adaprec::detail
