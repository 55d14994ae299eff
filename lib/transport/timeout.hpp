// What the transports share for timeouts: the error message of a wait that gave up, and the completion
// vote that turns a failure seen by some ranks into an error on every rank.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "adaprec/transport.hpp"

namespace adaprec::detail {

// "5.0 s", "0.25 s".
std::string secondsText(std::chrono::milliseconds timeout);

// Throws Error(kTransport): "timed out after 5.0 s waiting for a message from rank 3 (tag 17) — is
// rank 3 alive and in the same allreduce?". `peer` is the rank in the transport that waited,
// `worldPeer` its rank in the whole job (loopback group / MPI_COMM_WORLD), named too when different.
[[noreturn]] void throwWaitTimeout(std::chrono::milliseconds timeout, bool isSend, int peer,
                                   int worldPeer, int tag);

// Runs `body` (one collective operation on `transport`). Without a timeout that is all. With one, every
// rank then takes part in a vote (allreduceMax of "rank + 1 of a failed rank", one dissemination) and
// either every rank returns or every rank throws: a rank whose body failed rethrows its own error; the
// others throw Error(kTransport) naming the failed rank. A rank that cannot finish the vote (a silent
// peer) throws its timeout. A rank returns only if every rank's body completed, since its vote result
// depends on a message chain from every rank.
void runWithCompletionVote(Transport& transport, const std::function<void()>& body);

}  // namespace adaprec::detail
