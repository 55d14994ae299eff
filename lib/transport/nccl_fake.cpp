// The NCCL fake's engine (nccl_fake.hpp says what it models): one mutex over every stream, unmatched
// send/receive queues per channel and pending collectives. Progress happens under the mutex in the thread
// that posts the partner of an operation; streamSynchronize only waits on the condition variable.
#include "transport/nccl_fake.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/format.hpp"
#include "codec/half_sum.hpp"
#include "transport/timeout.hpp"

namespace adaprec::detail {
namespace {

thread_local std::string tlsLastError;

NcclResult fail(NcclResult result, const std::string& message) {
  tlsLastError = message;
  return result;
}

std::size_t elementBytes(NcclDataType type) {
  switch (type) {
    case NcclDataType::kUint8:
    case NcclDataType::kFloat8e5m2: return 1;
    case NcclDataType::kFloat32: return 4;
    case NcclDataType::kBfloat16:
    case NcclDataType::kFloat16: return 2;
  }
  return 1;
}

const char* typeName(NcclDataType type) {
  switch (type) {
    case NcclDataType::kUint8: return "ncclUint8";
    case NcclDataType::kFloat32: return "ncclFloat32";
    case NcclDataType::kBfloat16: return "ncclBfloat16";
    case NcclDataType::kFloat16: return "ncclFloat16";
    case NcclDataType::kFloat8e5m2: return "ncclFloat8e5m2";
  }
  return "?";
}

// One addition of NCCL's ncclFloat8e5m2 sum (NVIDIA/nccl src/device/reduce_kernel.h, sm_90 and newer):
//   FuncSum<__nv_fp8_e5m2>: __nv_fp8_e5m2(__hadd(__half(x), __half(y)))
// both operands widened exactly to fp16, added in fp16 (RNE; |sum| >= 65520 gives +-Inf), narrowed by
// __nv_fp8_e5m2's constructor from __half, i.e. __nv_cvt_halfraw_to_fp8(h, __NV_SATFINITE, __NV_E5M2)
// (cuda_fp8.hpp; cvt.rn.satfinite.e5m2x2.f16x2 on the device): RNE, every magnitude beyond the largest
// finite value, +-Inf included, becomes +-57344 (0x7b/0xfb), NaN 0x7f. So unlike the library's fp8
// (docs/formats.md: Inf stays Inf) an Inf operand gives +-57344; Inf - Inf gives NaN. A ring step adds
// two values and rounds to e5m2 (no wider partial sum travels between ranks); the fake's rank order is
// one such chain of p-1 additions. Computed here as the library's fp8 encode (RNE; beyond the range
// Inf) of the fp32 sum, then Inf -> +-57344 (satfinite) and NaN -> 0x7f. The intermediate rounding (fp16 there, fp32 here)
// never changes the result: either the exact sum of two e5m2 values fits it, or the smaller operand is
// below 2^-7 of the larger one's binade and every rounding returns the larger. (Checked once for all
// 65536 operand pairs against cuda_fp8.hpp's host implementation of the expression above.)
std::uint8_t addFloat8e5m2(std::uint8_t a, std::uint8_t b) {
  std::uint32_t code = Fp8Math::encode(Fp8Math::decode(a) + Fp8Math::decode(b));
  const std::uint32_t magnitude = code & ~Fp8Math::kSignBit;
  if (magnitude == Fp8Math::kInf) code = (code & Fp8Math::kSignBit) | Fp8Math::kMaxFinite;
  if (magnitude > Fp8Math::kInf) code = 0x7f;
  return static_cast<std::uint8_t>(code);
}

struct FakeComm {
  std::uint64_t context = 0;
  int rank = 0;
  std::vector<int> members;  // rank in the job (the root communicator) of each member
  std::uint64_t splits = 0;
  std::uint64_t allreduces = 0;
  int size() const { return static_cast<int>(members.size()); }
};

struct Stream;
struct Group;

// One record of an event: a marker in a stream.
struct FakeEvent {
  bool recorded = false;
  bool done = false;
  Stream* stream = nullptr;
};
// The handle: its latest record (re-recording replaces it, as cudaEventRecord does).
struct EventHandle {
  std::shared_ptr<FakeEvent> current = std::make_shared<FakeEvent>();
};

struct Op {
  enum class Kind { kSend, kRecv, kAllReduce, kCopy, kMarker };
  Kind kind = Kind::kCopy;
  std::uint64_t context = 0;
  int rank = 0;       // in the communicator
  int peer = 0;       // in the communicator (send/recv)
  int worldPeer = 0;  // the peer's rank in the job
  int commSize = 0;
  const void* src = nullptr;
  void* dst = nullptr;
  std::size_t count = 0;
  NcclDataType type = NcclDataType::kUint8;
  std::uint64_t collective = 0;  // allreduce: its index on the communicator
  std::shared_ptr<FakeEvent> event;  // marker
  bool posted = false;
  bool done = false;
  bool cancelled = false;
  NcclResult result = NcclResult::kSuccess;
  std::string error;
  Group* group = nullptr;

