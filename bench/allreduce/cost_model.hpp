// The cost model behind `adaprec-bench --model`: alpha-beta for the links plus measured codec speed.
//
//   T(algo, format, n) = steps(algo) * alpha + wireBytes(algo, format, n) / beta + codec(algo, format, n)
//
// alpha is half the round trip of an 8-byte message between rank 0 and the first rank on another node
// (or on its own node when there is one node). beta is what each rank achieves while every rank sends
// 8 MiB to its ring successor at once, the load an allreduce puts on links and cores. codec() sums the
// encode / decode / decodeAdd calls the algorithm makes per rank, each timed on this machine with every
// rank encoding at once. The terms add rather than overlap: on an oversubscribed host (and in the
// emulated cluster) the network stack and the codec compete for the same cores. Per-algorithm steps,
// bytes and codec calls are listed in cost_model.cpp and docs/benchmarks.md.
#pragma once

#include <cstddef>
#include <map>
#include <span>
#include <string>

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"
#include "adaprec/transport.hpp"
#include "rank_collectives.hpp"

namespace adaprec::bench {

struct LinkEstimate {
  double alphaSeconds = 0;    // half the round trip of an 8-byte message
  double bytesPerSecond = 0;  // large message bytes / (half round trip - alpha)
};

struct CodecEstimate {  // seconds per element, max over ranks
  double encode = 0;
  double decode = 0;
  double decodeAdd = 0;
};

class CostModel {
 public:
  // Collective: measures the links and the codec of each format (fp32 is always measured).
  static CostModel measure(Transport& transport, RankCollectives& ranks, std::span<const Format> formats);

  // Predicted seconds of one allreduce; `algorithm` must be resolved (not kAuto).
  double predictSeconds(Algorithm algorithm, Format format, std::size_t count) const;

  // Multi-line summary for the output header ("# " prefixed).
  std::string describe() const;

 private:
  struct Parts {
    double steps = 0;
    double wireBytes = 0;
    double codecSeconds = 0;
  };
  Parts flatParts(Algorithm algorithm, Format format, std::size_t count, int ranks) const;
  const CodecEstimate& codec(Format format) const;

  int ranks_ = 1;
  int nodes_ = 1;
  int ranksPerNode_ = 1;
  LinkEstimate inter_;    // ping-pong, rank 0 <-> first rank on another node
  LinkEstimate intra_;    // ping-pong, rank 0 <-> first other rank on its node
  LinkEstimate flat_;     // alpha of the link flat algorithms cross, beta with every rank sending at once
  LinkEstimate leaders_;  // the same among node leaders only (hierarchical's inter-node ring)
  std::map<Format, CodecEstimate> codec_;
};

}  // namespace adaprec::bench
