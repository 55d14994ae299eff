// FaultyTransport: a test decorator that damages one message of one rank on its way out, or makes
// that rank stop answering. Chosen per test by a FaultConfig; the rank's sub-transports (split) share
// its message counter, so a message index counts everything the rank sends (agreement messages, on
// tag kMaxAlgorithmTag - 1, excluded unless countAgreement). Faults happen below any decorator stacked
// on top (makeChecksumTransport(FaultyTransport) checks what this one damaged), like a faulty link.
// A FaultyTransport with Fault::kNone records every message (the dry run that chooses targets).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "adaprec/transport.hpp"

namespace adaprec::test {

enum class Fault {
  kNone,
  kDrop,            // the message is never delivered
  kTruncate,        // its last bytes are cut off (half of it, at least one byte)
  kReorder,         // held back and delivered after the next message on the same (peer, tag)
  kCorruptPayload,  // bit 30 of one 32-bit word after the header flipped (fp32: exponent MSB)
  kCorruptHeader,   // one bit of the first headerBytes bytes flipped
  kDelay,           // delivered after `delay` (the sending thread sleeps)
  kStop,            // from this message on the rank blocks in every call until released
};
const char* faultName(Fault fault);

struct FaultConfig {
  Fault fault = Fault::kNone;
  int rank = 0;               // the rank that sends the damaged message or stops (the test gives the
                              // other ranks Fault::kNone)
  std::uint64_t message = 0;  // index among that rank's counted messages
  std::uint32_t seed = 1;     // which bit / word is flipped
  std::chrono::milliseconds delay{0};
  std::size_t headerBytes = 16;  // chunk header size (docs/formats.md)
  bool countAgreement = false;
};

// One message as the dry run saw it.
struct SentMessage {
  int transportId = 0;  // 0: the rank's transport, 1, 2, ...: its split sub-transports in order
  int peer = 0;
  int tag = 0;
  std::size_t bytes = 0;
  bool chunk = false;  // starts with a chunk header's magic "AP"
};

// Shared by one rank's transport and its splits, and readable by the test.
struct FaultState {
  std::mutex mutex;
  std::condition_variable released;
  bool release = false;  // the test lets a stopped rank go (it then throws)
  bool stopped = false;
  bool fired = false;    // the configured fault was applied (reorder: the swap happened)
  std::uint64_t counted = 0;
  int nextTransportId = 0;
  std::vector<SentMessage> log;  // every counted message (only for Fault::kNone)
  // Counted messages so far per (transport, peer, tag): the message number a checksum names.
  std::map<std::tuple<int, int, int>, std::uint64_t> channelCount;
  // The message the fault was applied to: its peer, tag and number on that (transport, peer, tag).
  // Which message is the N-th a rank sends can depend on thread timing (ring's sends on two tags
  // interleave), so tests read it here instead of assuming it.
  int faultedPeer = -1;
  int faultedTag = -1;
  std::uint64_t faultedNumber = 0;
  // A held-back message (reorder).
  bool holding = false;
  int heldTransportId = -1;
  int heldPeer = -1;
  int heldTag = -1;
  std::vector<std::byte> held;

  void releaseStopped();
};

class FaultyTransport final : public Transport {
 public:
  FaultyTransport(std::shared_ptr<Transport> inner, FaultConfig config,
                  std::shared_ptr<FaultState> state);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* kind() const override { return "faulty"; }
  int nodeId() const override { return inner_->nodeId(); }
  std::size_t interNodeMessageBytes() const override { return inner_->interNodeMessageBytes(); }
  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override;
  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override;
  std::unique_ptr<Transport> split(int color, int key) override;
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }

 private:
  [[noreturn]] void blockUntilReleased();

  std::shared_ptr<Transport> inner_;
  FaultConfig config_;
  std::shared_ptr<FaultState> state_;
  int transportId_;
};

}  // namespace adaprec::test
