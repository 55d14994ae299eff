// Tags the transport layer uses for its own collectives, at the top of the algorithm tag space.
// Algorithms use small tags (< kFirstInternalTag); every collective is called in the same order on
// every rank and messages on one (peer, tag) are ordered, so reusing a tag across calls is safe.
#pragma once

#include "adaprec/transport.hpp"

namespace adaprec::detail {

inline constexpr int kTagAllreduceMax = kMaxAlgorithmTag - 1;
inline constexpr int kTagNativeGather = kMaxAlgorithmTag - 2;
inline constexpr int kTagNativeBcast = kMaxAlgorithmTag - 3;
inline constexpr int kFirstInternalTag = kMaxAlgorithmTag - 16;

// ADAPREC_RANKS_PER_NODE when set (> 0), else 0. Throws Error(kInvalidArgument) for a bad value.
int ranksPerNodeOverride();

}  // namespace adaprec::detail