  std::size_t bytes() const { return count * elementBytes(type); }
};

struct Group {
  std::vector<std::unique_ptr<Op>> ops;
  std::size_t remaining = 0;
  Stream* stream = nullptr;
};

struct Stream {
  std::deque<std::unique_ptr<Group>> groups;  // front: the running group; the rest wait for it
  NcclResult error = NcclResult::kSuccess;    // sticky, like NCCL's asynchronous error
  std::string errorText;
};

NcclComm toHandle(FakeComm* comm) { return reinterpret_cast<NcclComm>(comm); }
FakeComm* fromHandle(NcclComm comm) { return reinterpret_cast<FakeComm*>(comm); }
NcclStream toHandle(Stream* stream) { return reinterpret_cast<NcclStream>(stream); }
Stream* fromHandle(NcclStream stream) { return reinterpret_cast<Stream*>(stream); }

// The calls of the thread's open group (NCCL keeps them thread-local too).
struct OpenGroup {
  const void* owner = nullptr;
  int depth = 0;
  std::vector<std::pair<Stream*, std::unique_ptr<Op>>> ops;
};
thread_local OpenGroup tlsGroup;

std::string rankText(int rank, int worldRank) {
  std::string text = "rank " + std::to_string(rank);
  if (worldRank != rank) text += " (rank " + std::to_string(worldRank) + " of the job)";
  return text;
}

}  // namespace

struct NcclFake::State {
  using Channel = std::tuple<std::uint64_t, int, int>;  // context, sender, receiver
  struct Collective {
    std::vector<Op*> ops;
    int arrived = 0;
  };
  struct Meeting {
    int nranks = 0;
    std::vector<std::optional<std::pair<int, int>>> entries;  // (color, key) or (rank, rank)
    int arrived = 0;
    int departed = 0;
    std::map<int, std::uint64_t> contexts;  // per color
  };

  std::mutex mutex;
  std::condition_variable changed;
  bool aborted = false;
  std::uint64_t nextContext = 1;
  std::uint64_t nextUniqueId = 1;
  std::map<Stream*, std::unique_ptr<Stream>> streams;
  std::map<FakeComm*, std::unique_ptr<FakeComm>> comms;
  std::map<EventHandle*, std::unique_ptr<EventHandle>> events;
  std::map<Channel, std::deque<Op*>> sends;
  std::map<Channel, std::deque<Op*>> recvs;
  std::map<std::pair<std::uint64_t, std::uint64_t>, Collective> collectives;
  std::map<std::uint64_t, Meeting> inits;
  std::map<std::pair<std::uint64_t, std::uint64_t>, Meeting> splits;

  // --- the engine; every function below runs with `mutex` held ---

  void finish(Op* op) {
    op->done = true;
    Stream* stream = op->group->stream;
    if (op->result != NcclResult::kSuccess && stream->error == NcclResult::kSuccess) {
      stream->error = op->result;
      stream->errorText = op->error;
    }
    if (--op->group->remaining == 0) advance(stream);
  }

  // The front group completed: drop it and start the next.
  void advance(Stream* stream) {
    stream->groups.pop_front();
    if (!stream->groups.empty()) activate(stream->groups.front().get());
    changed.notify_all();
  }

  void activate(Group* group) {
    // One extra count while posting, so the group cannot complete (and be freed) inside this loop.
    group->remaining = group->ops.size() + 1;
    for (const std::unique_ptr<Op>& op : group->ops) post(op.get());
    if (--group->remaining == 0) advance(group->stream);
  }

  void enqueue(Stream* stream, std::unique_ptr<Group> group) {
    group->stream = stream;
    for (const std::unique_ptr<Op>& op : group->ops) op->group = group.get();
    stream->groups.push_back(std::move(group));
    if (stream->groups.size() == 1) activate(stream->groups.front().get());
  }

