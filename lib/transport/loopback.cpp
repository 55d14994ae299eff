// Loopback transport: ranks are threads of one process; a send copies its bytes into a shared mailbox
// (so it completes at once, like an eager MPI send) and a receive takes the matching message out.
// Messages are matched by (context, sender, receiver, tag, sequence number), which gives MPI's
// per-(peer, tag) ordering. split() creates a new context through a rendezvous of the parent's ranks.
// With a timeout set, a receive's wait and the split rendezvous wait on the condition variable with a
// deadline instead of forever.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "adaprec/error.hpp"
#include "adaprec/transport.hpp"
#include "transport/eager_message.hpp"
#include "transport/internal_tags.hpp"
#include "transport/timeout.hpp"

namespace adaprec {

struct LoopbackGroup::State {
  using Channel = std::tuple<std::uint64_t, int, int, int>;  // context, from, to, tag
  using MessageKey = std::tuple<std::uint64_t, int, int, int, std::uint64_t>;
  struct Rendezvous {
    std::vector<std::optional<std::pair<int, int>>> entries;  // (color, key) per parent member
    int arrived = 0;
    int departed = 0;
  };

  int size = 0;
  int ranksPerNode = 0;
  std::mutex mutex;
  std::condition_variable changed;
  bool aborted = false;
  std::uint64_t nextContext = 1;
  std::map<MessageKey, std::vector<std::byte>> messages;
  std::map<Channel, std::uint64_t> sendSequence;
  std::map<Channel, std::uint64_t> recvSequence;
  std::map<std::pair<std::uint64_t, std::uint64_t>, Rendezvous> rendezvous;
  std::map<std::tuple<std::uint64_t, std::uint64_t, int>, std::uint64_t> splitContexts;

  void throwIfAborted() const {
    ADAPREC_CHECK(!aborted, ErrorCode::kTransport, "loopback group aborted (another rank failed)");
  }
};

namespace {

using State = LoopbackGroup::State;

class LoopbackSend final : public Request {
 public:
  explicit LoopbackSend(std::size_t bytes) : bytes_(bytes) {}
  std::size_t wait() override { return bytes_; }
  bool done() const override { return true; }

 private:
  std::size_t bytes_;
};

class LoopbackRecv final : public Request {
 public:
  LoopbackRecv(std::shared_ptr<State> state, State::MessageKey key, void* data, std::size_t capacity,
               int peer, std::chrono::milliseconds timeout)
      : state_(std::move(state)), key_(key), data_(data), capacity_(capacity), peer_(peer),
        timeout_(timeout) {}

  std::size_t wait() override {
    if (completed_) return received_;
    std::vector<std::byte> message;
    {
      std::unique_lock lock(state_->mutex);
      auto arrived = [&] { return state_->aborted || state_->messages.count(key_) != 0; };
      if (timeout_.count() == 0) {
        state_->changed.wait(lock, arrived);
      } else if (!state_->changed.wait_for(lock, timeout_, arrived)) {
        completed_ = true;
        detail::throwWaitTimeout(timeout_, false, peer_, std::get<1>(key_), std::get<3>(key_));
      }
      state_->throwIfAborted();
      auto it = state_->messages.find(key_);
      message = std::move(it->second);
      state_->messages.erase(it);
    }
    completed_ = true;
    ADAPREC_CHECK(message.size() <= capacity_, ErrorCode::kMismatch,
                  "loopback receive from rank " << std::get<1>(key_) << ": message of "
                                                << message.size() << " bytes, buffer holds "
                                                << capacity_);
    if (!message.empty()) std::memcpy(data_, message.data(), message.size());
    received_ = message.size();
    return received_;
  }

  bool done() const override {
    if (completed_) return true;
    std::lock_guard lock(state_->mutex);
    return state_->messages.count(key_) != 0;
  }

 private:
  std::shared_ptr<State> state_;
  State::MessageKey key_;
  void* data_;
  std::size_t capacity_;
  int peer_;  // rank of the sender in the receiving transport (key_ holds its group rank)
  std::chrono::milliseconds timeout_;
  bool completed_ = false;
  std::size_t received_ = 0;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<State> state, std::uint64_t context, std::vector<int> members,
                    int index)
      : state_(std::move(state)), context_(context), members_(std::move(members)), index_(index) {}

