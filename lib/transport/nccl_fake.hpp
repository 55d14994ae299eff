// A host fake of NcclApi: ranks are threads of one process (as in the loopback transport), one NcclFake
// object plays the machine they share. It is strict where NCCL is strict, so that a transport that works
// over it cannot rely on luck that real NCCL would not give:
//   - groups: operations between groupStart and groupEnd are only collected (per thread, like NCCL's
//     thread-local group state); groupEnd enqueues them on their stream as one group.
//   - streams run their groups in order: a group's operations are posted (become matchable) only when
//     every earlier group on the stream has completed, and a group completes when all of its operations
//     have. Nothing runs on the caller's thread: progress is made by whichever thread posts the partner.
//   - sends are rendezvous: a send completes only when the matching receive is posted (real NCCL may let
//     a small send finish early; a program correct under rendezvous is correct under both).
//   - matching is per (communicator, sender, receiver) in posting order, without tags, as in NCCL.
//   - a send and its receive with different byte counts: both fail, and streamSynchronize reports
//     kMismatch on both ranks (real NCCL: undefined, in practice a hang or corrupted data — the fake
//     reports the bug NCCL would hide).
//   - a missing partner: the stream never completes; streamSynchronize with a timeout returns kTimedOut
//     and lastError names the peer of the oldest unfinished operation (real NCCL hangs; PyTorch's
//     watchdog would time out the same way).
//   - allReduceSum is a collective matched by its order on the communicator; the sum is formed in rank
//     order (the default Transport::nativeAllreduce's order and arithmetic), so it is bit-identical on
//     every rank and to the loopback transport's native sum.
//   - a group whose operations use several streams is split per stream, each part running on its own
//     stream; real NCCL joins the streams (each waits for the whole group). Not modeled: the NCCL
//     transport never groups across streams.
//   - events: a record is a marker in the stream, complete when the stream reaches it.
//   - "device" memory is host memory (deviceAlloc = operator new); memcpyAsync runs when the stream
//     reaches it, so a missing synchronize shows up as stale data.
// Why not the loopback transport's mailbox underneath: its sends are eager and its messages tagged, so a
// fake over it would complete programs that deadlock or mismatch under NCCL.
#pragma once

#include <chrono>
#include <memory>

#include "transport/nccl_api.hpp"

namespace adaprec::detail {

struct NcclFakeOptions {
  // commInitRank and commSplit rendezvous give up after this (kTimedOut); 0 waits forever.
  std::chrono::milliseconds rendezvousTimeout{0};
};

class NcclFake final : public NcclApi {
 public:
  explicit NcclFake(NcclFakeOptions options = {});
  ~NcclFake() override;

  // Every blocked and future call fails with kRemoteError: call it when one rank fails so the others do
  // not wait forever (the test runners' equivalent of LoopbackGroup::abort).
  void abort();

  NcclResult getUniqueId(NcclUniqueId* id) override;
  NcclResult commInitRank(NcclComm* comm, int nranks, const NcclUniqueId& id, int rank) override;
  NcclResult commSplit(NcclComm comm, int color, int key, NcclComm* newComm) override;
  NcclResult commDestroy(NcclComm comm) override;
  NcclResult commAbort(NcclComm comm) override;
  NcclResult commCount(NcclComm comm, int* count) override;
  NcclResult commUserRank(NcclComm comm, int* rank) override;
  NcclResult groupStart() override;
  NcclResult groupEnd() override;
  NcclResult send(const void* data, std::size_t count, NcclDataType type, int peer, NcclComm comm,
                  NcclStream stream) override;
  NcclResult recv(void* data, std::size_t count, NcclDataType type, int peer, NcclComm comm,
                  NcclStream stream) override;
  NcclResult allReduceSum(const void* send, void* recv, std::size_t count, NcclDataType type,
                          NcclComm comm, NcclStream stream) override;
  NcclResult streamCreate(NcclStream* stream) override;
  NcclResult streamDestroy(NcclStream stream) override;
  NcclResult streamSynchronize(NcclStream stream, NcclComm comm,
                               std::chrono::milliseconds timeout) override;
  NcclResult eventCreate(NcclEvent* event) override;
  NcclResult eventDestroy(NcclEvent event) override;
  NcclResult eventRecord(NcclEvent event, NcclStream stream) override;
  NcclResult eventSynchronize(NcclEvent event, NcclComm comm,
                              std::chrono::milliseconds timeout) override;
  NcclResult deviceAlloc(void** ptr, std::size_t bytes) override;
  NcclResult deviceFree(void* ptr) override;
  NcclResult memcpyAsync(void* dst, const void* src, std::size_t bytes, NcclStream stream) override;
  bool movesMemory(std::string_view) const override { return false; }  // "device" memory is host memory
  bool isDeviceMemory(const void*) const override { return false; }
  const char* errorString(NcclResult result) const override;
  std::string lastError() const override;

  struct State;

 private:
  std::shared_ptr<State> state_;
  NcclFakeOptions options_;
};

}  // namespace adaprec::detail