  void post(Op* op) {
    op->posted = true;
    if (op->cancelled) {
      finish(op);
      return;
    }
    switch (op->kind) {
      case Op::Kind::kCopy:
        if (op->count != 0) std::memmove(op->dst, op->src, op->count);
        finish(op);
        return;
      case Op::Kind::kMarker:
        op->event->done = true;
        finish(op);
        return;
      case Op::Kind::kSend: {
        std::deque<Op*>& waiting = recvs[{op->context, op->rank, op->peer}];
        if (waiting.empty()) {
          sends[{op->context, op->rank, op->peer}].push_back(op);
          return;
        }
        Op* partner = waiting.front();
        waiting.pop_front();
        match(op, partner);
        return;
      }
      case Op::Kind::kRecv: {
        std::deque<Op*>& waiting = sends[{op->context, op->peer, op->rank}];
        if (waiting.empty()) {
          recvs[{op->context, op->peer, op->rank}].push_back(op);
          return;
        }
        Op* partner = waiting.front();
        waiting.pop_front();
        match(partner, op);
        return;
      }
      case Op::Kind::kAllReduce: {
        Collective& c = collectives[{op->context, op->collective}];
        if (c.ops.empty()) c.ops.assign(static_cast<std::size_t>(op->commSize), nullptr);
        c.ops[static_cast<std::size_t>(op->rank)] = op;
        if (++c.arrived == op->commSize) {
          std::vector<Op*> ops = std::move(c.ops);
          collectives.erase({op->context, op->collective});
          reduce(ops);
        }
        return;
      }
    }
  }

  void match(Op* send, Op* recv) {
    if (send->bytes() != recv->bytes()) {
      std::ostringstream os;
      os << "NCCL fake: ncclSend of " << send->bytes() << " bytes from rank " << send->rank
         << " to rank " << recv->rank << " matched an ncclRecv of " << recv->bytes()
         << " bytes; NCCL needs equal sizes (real NCCL would hang or corrupt data here)";
      for (Op* op : {send, recv}) {
        op->result = NcclResult::kMismatch;
        op->error = os.str();
      }
    } else if (send->bytes() != 0) {
      std::memcpy(recv->dst, send->src, send->bytes());
    }
    finish(send);
    finish(recv);
  }

  // Sum in rank order, one rounding per addition: the default Transport::nativeAllreduce's arithmetic.
  void reduce(const std::vector<Op*>& ops) {
    const Op& first = *ops[0];
    for (Op* op : ops) {
      if (op->count == first.count && op->type == first.type) continue;
      std::ostringstream os;
      os << "NCCL fake: ncclAllReduce #" << first.collective << ": rank " << op->rank << " passed "
         << op->count << " x " << typeName(op->type) << ", rank 0 " << first.count << " x "
         << typeName(first.type) << " (real NCCL would hang or corrupt data here)";
      for (Op* o : ops) {
        o->result = NcclResult::kMismatch;
        o->error = os.str();
      }
      for (Op* o : ops) finish(o);
      return;
    }
    const std::size_t bytes = first.bytes();
    std::vector<std::byte> sum(bytes);
    if (bytes != 0) std::memcpy(sum.data(), first.src, bytes);
    for (std::size_t r = 1; r < ops.size(); ++r) {
      if (first.type == NcclDataType::kFloat32) {
        float* a = reinterpret_cast<float*>(sum.data());
        const float* b = static_cast<const float*>(ops[r]->src);
        for (std::size_t i = 0; i < first.count; ++i) a[i] += b[i];
      } else if (first.type == NcclDataType::kBfloat16 || first.type == NcclDataType::kFloat16) {
        std::uint16_t* a = reinterpret_cast<std::uint16_t*>(sum.data());
        addHalf(first.type == NcclDataType::kBfloat16 ? Format::kBf16 : Format::kFp16, a,
                static_cast<const std::uint16_t*>(ops[r]->src), a, first.count);
      } else if (first.type == NcclDataType::kFloat8e5m2) {
        std::uint8_t* a = reinterpret_cast<std::uint8_t*>(sum.data());
        const std::uint8_t* b = static_cast<const std::uint8_t*>(ops[r]->src);
        for (std::size_t i = 0; i < first.count; ++i) a[i] = addFloat8e5m2(a[i], b[i]);
      } else {
        for (std::size_t i = 0; i < bytes; ++i)
          sum[i] = static_cast<std::byte>(static_cast<std::uint8_t>(sum[i]) +
                                          static_cast<const std::uint8_t*>(ops[r]->src)[i]);
      }
    }
    for (Op* op : ops)
      if (bytes != 0) std::memcpy(op->dst, sum.data(), bytes);
    for (Op* op : ops) finish(op);
  }