  int rank() const override { return index_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const char* kind() const override { return "loopback"; }

  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override {
    checkPeer(peer, tag);
    std::vector<std::byte> message(bytes);
    if (bytes != 0) std::memcpy(message.data(), data, bytes);
    {
      std::lock_guard lock(state_->mutex);
      state_->throwIfAborted();
      const State::Channel channel{context_, members_[index_], members_[peer], tag};
      const std::uint64_t sequence = state_->sendSequence[channel]++;
      state_->messages[{context_, members_[index_], members_[peer], tag, sequence}] =
          std::move(message);
    }
    state_->changed.notify_all();
    return std::make_unique<LoopbackSend>(bytes);
  }

  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override {
    checkPeer(peer, tag);
    std::lock_guard lock(state_->mutex);
    state_->throwIfAborted();
    const State::Channel channel{context_, members_[peer], members_[index_], tag};
    const std::uint64_t sequence = state_->recvSequence[channel]++;
    return std::make_unique<LoopbackRecv>(
        state_, State::MessageKey{context_, members_[peer], members_[index_], tag, sequence}, data,
        capacityBytes, peer, timeout());
  }

  std::unique_ptr<Transport> split(int color, int key) override {
    const std::uint64_t splitIndex = splitCount_++;
    const std::pair<std::uint64_t, std::uint64_t> id{context_, splitIndex};
    std::vector<std::optional<std::pair<int, int>>> entries;
    std::uint64_t context = 0;
    {
      std::unique_lock lock(state_->mutex);
      state_->throwIfAborted();
      State::Rendezvous& meeting = state_->rendezvous[id];
      if (meeting.entries.empty()) meeting.entries.resize(members_.size());
      meeting.entries[index_] = std::pair{color, key};
      ++meeting.arrived;
      state_->changed.notify_all();
      auto everyone = [&] { return state_->aborted || state_->rendezvous[id].arrived == size(); };
      if (timeout().count() == 0) {
        state_->changed.wait(lock, everyone);
      } else if (!state_->changed.wait_for(lock, timeout(), everyone)) {
        ADAPREC_FAIL(ErrorCode::kTransport,
                     "timed out after " << detail::secondsText(timeout()) << " in split(): "
                                        << state_->rendezvous[id].arrived << " of " << size()
                                        << " ranks arrived — is every rank alive and in the same call?");
      }
      state_->throwIfAborted();
      State::Rendezvous& done = state_->rendezvous[id];
      entries = done.entries;
      // One new context per (parent context, split, color), created by whichever member comes first.
      auto [it, inserted] = state_->splitContexts.try_emplace({context_, splitIndex, color}, 0);
      if (inserted) it->second = state_->nextContext++;
      context = it->second;
      if (++done.departed == size()) state_->rendezvous.erase(id);
    }
    std::vector<std::tuple<int, int, int>> chosen;  // key, parent rank, global rank
    for (int i = 0; i < size(); ++i) {
      if (entries[i]->first == color) chosen.emplace_back(entries[i]->second, i, members_[i]);
    }
    std::sort(chosen.begin(), chosen.end());
    std::vector<int> members;
    int myIndex = -1;
    for (const auto& [k, parentRank, global] : chosen) {
      if (parentRank == index_) myIndex = static_cast<int>(members.size());
      members.push_back(global);
    }
    auto sub = std::make_unique<LoopbackTransport>(state_, context, std::move(members), myIndex);
    sub->setTimeout(timeout());
    return sub;
  }

  // As MPI's, so that emulated nodes exercise the algorithms' piece paths in process.
  std::size_t interNodeMessageBytes() const override { return detail::kEagerMessageBytes; }

  int nodeId() const override {
    int perNode = detail::ranksPerNodeOverride();
    if (perNode == 0) perNode = state_->ranksPerNode;
    return perNode > 0 ? members_[index_] / perNode : 0;
  }

 private:
  void checkPeer(int peer, int tag) const {
    ADAPREC_CHECK_ARG(peer >= 0 && peer < size() && peer != index_,
                      "loopback peer " << peer << " invalid for rank " << index_ << " of " << size());
    ADAPREC_CHECK_ARG(tag >= 0 && tag < kMaxAlgorithmTag, "tag " << tag << " out of range");
  }

  std::shared_ptr<State> state_;
  std::uint64_t context_;
  std::vector<int> members_;  // global rank of each member
  int index_;
  std::uint64_t splitCount_ = 0;
};

}  // namespace

LoopbackGroup::LoopbackGroup(int size, int ranksPerNode) : state_(std::make_shared<State>()) {
  ADAPREC_CHECK_ARG(size >= 1, "loopback group size " << size << " must be >= 1");
  ADAPREC_CHECK_ARG(ranksPerNode >= 0, "ranksPerNode " << ranksPerNode << " must be >= 0");
  state_->size = size;
  state_->ranksPerNode = ranksPerNode;
  std::vector<int> members(size);
  for (int i = 0; i < size; ++i) members[i] = i;
  for (int i = 0; i < size; ++i)
    transports_.push_back(std::make_shared<LoopbackTransport>(state_, 0, members, i));
}

LoopbackGroup::~LoopbackGroup() = default;

int LoopbackGroup::size() const { return state_->size; }

std::shared_ptr<Transport> LoopbackGroup::transport(int rank) {
  ADAPREC_CHECK_ARG(rank >= 0 && rank < size(), "rank " << rank << " outside group of " << size());
  return transports_[rank];
}

void LoopbackGroup::abort() {
  {
    std::lock_guard lock(state_->mutex);
    state_->aborted = true;
  }
  state_->changed.notify_all();
}

void runLoopback(LoopbackGroup& group,
                 const std::function<void(int rank, std::shared_ptr<Transport>)>& fn) {
  const int n = group.size();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, group.transport(r));
      } catch (...) {
        errors[r] = std::current_exception();
        group.abort();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // Prefer a rank's own failure over the kTransport "aborted" errors it caused on the others.
  std::exception_ptr first;
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kTransport) std::rethrow_exception(e);
      if (!first) first = e;
    } catch (...) {
      std::rethrow_exception(e);
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace adaprec
