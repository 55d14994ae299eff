#include "transport/nccl_transport.hpp"

#include <algorithm>
#include <deque>
#include <cstring>
#include <string>
#include <utility>

#include "adaprec/error.hpp"
#include "transport/internal_tags.hpp"
#include "transport/timeout.hpp"

namespace adaprec::detail {

struct NcclTransport::Op {
  enum class State { kPending, kLaunched, kDone };
  bool isSend = false;
  int peer = 0;
  const void* src = nullptr;
  void* dst = nullptr;
  std::size_t bytes = 0;
  void* scratch = nullptr;       // device copy (stageThroughDevice)
  State state = State::kPending;
  Channel* channel = nullptr;
  NcclEvent event = nullptr;  // recorded on the channel's stream after the operation
};

struct NcclTransport::Channel {
  int peer = 0;
  bool sends = false;  // this rank's sends to peer, else peer's sends to this rank
  NcclComm comm = nullptr;
  NcclStream stream = nullptr;
  int peerInComm = 0;  // the peer's rank in the two-rank communicator
  std::deque<std::shared_ptr<Op>> inflight;  // launched, not yet waited for, in launch order
};

class NcclRequest final : public Request {
 public:
  NcclRequest(NcclTransport* transport, std::shared_ptr<NcclTransport::Op> op)
      : transport_(transport), op_(std::move(op)) {}
  ~NcclRequest() override {
    if (op_->state != NcclTransport::Op::State::kDone) transport_->forget(*op_);
  }
  std::size_t wait() override { return transport_->waitFor(*op_); }
  bool done() const override { return op_->state == NcclTransport::Op::State::kDone; }