  // Unfinished operations of `pred` are abandoned: taken out of the matching queues (so no partner
  // writes into or reads from their buffers any more) and finished with kRemoteError.
  template <class Pred>
  void cancel(Pred pred) {
    std::vector<Op*> posted;
    for (auto& [ptr, stream] : streams) {
      for (const std::unique_ptr<Group>& group : stream->groups) {
        for (const std::unique_ptr<Op>& op : group->ops) {
          if (op->done || op->cancelled || !pred(*op)) continue;
          op->cancelled = true;
          op->result = NcclResult::kRemoteError;
          op->error = "NCCL fake: operation abandoned (communicator or stream destroyed)";
          if (op->posted) posted.push_back(op.get());
        }
      }
    }
    for (Op* op : posted) {
      for (auto* queues : {&sends, &recvs}) {
        for (auto& [channel, queue] : *queues) {
          auto it = std::find(queue.begin(), queue.end(), op);
          if (it != queue.end()) queue.erase(it);
        }
      }
      if (op->kind == Op::Kind::kAllReduce) {
        auto it = collectives.find({op->context, op->collective});
        if (it != collectives.end()) {
          it->second.ops[static_cast<std::size_t>(op->rank)] = nullptr;
          --it->second.arrived;
        }
      }
    }
    for (Op* op : posted) finish(op);
  }

  // "ncclRecv of 64 bytes from rank 3 has no matching ncclSend" for the oldest unfinished operation.
  std::string describeStuck(const Stream& stream, std::string* peer) const {
    const Group& group = *stream.groups.front();
    std::size_t unfinished = 0;
    const Op* oldest = nullptr;
    for (const std::unique_ptr<Group>& g : stream.groups)
      for (const std::unique_ptr<Op>& op : g->ops)
        if (!op->done) {
          ++unfinished;
          if (oldest == nullptr && g.get() == &group) oldest = op.get();
        }
    std::ostringstream os;
    if (oldest == nullptr) return "the stream's running group";
    switch (oldest->kind) {
      case Op::Kind::kSend:
        *peer = rankText(oldest->peer, oldest->worldPeer);
        os << "ncclSend of " << oldest->bytes() << " bytes to " << *peer
           << " has no matching ncclRecv";
        break;
      case Op::Kind::kRecv:
        *peer = rankText(oldest->peer, oldest->worldPeer);
        os << "ncclRecv of " << oldest->bytes() << " bytes from " << *peer
           << " has no matching ncclSend";
        break;
      case Op::Kind::kAllReduce: {
        os << "ncclAllReduce #" << oldest->collective << " is missing ranks";
        auto it = collectives.find({oldest->context, oldest->collective});
        std::string missing;
        for (int r = 0; r < oldest->commSize; ++r)
          if (it == collectives.end() || it->second.ops[static_cast<std::size_t>(r)] == nullptr)
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        os << " " << missing;
        *peer = "rank " + missing;
        break;
      }
      case Op::Kind::kCopy: os << "a memcpyAsync"; break;
      case Op::Kind::kMarker: os << "an event"; break;
    }
    if (unfinished > 1) os << " (" << unfinished - 1 << " more operations unfinished on the stream)";
    return os.str();
  }

