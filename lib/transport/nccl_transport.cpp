#include "transport/nccl_transport.hpp"

#include <algorithm>
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
  std::vector<std::byte> owned;  // a send whose request was dropped before launch keeps its bytes here
  void* scratch = nullptr;       // device copy (stageThroughDevice)
  State state = State::kPending;
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
}

NcclTransport::~NcclTransport() {
  if (comm_ == nullptr) return;
  // Something still in flight (error unwinding): abort, so no operation touches its buffers later.
  if (!inflight_.empty() || !pending_.empty()) {
    abandon();
  } else if (options_.ownsComm) {
    api_->commDestroy(comm_);
  }
  for (void* p : scratch_) api_->deviceFree(p);
}

void NcclTransport::abandon() {
  if (comm_ == nullptr) return;
  broken_ = true;
  api_->commAbort(comm_);
  comm_ = nullptr;
  // The staging copies behind the aborted group still write into buffers that are valid now.
  api_->streamSynchronize(*stream_, nullptr, std::chrono::milliseconds(1000));
  for (const std::shared_ptr<Op>& op : inflight_) op->state = Op::State::kDone;
  inflight_.clear();
  for (const std::shared_ptr<Op>& op : pending_) op->state = Op::State::kDone;
  pending_.clear();
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
  if (bytes == 0) {
    op->state = Op::State::kDone;
  } else {
    pending_.push_back(op);
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
  if (capacityBytes == 0) {
    op->state = Op::State::kDone;
  } else {
    pending_.push_back(op);
  }
  return std::make_unique<NcclRequest>(this, std::move(op));
}

std::size_t NcclTransport::waitFor(Op& op) {
  if (op.state == Op::State::kDone) return op.bytes;
  requireUsable();
  if (op.state == Op::State::kPending) launch(&op);
  synchronize();
  return op.bytes;
}

void NcclTransport::forget(Op& op) {
  if (op.state == Op::State::kPending) {
    if (op.isSend) {
      // "Destroying a request completes a pending send": its bytes must go even though the caller's
      // buffer may now be freed.
      op.owned.assign(static_cast<const std::byte*>(op.src), static_cast<const std::byte*>(op.src) + op.bytes);
      op.src = op.owned.data();
    } else {
      pending_.erase(std::find_if(pending_.begin(), pending_.end(),
                                  [&](const std::shared_ptr<Op>& p) { return p.get() == &op; }));
      op.state = Op::State::kDone;
    }
    return;
  }
  // Launched but never synchronized: NCCL may still read or write the caller's buffer.
  abandon();
}

void NcclTransport::launch(const Op* upTo) {
  std::vector<std::shared_ptr<Op>> batch;
  std::deque<std::shared_ptr<Op>> keep;
  bool reached = false;
  for (std::shared_ptr<Op>& op : pending_) {
    const bool take = op->isSend || upTo == nullptr || !reached;
    if (op.get() == upTo) reached = true;
    if (take) {
      batch.push_back(std::move(op));
    } else {
      keep.push_back(std::move(op));
    }
  }
  pending_ = std::move(keep);
  if (batch.empty()) return;
  for (std::shared_ptr<Op>& op : batch) {
    op->state = Op::State::kLaunched;
    inflight_.push_back(op);
  }
  if (options_.stageThroughDevice) {
    for (const std::shared_ptr<Op>& op : batch) {
      check(api_->deviceAlloc(&op->scratch, op->bytes), "cudaMalloc");
      scratch_.push_back(op->scratch);
      if (op->isSend) check(api_->memcpyAsync(op->scratch, op->src, op->bytes, *stream_), "cudaMemcpyAsync");
    }
  }
  check(api_->groupStart(), "ncclGroupStart");
  for (const std::shared_ptr<Op>& op : batch) {
    void* device = options_.stageThroughDevice ? op->scratch : op->dst;
    if (op->isSend) {
      const void* from = options_.stageThroughDevice ? op->scratch : op->src;
      check(api_->send(from, op->bytes, NcclDataType::kUint8, op->peer, comm_, *stream_), "ncclSend");
    } else {
      check(api_->recv(device, op->bytes, NcclDataType::kUint8, op->peer, comm_, *stream_), "ncclRecv");
    }
  }
  check(api_->groupEnd(), "ncclGroupEnd");
  if (options_.stageThroughDevice) {
    for (const std::shared_ptr<Op>& op : batch)
      if (!op->isSend) check(api_->memcpyAsync(op->dst, op->scratch, op->bytes, *stream_), "cudaMemcpyAsync");
  }
}

void NcclTransport::synchronize() {
  check(api_->streamSynchronize(*stream_, comm_, timeout()), "cudaStreamSynchronize");
  for (const std::shared_ptr<Op>& op : inflight_) op->state = Op::State::kDone;
  inflight_.clear();
  for (void* p : scratch_) api_->deviceFree(p);
  scratch_.clear();
}

void NcclTransport::sumOnStream(const void* send, void* recv, std::size_t count, NativeType type) {
  requireUsable();
  launch(nullptr);  // nothing should be pending here; if anything is, it goes first, in order
  const std::size_t bytes = count * nativeBytes(type);
  if (!options_.stageThroughDevice) {
    check(api_->allReduceSum(send, recv, count, ncclType(type), comm_, *stream_), "ncclAllReduce");
  } else {
    void* scratch = nullptr;
    check(api_->deviceAlloc(&scratch, bytes), "cudaMalloc");
    scratch_.push_back(scratch);
    check(api_->memcpyAsync(scratch, send, bytes, *stream_), "cudaMemcpyAsync");
    check(api_->allReduceSum(scratch, scratch, count, ncclType(type), comm_, *stream_), "ncclAllReduce");
    check(api_->memcpyAsync(recv, scratch, bytes, *stream_), "cudaMemcpyAsync");
  }
  synchronize();
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
    if (send != recv && count != 0) std::memmove(recv, send, count * nativeBytes(type));
    return;
  }
  runWithCompletionVote(*this, [&] { sumOnStream(send, recv, count, type); });
}

std::unique_ptr<Transport> NcclTransport::split(int color, int key) {
  requireUsable();
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
  ADAPREC_CHECK(pending_.empty() && inflight_.empty(), ErrorCode::kInternal,
                "NCCL transport: stream changed with operations in flight");
  *stream_ = stream;
}

}  // namespace adaprec::detail