 private:
  NcclTransport* transport_;  // requests never outlive their transport
  std::shared_ptr<NcclTransport::Op> op_;
};

namespace {

NcclDataType ncclType(NativeType type) {
  switch (type) {
    case NativeType::kFp32: return NcclDataType::kFloat32;
    case NativeType::kBf16: return NcclDataType::kBfloat16;
    case NativeType::kFp16: return NcclDataType::kFloat16;
  }
  return NcclDataType::kFloat32;
}

std::size_t nativeBytes(NativeType type) { return type == NativeType::kFp32 ? 4 : 2; }

}  // namespace

NcclTransport::NcclTransport(std::shared_ptr<NcclApi> api, NcclComm comm, NcclStream stream,
                             NcclTransportOptions options)
    : NcclTransport(std::move(api), comm, std::make_shared<NcclStream>(stream), options) {}

NcclTransport::NcclTransport(std::shared_ptr<NcclApi> api, NcclComm comm,
                             std::shared_ptr<NcclStream> stream, NcclTransportOptions options)
    : api_(std::move(api)), comm_(comm), stream_(std::move(stream)), options_(options) {
  ADAPREC_CHECK_ARG(api_ != nullptr && comm_ != nullptr && stream_ != nullptr && *stream_ != nullptr,
                    "NCCL transport needs an API, a communicator and a stream");
  check(api_->commUserRank(comm_, &rank_), "ncclCommUserRank");
  check(api_->commCount(comm_, &size_), "ncclCommCount");
  if (options_.jobRank < 0) options_.jobRank = rank_;
  try {
    openChannels();
  } catch (...) {
    abandon();
    throw;
  }
}

// Round-robin pairing (the circle method): in round k of p' - 1 (p' = p rounded up to even), rank a is
// paired with one b, every pair once over the rounds; a rank paired with p' - 1 >= p sits the round
// out. Each round is two ncclCommSplit calls: the first gives the channel low -> high of every pair,
// the second high -> low.
void NcclTransport::openChannels() {
  sendTo_.resize(static_cast<std::size_t>(size_));
  recvFrom_.resize(static_cast<std::size_t>(size_));
  if (size_ == 1) return;
  const int slots = size_ % 2 == 0 ? size_ : size_ + 1;
  for (int round = 0; round < slots - 1; ++round) {
    int partner = -1;
    for (int i = 0; i < slots / 2; ++i) {
      const int a = (round + i) % (slots - 1);
      const int b = i == 0 ? slots - 1 : (round + slots - 1 - i) % (slots - 1);
      if (a == rank_) partner = b;
      if (b == rank_) partner = a;
    }
    const bool sitsOut = partner >= size_;
    const int color = sitsOut ? -1 : std::min(rank_, partner);  // -1: NCCL_SPLIT_NOCOLOR
    for (int direction = 0; direction < 2; ++direction) {
      NcclComm pair = nullptr;
      check(api_->commSplit(comm_, color, rank_, &pair), "ncclCommSplit (channel)");
      if (sitsOut) continue;
      const bool lowSends = direction == 0;
      const bool iSend = (rank_ < partner) == lowSends;
      auto channel = std::make_unique<Channel>();
      channel->peer = partner;
      channel->sends = iSend;
      channel->comm = pair;
      channel->peerInComm = rank_ < partner ? 1 : 0;
      auto& slot = (iSend ? sendTo_ : recvFrom_)[static_cast<std::size_t>(partner)];
      slot = std::move(channel);
      check(api_->streamCreate(&slot->stream), "cudaStreamCreate (channel)");
    }
  }
}

NcclTransport::~NcclTransport() {
  bool busy = false;
  for (auto* channels : {&sendTo_, &recvFrom_})
    for (const std::unique_ptr<Channel>& c : *channels)
      if (c && !c->inflight.empty()) busy = true;
  // Something still in flight (error unwinding): abort, so no operation touches its buffers later.
  if (busy || broken_) abandon();
  for (auto* channels : {&sendTo_, &recvFrom_}) {
    for (const std::unique_ptr<Channel>& c : *channels) {
      if (!c) continue;
      if (c->comm != nullptr) api_->commDestroy(c->comm);
      if (c->stream != nullptr) api_->streamDestroy(c->stream);
    }
  }
  if (comm_ != nullptr && options_.ownsComm) api_->commDestroy(comm_);
}

void NcclTransport::abandon() {
  broken_ = true;
  for (auto* channels : {&sendTo_, &recvFrom_}) {
    for (const std::unique_ptr<Channel>& c : *channels) {
      if (!c || c->comm == nullptr) continue;
      api_->commAbort(c->comm);
      c->comm = nullptr;
      // The staging copies behind an aborted group still write into buffers that are valid now.
      api_->streamSynchronize(c->stream, nullptr, std::chrono::milliseconds(1000));
      for (const std::shared_ptr<Op>& op : c->inflight) complete(*op);
      c->inflight.clear();
    }
  }
  if (comm_ != nullptr && options_.ownsComm) {
    api_->commAbort(comm_);
    comm_ = nullptr;
  }
}

void NcclTransport::check(NcclResult result, const char* call) {
  if (result == NcclResult::kSuccess) return;
  broken_ = true;
  const std::string message = std::string(call) + " failed: " + api_->errorString(result) + ": " +
                              api_->lastError();
  switch (result) {
    case NcclResult::kMismatch: ADAPREC_FAIL(ErrorCode::kMismatch, message);
    case NcclResult::kUnhandledCudaError: ADAPREC_FAIL(ErrorCode::kCuda, message);
    case NcclResult::kInvalidArgument: ADAPREC_FAIL(ErrorCode::kInvalidArgument, message);
    default: ADAPREC_FAIL(ErrorCode::kTransport, message);
  }
}

void NcclTransport::requireUsable() const {
  ADAPREC_CHECK(!broken_ && comm_ != nullptr, ErrorCode::kTransport,
                "NCCL transport used after an earlier error: destroy it");
}

RequestPtr NcclTransport::isend(int peer, const void* data, std::size_t bytes, int tag) {
  ADAPREC_CHECK_ARG(peer >= 0 && peer < size_ && peer != rank_,
                    "NCCL peer " << peer << " invalid for rank " << rank_ << " of " << size_);
  ADAPREC_CHECK_ARG(tag >= 0 && tag < kMaxAlgorithmTag, "tag " << tag << " out of range");
  requireUsable();
  auto op = std::make_shared<Op>();
  op->isSend = true;
  op->peer = peer;
  op->src = data;
  op->bytes = bytes;
  op->channel = sendTo_[static_cast<std::size_t>(peer)].get();
  if (bytes == 0) {
    op->state = Op::State::kDone;
  } else {
    launch(op);
  }
  return std::make_unique<NcclRequest>(this, std::move(op));
}

RequestPtr NcclTransport::irecv(int peer, void* data, std::size_t capacityBytes, int tag) {
  ADAPREC_CHECK_ARG(peer >= 0 && peer < size_ && peer != rank_,
                    "NCCL peer " << peer << " invalid for rank " << rank_ << " of " << size_);
  ADAPREC_CHECK_ARG(tag >= 0 && tag < kMaxAlgorithmTag, "tag " << tag << " out of range");
  requireUsable();
  auto op = std::make_shared<Op>();
  op->peer = peer;
  op->dst = data;
  op->bytes = capacityBytes;
  op->channel = recvFrom_[static_cast<std::size_t>(peer)].get();
  if (capacityBytes == 0) {
    op->state = Op::State::kDone;
  } else {
    launch(op);
  }
  return std::make_unique<NcclRequest>(this, std::move(op));
}

std::size_t NcclTransport::waitFor(Op& op) {
  if (op.state == Op::State::kDone) return op.bytes;
  requireUsable();
  Channel& channel = *op.channel;
  const NcclResult result = api_->eventSynchronize(op.event, channel.comm, timeout());
  if (result == NcclResult::kTimedOut) {
    broken_ = true;
    const std::string who = "rank " + std::to_string(channel.peer);
    ADAPREC_FAIL(ErrorCode::kTransport,
                 "timed out after " << secondsText(timeout())
                                    << (channel.sends ? " waiting for " + who + " to take a message"
                                                      : " waiting for a message from " + who)
                                    << " over NCCL — is " << who << " alive and in the same allreduce? ("
                                    << api_->lastError() << ")");
  }
  check(result, channel.sends ? "cudaEventSynchronize (ncclSend)" : "cudaEventSynchronize (ncclRecv)");
  // The channel is in order: every operation launched on it before this one has completed too.
  while (!channel.inflight.empty()) {
    std::shared_ptr<Op> done = std::move(channel.inflight.front());
    channel.inflight.pop_front();
    complete(*done);
    if (done.get() == &op) break;
  }
  return op.bytes;
}

void NcclTransport::complete(Op& op) {
  op.state = Op::State::kDone;
  if (op.event != nullptr) api_->eventDestroy(op.event);
  op.event = nullptr;
  if (op.scratch != nullptr) api_->deviceFree(op.scratch);
  op.scratch = nullptr;
}

void NcclTransport::forget(Op& op) {
  // Launched but never waited for: NCCL may still read or write the caller's buffer, which may be freed
  // once the request is gone. Only an abort makes that safe (error unwinding; the transport is done).
  (void)op;
  abandon();
}

// One operation as its own NCCL call (a group of one) on its channel's stream, then its event. No
// batching is needed: a channel carries one direction of one pair, so nothing on it must progress
// concurrently with anything else on it, and channels progress independently of each other.
void NcclTransport::launch(const std::shared_ptr<Op>& op) {
  requireUsable();
  Channel& channel = *op->channel;
  // Host memory goes through device scratch; device memory (the engine's direct messages) as it is.
  const bool staged = options_.stageThroughDevice && !api_->isDeviceMemory(channel.sends ? op->src : op->dst);
  op->state = Op::State::kLaunched;
  channel.inflight.push_back(op);
  check(api_->eventCreate(&op->event), "cudaEventCreate");
  if (staged) {
    check(api_->deviceAlloc(&op->scratch, op->bytes), "cudaMalloc");
    if (channel.sends) check(api_->memcpyAsync(op->scratch, op->src, op->bytes, channel.stream), "cudaMemcpyAsync");
  }
  check(api_->groupStart(), "ncclGroupStart");
  if (channel.sends) {
    check(api_->send(staged ? op->scratch : op->src, op->bytes, NcclDataType::kUint8, channel.peerInComm,
                     channel.comm, channel.stream),
          "ncclSend");
  } else {
    check(api_->recv(staged ? op->scratch : op->dst, op->bytes, NcclDataType::kUint8, channel.peerInComm,
                     channel.comm, channel.stream),
          "ncclRecv");
  }
  check(api_->groupEnd(), "ncclGroupEnd");
  if (staged && !channel.sends)
    check(api_->memcpyAsync(op->dst, op->scratch, op->bytes, channel.stream), "cudaMemcpyAsync");
  check(api_->eventRecord(op->event, channel.stream), "cudaEventRecord");
}

// Before a collective on the transport's own communicator: every channel idle.
void NcclTransport::synchronizeAll() {
  for (auto* channels : {&recvFrom_, &sendTo_})
    for (const std::unique_ptr<Channel>& c : *channels)
      if (c && !c->inflight.empty()) waitFor(*c->inflight.back());
}

void NcclTransport::sumOnStream(const void* send, void* recv, std::size_t count, NativeType type) {
  requireUsable();
  synchronizeAll();  // nothing should be in flight here; if anything is, it completes first
  const std::size_t bytes = count * nativeBytes(type);
  void* scratch = nullptr;
  if (!options_.stageThroughDevice || (api_->isDeviceMemory(send) && api_->isDeviceMemory(recv))) {
    check(api_->allReduceSum(send, recv, count, ncclType(type), comm_, *stream_), "ncclAllReduce");
  } else {
    check(api_->deviceAlloc(&scratch, bytes), "cudaMalloc");
    check(api_->memcpyAsync(scratch, send, bytes, *stream_), "cudaMemcpyAsync");
    check(api_->allReduceSum(scratch, scratch, count, ncclType(type), comm_, *stream_), "ncclAllReduce");
    check(api_->memcpyAsync(recv, scratch, bytes, *stream_), "cudaMemcpyAsync");
  }
  const NcclResult result = api_->streamSynchronize(*stream_, comm_, timeout());
  if (scratch != nullptr) api_->deviceFree(scratch);
  check(result, "cudaStreamSynchronize (ncclAllReduce)");
}

// ncclAllReduce, bit-identical on every rank. With a timeout set, the completion vote follows, as for
// the default implementation.
void NcclTransport::nativeAllreduce(void* recv, std::size_t count, NativeType type) {
  if (size_ == 1 || count == 0) return;
  runWithCompletionVote(*this, [&] { sumOnStream(recv, recv, count, type); });
}

void NcclTransport::nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                              NativeType type) {
  if (size_ == 1 || count == 0) {
    if (send == recv || count == 0) return;
    // The buffers may be device memory: a stream-ordered copy (cudaMemcpyDefault), not memmove.
    requireUsable();
    check(api_->memcpyAsync(recv, send, count * nativeBytes(type), *stream_), "cudaMemcpyAsync");
    check(api_->streamSynchronize(*stream_, comm_, timeout()), "cudaStreamSynchronize");
    return;
  }
  runWithCompletionVote(*this, [&] { sumOnStream(send, recv, count, type); });
}

bool NcclTransport::acceptsDeviceMemory(std::string_view memorySpace) const {
  return api_->movesMemory(memorySpace);
}

std::unique_ptr<Transport> NcclTransport::split(int color, int key) {
  requireUsable();
  synchronizeAll();
  NcclComm sub = nullptr;
  check(api_->commSplit(comm_, color, key, &sub), "ncclCommSplit");
  ADAPREC_CHECK_ARG(sub != nullptr, "split color " << color << " gave no communicator");
  NcclTransportOptions options = options_;
  options.ownsComm = true;
  std::unique_ptr<NcclTransport> transport(new NcclTransport(api_, sub, stream_, options));
  transport->setTimeout(timeout());
  return transport;
}

int NcclTransport::nodeId() const {
  const int perNode = ranksPerNodeOverride();
  return perNode > 0 ? options_.jobRank / perNode : options_.nodeId;
}

void NcclTransport::setStream(NcclStream stream) {
  ADAPREC_CHECK_ARG(stream != nullptr, "NCCL transport: null stream");
  *stream_ = stream;
}

}  // namespace adaprec::detail