  // Shared by commInitRank and commSplit: waits until every member of the meeting arrived.
  NcclResult awaitMeeting(std::unique_lock<std::mutex>& lock, Meeting& meeting,
                          std::chrono::milliseconds timeout, const char* what) {
    auto everyone = [&] { return aborted || meeting.arrived == meeting.nranks; };
    if (timeout.count() == 0) {
      changed.wait(lock, everyone);
    } else if (!changed.wait_for(lock, timeout, everyone)) {
      std::string missing;
      for (std::size_t r = 0; r < meeting.entries.size(); ++r)
        if (!meeting.entries[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return fail(NcclResult::kTimedOut,
                  std::string("NCCL fake: timed out after ") + secondsText(timeout) + " in " + what +
                      ": " + std::to_string(meeting.arrived) + " of " +
                      std::to_string(meeting.nranks) + " ranks arrived; missing rank " + missing);
    }
    if (aborted) return fail(NcclResult::kRemoteError, "NCCL fake aborted (another rank failed)");
    return NcclResult::kSuccess;
  }
};

NcclFake::NcclFake(NcclFakeOptions options)
    : state_(std::make_shared<State>()), options_(options) {}

NcclFake::~NcclFake() = default;

void NcclFake::abort() {
  {
    std::lock_guard lock(state_->mutex);
    state_->aborted = true;
  }
  state_->changed.notify_all();
}

NcclResult NcclFake::getUniqueId(NcclUniqueId* id) {
  if (id == nullptr) return fail(NcclResult::kInvalidArgument, "ncclGetUniqueId: null id");
  std::lock_guard lock(state_->mutex);
  *id = NcclUniqueId{};
  const std::uint64_t number = state_->nextUniqueId++;
  std::memcpy(id->bytes, &number, sizeof number);
  return NcclResult::kSuccess;
}

NcclResult NcclFake::commInitRank(NcclComm* comm, int nranks, const NcclUniqueId& id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks)
    return fail(NcclResult::kInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) +
                                                  " of " + std::to_string(nranks) + " invalid");
  std::uint64_t number = 0;
  std::memcpy(&number, id.bytes, sizeof number);
  std::unique_lock lock(state_->mutex);
  State::Meeting& meeting = state_->inits[number];
  if (meeting.nranks == 0) {
    meeting.nranks = nranks;
    meeting.entries.resize(static_cast<std::size_t>(nranks));
    meeting.contexts[0] = state_->nextContext++;
  }
  if (meeting.nranks != nranks || meeting.entries[static_cast<std::size_t>(rank)])
    return fail(NcclResult::kInvalidUsage, "ncclCommInitRank: ranks disagree on the size, or rank " +
                                               std::to_string(rank) + " joined twice");
  meeting.entries[static_cast<std::size_t>(rank)] = std::pair{rank, rank};
  ++meeting.arrived;
  state_->changed.notify_all();
  const NcclResult waited =
      state_->awaitMeeting(lock, meeting, options_.rendezvousTimeout, "ncclCommInitRank");
  if (waited != NcclResult::kSuccess) return waited;
  auto created = std::make_unique<FakeComm>();
  created->context = meeting.contexts[0];
  created->rank = rank;
  for (int r = 0; r < nranks; ++r) created->members.push_back(r);
  *comm = toHandle(created.get());
  state_->comms[created.get()] = std::move(created);
  if (++meeting.departed == meeting.nranks) state_->inits.erase(number);
  return NcclResult::kSuccess;
}

NcclResult NcclFake::commSplit(NcclComm handle, int color, int key, NcclComm* newComm) {
  FakeComm* comm = fromHandle(handle);
  if (comm == nullptr || newComm == nullptr)
    return fail(NcclResult::kInvalidArgument, "ncclCommSplit: null communicator");
  const std::pair<std::uint64_t, std::uint64_t> id{comm->context, comm->splits++};
  std::unique_lock lock(state_->mutex);
  State::Meeting& meeting = state_->splits[id];
  if (meeting.nranks == 0) {
    meeting.nranks = comm->size();
    meeting.entries.resize(static_cast<std::size_t>(comm->size()));
  }
  meeting.entries[static_cast<std::size_t>(comm->rank)] = std::pair{color, key};
  ++meeting.arrived;
  state_->changed.notify_all();
  const NcclResult waited =
      state_->awaitMeeting(lock, meeting, options_.rendezvousTimeout, "ncclCommSplit");
  if (waited != NcclResult::kSuccess) return waited;
  std::vector<std::tuple<int, int, int>> chosen;  // key, parent rank, job rank
  for (int i = 0; i < comm->size(); ++i) {
    const auto& entry = *meeting.entries[static_cast<std::size_t>(i)];
    if (entry.first == color) chosen.emplace_back(entry.second, i, comm->members[static_cast<std::size_t>(i)]);
  }
  auto [it, inserted] = meeting.contexts.try_emplace(color, 0);
  if (inserted) it->second = state_->nextContext++;
  const std::uint64_t context = it->second;
  if (++meeting.departed == meeting.nranks) state_->splits.erase(id);
  if (color < 0) {  // NCCL_SPLIT_NOCOLOR: no communicator for this rank
    *newComm = nullptr;
    return NcclResult::kSuccess;
  }
  std::sort(chosen.begin(), chosen.end());
  auto created = std::make_unique<FakeComm>();
  created->context = context;
  for (const auto& [k, parentRank, jobRank] : chosen) {
    if (parentRank == comm->rank) created->rank = static_cast<int>(created->members.size());
    created->members.push_back(jobRank);
  }
  *newComm = toHandle(created.get());
  state_->comms[created.get()] = std::move(created);
  return NcclResult::kSuccess;
}

NcclResult NcclFake::commDestroy(NcclComm handle) { return commAbort(handle); }

NcclResult NcclFake::commAbort(NcclComm handle) {
  FakeComm* comm = fromHandle(handle);
  if (comm == nullptr) return NcclResult::kSuccess;
  std::lock_guard lock(state_->mutex);
  const std::uint64_t context = comm->context;
  const int rank = comm->rank;
  state_->cancel([&](const Op& op) {
    return op.kind != Op::Kind::kCopy && op.kind != Op::Kind::kMarker && op.context == context &&
           op.rank == rank;
  });
  state_->comms.erase(comm);
  state_->changed.notify_all();
  return NcclResult::kSuccess;
}

NcclResult NcclFake::commCount(NcclComm comm, int* count) {
  if (comm == nullptr || count == nullptr) return fail(NcclResult::kInvalidArgument, "ncclCommCount: null");
  *count = fromHandle(comm)->size();
  return NcclResult::kSuccess;
}

NcclResult NcclFake::commUserRank(NcclComm comm, int* rank) {
  if (comm == nullptr || rank == nullptr)
    return fail(NcclResult::kInvalidArgument, "ncclCommUserRank: null");
  *rank = fromHandle(comm)->rank;
  return NcclResult::kSuccess;
}

NcclResult NcclFake::groupStart() {
  if (tlsGroup.depth > 0 && tlsGroup.owner != this)
    return fail(NcclResult::kInvalidUsage, "ncclGroupStart: a group of another NCCL fake is open");
  tlsGroup.owner = this;
  ++tlsGroup.depth;
  return NcclResult::kSuccess;
}

NcclResult NcclFake::groupEnd() {
  if (tlsGroup.depth == 0 || tlsGroup.owner != this)
    return fail(NcclResult::kInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--tlsGroup.depth > 0) return NcclResult::kSuccess;  // nested groups end with the outermost
  std::vector<std::pair<Stream*, std::unique_ptr<Op>>> ops = std::move(tlsGroup.ops);
  tlsGroup.ops.clear();
  // One group per stream, operations in call order.
  std::vector<std::pair<Stream*, std::unique_ptr<Group>>> groups;
  for (auto& entry : ops) {
    Stream* const stream = entry.first;  // a plain variable: clang 14 cannot capture a structured binding
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == stream; });
    if (it == groups.end()) {
      groups.emplace_back(stream, std::make_unique<Group>());
      it = groups.end() - 1;
    }
    it->second->ops.push_back(std::move(entry.second));
  }
  std::lock_guard lock(state_->mutex);
  if (state_->aborted) return fail(NcclResult::kRemoteError, "NCCL fake aborted (another rank failed)");
  for (auto& [stream, group] : groups) {
    if (state_->streams.count(stream) == 0)
      return fail(NcclResult::kInvalidArgument, "ncclGroupEnd: an operation names an unknown stream");
  }
  for (auto& [stream, group] : groups) state_->enqueue(stream, std::move(group));
  state_->changed.notify_all();
  return NcclResult::kSuccess;
}

