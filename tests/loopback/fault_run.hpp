// Runs one allreduce over FaultyTransport (optionally under the checksum transport) on a fresh loopback
// group, one thread per rank, WITHOUT aborting the group when a rank fails: every rank must reach its
// own verdict through the library's timeouts, checksums and validators. A watchdog fails the run as a
// hang (and unblocks it, or ends the process) instead of letting CI wait.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "faulty_transport.hpp"

namespace adaprec::test {

enum class Outcome { kCorrect, kErrorEverywhere, kSilentWrong, kMixed, kHang, kNotApplicable };
const char* outcomeName(Outcome outcome);

struct FaultRun {
  Outcome outcome = Outcome::kNotApplicable;
  bool fired = false;
  double seconds = 0;  // slowest live rank: start of the allreduce to its result or error
  std::vector<std::optional<std::string>> errors;  // per rank
  std::vector<std::vector<SentMessage>> sent;      // per rank, with Fault::kNone only
  // The faulted rank's damaged message (FaultState): peer, tag, number on its (transport, peer, tag).
  int faultedPeer = -1;
  int faultedTag = -1;
  std::uint64_t faultedNumber = 0;
  std::string detail;                              // first wrong element or first error
  // With FaultScenario::callAgain: per live rank whose call failed, the next call's error on the same
  // communicator (nullopt: that call returned a result).
  std::vector<std::optional<std::string>> againErrors;
};

struct FaultScenario {
  Algorithm algorithm = Algorithm::kRing;
  std::string format = "fp32";
  int ranks = 4;
  int ranksPerNode = 2;
  std::size_t count = 12325;
  bool checksum = false;
  std::chrono::milliseconds timeout{250};
  std::chrono::seconds watchdog{30};
  FaultConfig fault;
  // A rank whose call failed makes one more call (fault-free inputs) on the same communicator.
  bool callAgain = false;
};

FaultRun runFaultScenario(const FaultScenario& scenario);

}  // namespace adaprec::test
