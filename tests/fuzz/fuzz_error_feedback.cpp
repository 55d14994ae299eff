// libFuzzer harness: Communicator::loadErrorFeedback (the error-feedback blob of checkpoints), on a
// one-rank Communicator over a loopback transport.
//
// Findings besides crashes and sanitizer reports: an exception other than adaprec::Error; a rejected
// blob that changed the loaded state; an accepted blob that saveErrorFeedback does not give back with
// the same size, or whose saved form does not load and save to itself (keys are kept sorted, so a blob
// listing them in another order comes back reordered, byte for byte otherwise the same).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "adaprec/transport.hpp"
#include "fuzz_check.hpp"

namespace {

adaprec::Communicator& communicator() {
  static adaprec::LoopbackGroup group(1);
  static adaprec::Communicator comm(group.transport(0));
  return comm;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace adaprec;
  Communicator& comm = communicator();
  // A known non-empty state before every input, so that "a rejected blob leaves the state unchanged"
  // is checked the same way whatever ran before.
  comm.resetErrorFeedback();
  comm.setErrorFeedback("before", ErrorFeedbackState{3, Algorithm::kRing, {{1.0f, -2.0f, 0.5f}, {}}});
  const std::vector<std::byte> before = comm.saveErrorFeedback();
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    comm.loadErrorFeedback(bytes);
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kMalformedInput);
    FUZZ_REQUIRE(comm.saveErrorFeedback() == before);
    return 0;
  }
  const std::vector<std::byte> saved = comm.saveErrorFeedback();
  FUZZ_REQUIRE(saved.size() == size);
  comm.loadErrorFeedback(saved);
  FUZZ_REQUIRE(comm.saveErrorFeedback() == saved);
  return 0;
}