namespace {

// Adds one point-to-point or collective call to the thread's group (a group of one outside a group).
template <class Fake>
NcclResult addCall(Fake& fake, Stream* stream, std::unique_ptr<Op> op) {
  const bool implicit = tlsGroup.depth == 0;
  if (implicit) {
    const NcclResult started = fake.groupStart();
    if (started != NcclResult::kSuccess) return started;
  }
  tlsGroup.ops.emplace_back(stream, std::move(op));
  return implicit ? fake.groupEnd() : NcclResult::kSuccess;
}

std::unique_ptr<Op> pointToPoint(Op::Kind kind, FakeComm& comm, int peer, std::size_t count,
                                 NcclDataType type) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->context = comm.context;
  op->rank = comm.rank;
  op->peer = peer;
  op->worldPeer = comm.members[static_cast<std::size_t>(peer)];
  op->commSize = comm.size();
  op->count = count;
  op->type = type;
  return op;
}

}  // namespace

NcclResult NcclFake::send(const void* data, std::size_t count, NcclDataType type, int peer,
                          NcclComm handle, NcclStream stream) {
  FakeComm* comm = fromHandle(handle);
  if (comm == nullptr || stream == nullptr) return fail(NcclResult::kInvalidArgument, "ncclSend: null comm or stream");
  if (peer < 0 || peer >= comm->size())
    return fail(NcclResult::kInvalidArgument, "ncclSend: peer " + std::to_string(peer) + " out of range");
  if (count != 0 && data == nullptr) return fail(NcclResult::kInvalidArgument, "ncclSend: null buffer");
  auto op = pointToPoint(Op::Kind::kSend, *comm, peer, count, type);
  op->src = data;
  return addCall(*this, fromHandle(stream), std::move(op));
}

