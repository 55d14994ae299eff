#include "faulty_transport.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "adaprec/error.hpp"

namespace adaprec::test {
namespace {

constexpr int kAgreementTag = kMaxAlgorithmTag - 1;

class CompletedSend final : public Request {
 public:
  explicit CompletedSend(std::size_t bytes) : bytes_(bytes) {}
  std::size_t wait() override { return bytes_; }
  bool done() const override { return true; }

 private:
  std::size_t bytes_;
};

// A receive on a stopped rank: never completes until the test releases the rank.
class StoppedRequest final : public Request {
 public:
  explicit StoppedRequest(std::shared_ptr<FaultState> state) : state_(std::move(state)) {}
  std::size_t wait() override {
    std::unique_lock lock(state_->mutex);
    state_->released.wait(lock, [&] { return state_->release; });
    ADAPREC_FAIL(ErrorCode::kTransport, "this rank was stopped by fault injection");
  }
  bool done() const override { return false; }

 private:
  std::shared_ptr<FaultState> state_;
};

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

const char* faultName(Fault fault) {
  switch (fault) {
    case Fault::kNone: return "none";
    case Fault::kDrop: return "drop";
    case Fault::kTruncate: return "truncate";
    case Fault::kReorder: return "reorder";
    case Fault::kCorruptPayload: return "corrupt payload";
    case Fault::kCorruptHeader: return "corrupt header";
    case Fault::kDelay: return "delay";
    case Fault::kStop: return "stop rank";
  }
  return "?";
}

void FaultState::releaseStopped() {
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  released.notify_all();
}

FaultyTransport::FaultyTransport(std::shared_ptr<Transport> inner, FaultConfig config,
                                 std::shared_ptr<FaultState> state)
    : inner_(std::move(inner)), config_(config), state_(std::move(state)) {
  std::lock_guard lock(state_->mutex);
  transportId_ = state_->nextTransportId++;
}

void FaultyTransport::blockUntilReleased() {
  std::unique_lock lock(state_->mutex);
  state_->released.wait(lock, [&] { return state_->release; });
  ADAPREC_FAIL(ErrorCode::kTransport, "this rank was stopped by fault injection");
}

RequestPtr FaultyTransport::isend(int peer, const void* data, std::size_t bytes, int tag) {
  bool apply = false;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopped) {
      // fall through to block below, outside the lock
    } else if (config_.countAgreement || tag != kAgreementTag) {
      const std::uint64_t index = state_->counted++;
      if (config_.fault == Fault::kNone) {
        const auto* b = static_cast<const unsigned char*>(data);
        state_->log.push_back({transportId_, peer, tag, bytes, bytes >= 2 && b[0] == 'A' && b[1] == 'P'});
      }
      const std::uint64_t number = state_->channelCount[{transportId_, peer, tag}]++;
      apply = config_.fault != Fault::kNone && index == config_.message;
      if (apply) {
        state_->faultedPeer = peer;
        state_->faultedTag = tag;
        state_->faultedNumber = number;
      }
      if (apply && config_.fault == Fault::kStop) state_->stopped = state_->fired = true;
    }
  }
  bool stopped = false;
  {
    std::lock_guard lock(state_->mutex);
    stopped = state_->stopped;
  }
  if (stopped) blockUntilReleased();

  // A held-back message goes out right after the next one on its (transport, peer, tag).
  if (!apply && config_.fault == Fault::kReorder) {
    std::vector<std::byte> held;
    bool swap = false;
    {
      std::lock_guard lock(state_->mutex);
      if (state_->holding && state_->heldTransportId == transportId_ && state_->heldPeer == peer &&
          state_->heldTag == tag) {
        held = std::move(state_->held);
        state_->holding = false;
        state_->fired = true;
        swap = true;
      }
    }
    if (swap) {
      RequestPtr first = inner_->isend(peer, data, bytes, tag);
      inner_->isend(peer, held.data(), held.size(), tag)->wait();  // loopback: copied at once
      return first;
    }
  }
  if (!apply) return inner_->isend(peer, data, bytes, tag);

  std::vector<std::byte> copy(bytes);
  if (bytes != 0) std::memcpy(copy.data(), data, bytes);
  const std::uint64_t random = mix(config_.seed);
  switch (config_.fault) {
    case Fault::kDrop: {
      std::lock_guard lock(state_->mutex);
      state_->fired = true;
      return std::make_unique<CompletedSend>(bytes);
    }
    case Fault::kTruncate:
      copy.resize(bytes / 2);
      break;
    case Fault::kReorder: {
      std::lock_guard lock(state_->mutex);
      state_->holding = true;
      state_->heldTransportId = transportId_;
      state_->heldPeer = peer;
      state_->heldTag = tag;
      state_->held = std::move(copy);
      return std::make_unique<CompletedSend>(bytes);
    }
    case Fault::kCorruptPayload: {
      if (bytes < config_.headerBytes + 4) break;  // no payload word: nothing to corrupt
      const std::size_t words = (bytes - config_.headerBytes) / 4;
      const std::size_t at = config_.headerBytes + 4 * (random % words) + 3;
      copy[at] ^= std::byte{0x40};
      break;
    }
    case Fault::kCorruptHeader: {
      const std::size_t span = std::min(bytes, config_.headerBytes);
      if (span == 0) break;
      const std::size_t bit = random % (span * 8);
      copy[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
      break;
    }
    case Fault::kDelay:
      std::this_thread::sleep_for(config_.delay);
      break;
    case Fault::kNone:
    case Fault::kStop:
      break;
  }
  {
    std::lock_guard lock(state_->mutex);
    state_->fired = true;
  }
  // The damaged copy is sent; loopback copies it at once, so it need not outlive the request.
  inner_->isend(peer, copy.data(), copy.size(), tag)->wait();
  return std::make_unique<CompletedSend>(bytes);
}

RequestPtr FaultyTransport::irecv(int peer, void* data, std::size_t capacityBytes, int tag) {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopped) return std::make_unique<StoppedRequest>(state_);
  }
  return inner_->irecv(peer, data, capacityBytes, tag);
}

std::unique_ptr<Transport> FaultyTransport::split(int color, int key) {
  bool stopped = false;
  {
    std::lock_guard lock(state_->mutex);
    stopped = state_->stopped;
  }
  if (stopped) blockUntilReleased();
  return std::make_unique<FaultyTransport>(std::shared_ptr<Transport>(inner_->split(color, key)),
                                           config_, state_);
}

}  // namespace adaprec::test
