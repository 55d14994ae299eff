// The largest message the MPI and loopback transports want between nodes
// (Transport::interNodeMessageBytes), declared once.
#pragma once

#include <cstddef>

namespace adaprec::detail {

// Below Open MPI's TCP eager limit (64 KiB with its header), so no message waits for a rendezvous
// handshake. Measured on 4 emulated nodes at 1 Gbit/s (the links' queues hold 50 ms): twoshot's
// exchange pattern with 512 KiB messages ran at 0.7 of the same bytes sent as a ring, with 48 KiB
// messages at 1.0; the ring itself gained too at 16 MiB, and rabenseifner's rounds went from 1.2-1.8x
// to 1.06-1.33x the ring's time (docs/algorithms.md, twoshot; docs/benchmarks.md 0b).
inline constexpr std::size_t kEagerMessageBytes = std::size_t{48} << 10;

}  // namespace adaprec::detail