NcclResult NcclFake::recv(void* data, std::size_t count, NcclDataType type, int peer, NcclComm handle,
                          NcclStream stream) {
  FakeComm* comm = fromHandle(handle);
  if (comm == nullptr || stream == nullptr) return fail(NcclResult::kInvalidArgument, "ncclRecv: null comm or stream");
  if (peer < 0 || peer >= comm->size())
    return fail(NcclResult::kInvalidArgument, "ncclRecv: peer " + std::to_string(peer) + " out of range");
  if (count != 0 && data == nullptr) return fail(NcclResult::kInvalidArgument, "ncclRecv: null buffer");
  auto op = pointToPoint(Op::Kind::kRecv, *comm, peer, count, type);
  op->dst = data;
  return addCall(*this, fromHandle(stream), std::move(op));
}

NcclResult NcclFake::allReduceSum(const void* send, void* recv, std::size_t count, NcclDataType type,
                                  NcclComm handle, NcclStream stream) {
  FakeComm* comm = fromHandle(handle);
  if (comm == nullptr || stream == nullptr)
    return fail(NcclResult::kInvalidArgument, "ncclAllReduce: null comm or stream");
  if (count != 0 && (send == nullptr || recv == nullptr))
    return fail(NcclResult::kInvalidArgument, "ncclAllReduce: null buffer");
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kAllReduce;
  op->context = comm->context;
  op->rank = comm->rank;
  op->commSize = comm->size();
  op->src = send;
  op->dst = recv;
  op->count = count;
  op->type = type;
  op->collective = comm->allreduces++;
  return addCall(*this, fromHandle(stream), std::move(op));
}

NcclResult NcclFake::streamCreate(NcclStream* stream) {
  if (stream == nullptr) return fail(NcclResult::kInvalidArgument, "streamCreate: null");
  auto created = std::make_unique<Stream>();
  *stream = toHandle(created.get());
  std::lock_guard lock(state_->mutex);
  state_->streams[created.get()] = std::move(created);
  return NcclResult::kSuccess;
}

NcclResult NcclFake::streamDestroy(NcclStream handle) {
  Stream* stream = fromHandle(handle);
  std::lock_guard lock(state_->mutex);
  auto it = state_->streams.find(stream);
  if (it == state_->streams.end()) return fail(NcclResult::kInvalidArgument, "streamDestroy: unknown stream");
  state_->cancel([&](const Op& op) { return op.group->stream == stream; });
  // Cancelled operations that were never posted finish as their groups come up; drop what is left.
  for (const std::unique_ptr<Group>& group : stream->groups)
    for (const std::unique_ptr<Op>& op : group->ops)
      if (!op->done) {
        for (auto* queues : {&state_->sends, &state_->recvs})
          for (auto& [channel, queue] : *queues) std::erase(queue, op.get());
      }
  state_->streams.erase(it);
  state_->changed.notify_all();
  return NcclResult::kSuccess;
}

NcclResult NcclFake::streamSynchronize(NcclStream handle, NcclComm, std::chrono::milliseconds timeout) {
  Stream* stream = fromHandle(handle);
  std::unique_lock lock(state_->mutex);
  if (state_->streams.count(stream) == 0)
    return fail(NcclResult::kInvalidArgument, "streamSynchronize: unknown stream");
  auto idle = [&] { return state_->aborted || stream->groups.empty(); };
  if (timeout.count() == 0) {
    state_->changed.wait(lock, idle);
  } else if (!state_->changed.wait_for(lock, timeout, idle)) {
    std::string peer = "the peer";
    const std::string stuck = state_->describeStuck(*stream, &peer);
    return fail(NcclResult::kTimedOut, "timed out after " + secondsText(timeout) +
                                           " on the NCCL stream: " + stuck + " — is " + peer +
                                           " alive and in the same allreduce?");
  }
  if (stream->error != NcclResult::kSuccess) return fail(stream->error, stream->errorText);
  if (state_->aborted) return fail(NcclResult::kRemoteError, "NCCL fake aborted (another rank failed)");
  return NcclResult::kSuccess;
}

NcclResult NcclFake::eventCreate(NcclEvent* event) {
  if (event == nullptr) return fail(NcclResult::kInvalidArgument, "eventCreate: null");
  auto created = std::make_unique<EventHandle>();
  *event = reinterpret_cast<NcclEvent>(created.get());
  std::lock_guard lock(state_->mutex);
  state_->events[created.get()] = std::move(created);
  return NcclResult::kSuccess;
}

NcclResult NcclFake::eventDestroy(NcclEvent event) {
  std::lock_guard lock(state_->mutex);
  state_->events.erase(reinterpret_cast<EventHandle*>(event));  // a queued marker keeps its record
  return NcclResult::kSuccess;
}

