#include "transport/timeout.hpp"

#include <cstdint>
#include <cstdio>
#include <exception>

#include "adaprec/error.hpp"

namespace adaprec {

void Transport::setTimeout(std::chrono::milliseconds timeout) {
  ADAPREC_CHECK_ARG(timeout.count() >= 0, "transport timeout " << timeout.count() << " ms must be >= 0");
  timeout_ = timeout;
}

std::chrono::milliseconds Transport::timeout() const { return timeout_; }

namespace detail {

std::string secondsText(std::chrono::milliseconds timeout) {
  const double seconds = static_cast<double>(timeout.count()) / 1000.0;
  char text[32];
  std::snprintf(text, sizeof text, seconds < 1.0 ? "%.2f s" : "%.1f s", seconds);
  return text;
}

void throwWaitTimeout(std::chrono::milliseconds timeout, bool isSend, int peer, int worldPeer, int tag) {
  std::string who = "rank " + std::to_string(peer);
  if (worldPeer != peer && worldPeer >= 0) who += " (rank " + std::to_string(worldPeer) + " of the job)";
  ADAPREC_FAIL(ErrorCode::kTransport,
               "timed out after " << secondsText(timeout)
                                  << (isSend ? " waiting for " + who + " to take a message"
                                             : " waiting for a message from " + who)
                                  << " (tag " << tag << ") — is " << who
                                  << " alive and in the same allreduce?");
}

void runWithCompletionVote(Transport& transport, const std::function<void()>& body) {
  if (transport.timeout().count() == 0 || transport.size() == 1) {
    body();
    return;
  }
  std::exception_ptr failure;
  try {
    body();
  } catch (const Error&) {
    failure = std::current_exception();
  }
  std::uint64_t failedRank = failure ? static_cast<std::uint64_t>(transport.rank()) + 1 : 0;
  try {
    transport.allreduceMax(&failedRank, 1);
  } catch (const Error&) {
    if (failure) std::rethrow_exception(failure);
    throw;
  }
  if (failure) std::rethrow_exception(failure);
  ADAPREC_CHECK(failedRank == 0, ErrorCode::kTransport,
                "the collective failed on rank " << failedRank - 1
                                                 << " (see its error); this rank's result is discarded");
}

}  // namespace detail
}  // namespace adaprec