NcclResult NcclFake::eventRecord(NcclEvent handle, NcclStream streamHandle) {
  Stream* stream = fromHandle(streamHandle);
  std::lock_guard lock(state_->mutex);
  auto it = state_->events.find(reinterpret_cast<EventHandle*>(handle));
  if (it == state_->events.end()) return fail(NcclResult::kInvalidArgument, "eventRecord: unknown event");
  if (state_->streams.count(stream) == 0) return fail(NcclResult::kInvalidArgument, "eventRecord: unknown stream");
  // Re-recording starts a new marker, as cudaEventRecord does.
  auto event = std::make_shared<FakeEvent>();
  event->recorded = true;
  event->stream = stream;
  it->second->current = event;
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kMarker;
  op->event = event;
  auto group = std::make_unique<Group>();
  group->ops.push_back(std::move(op));
  state_->enqueue(stream, std::move(group));
  state_->changed.notify_all();
  return NcclResult::kSuccess;
}

NcclResult NcclFake::eventSynchronize(NcclEvent handle, NcclComm, std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mutex);
  auto it = state_->events.find(reinterpret_cast<EventHandle*>(handle));
  if (it == state_->events.end()) return fail(NcclResult::kInvalidArgument, "eventSynchronize: unknown event");
  const std::shared_ptr<FakeEvent> event = it->second->current;
  if (!event->recorded) return NcclResult::kSuccess;  // cudaEventSynchronize of an unrecorded event
  Stream* stream = event->stream;
  auto reached = [&] {
    return state_->aborted || event->done || state_->streams.count(stream) == 0 ||
           stream->error != NcclResult::kSuccess;
  };
  if (timeout.count() == 0) {
    state_->changed.wait(lock, reached);
  } else if (!state_->changed.wait_for(lock, timeout, reached)) {
    std::string peer = "the peer";
    const std::string stuck = state_->describeStuck(*stream, &peer);
    return fail(NcclResult::kTimedOut, "timed out after " + secondsText(timeout) +
                                           " on the NCCL stream: " + stuck + " — is " + peer +
                                           " alive and in the same allreduce?");
  }
  if (state_->streams.count(stream) != 0 && stream->error != NcclResult::kSuccess)
    return fail(stream->error, stream->errorText);
  if (state_->aborted && !event->done)
    return fail(NcclResult::kRemoteError, "NCCL fake aborted (another rank failed)");
  return NcclResult::kSuccess;
}

NcclResult NcclFake::deviceAlloc(void** ptr, std::size_t bytes) {
  if (ptr == nullptr) return fail(NcclResult::kInvalidArgument, "deviceAlloc: null");
  *ptr = ::operator new(bytes == 0 ? 1 : bytes);
  return NcclResult::kSuccess;
}

NcclResult NcclFake::deviceFree(void* ptr) {
  ::operator delete(ptr);
  return NcclResult::kSuccess;
}

NcclResult NcclFake::memcpyAsync(void* dst, const void* src, std::size_t bytes, NcclStream handle) {
  Stream* stream = fromHandle(handle);
  if (bytes != 0 && (dst == nullptr || src == nullptr))
    return fail(NcclResult::kInvalidArgument, "memcpyAsync: null buffer");
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kCopy;
  op->src = src;
  op->dst = dst;
  op->count = bytes;
  auto group = std::make_unique<Group>();
  group->ops.push_back(std::move(op));
  // Stream-ordered, but not part of an NCCL group (cudaMemcpyAsync is enqueued at once).
  std::lock_guard lock(state_->mutex);
  if (state_->streams.count(stream) == 0)
    return fail(NcclResult::kInvalidArgument, "memcpyAsync: unknown stream");
  state_->enqueue(stream, std::move(group));
  state_->changed.notify_all();
  return NcclResult::kSuccess;
}

const char* NcclFake::errorString(NcclResult result) const { return ncclResultName(result); }

std::string NcclFake::lastError() const { return tlsLastError; }

const char* ncclResultName(NcclResult result) {
  switch (result) {
    case NcclResult::kSuccess: return "ncclSuccess";
    case NcclResult::kUnhandledCudaError: return "ncclUnhandledCudaError";
    case NcclResult::kSystemError: return "ncclSystemError";
    case NcclResult::kInternalError: return "ncclInternalError";
    case NcclResult::kInvalidArgument: return "ncclInvalidArgument";
    case NcclResult::kInvalidUsage: return "ncclInvalidUsage";
    case NcclResult::kRemoteError: return "ncclRemoteError";
    case NcclResult::kInProgress: return "ncclInProgress";
    case NcclResult::kMismatch: return "size mismatch (NCCL fake)";
    case NcclResult::kTimedOut: return "timed out";
  }
  return "unknown NCCL result";
}

}  // namespace adaprec::detail
