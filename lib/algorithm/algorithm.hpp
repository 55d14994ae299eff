// What every allreduce algorithm gets: a transport, a wire format, optional error-feedback residuals,
// the stats record to fill and the pipelining segment size. Algorithms are stateless functions that
// reduce `buf` in place; the Communicator does agreement checks, copies, averaging and selection.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"
#include "adaprec/transport.hpp"

namespace adaprec::detail {

class Timeline;

// Error-feedback state of one tensor key on one rank. Slot s holds one float per element position:
// the error of the last quantization this rank made in "encode step" s of the algorithm at that
// position (algorithms that encode a position at most once per call use slot 0 only).
class Residuals {
 public:
  // Zero-filled on first use; `count` must stay the same for a key (the Communicator resets it).
  float* slot(std::size_t index, std::size_t count);
  void clear() { slots_.clear(); }
  // Every slot as stored (a slot never used by the algorithm is empty): for saving and loading the
  // state (Communicator::saveErrorFeedback / loadErrorFeedback).
  const std::vector<std::vector<float>>& slots() const { return slots_; }
  void setSlots(std::vector<std::vector<float>> slots) { slots_ = std::move(slots); }

 private:
  std::vector<std::vector<float>> slots_;
};

// Node layout, created once per Communicator (collectively) for the hierarchical algorithm.
struct Hierarchy {
  std::unique_ptr<Transport> intra;  // ranks of my node, in rank order (local rank = intra->rank())
  // Every node's rank with my local rank: the N ranks that allreduce my share across nodes. Only used
  // when my local rank < lanes.
  std::unique_ptr<Transport> peers;
  // Ranks on the smallest node: the buffer is cut into `lanes` shares, share l owned by local rank l
  // on every node (local ranks >= lanes of a fuller node contribute but own no share).
  int lanes = 1;
};

// Staging memory reused across calls: the encoded copies of a large buffer are allocated (and
// page-faulted) once per Communicator instead of on every allreduce. Contents are unspecified.
class Workspace {
 public:
  static constexpr std::size_t kSlots = 4;  // 0-2: algorithms; 3: hierarchical's intra-node buffer
  std::span<std::byte> bytes(std::size_t slot, std::size_t size);
  std::span<float> floats(std::size_t slot, std::size_t count);

 private:
  std::unique_ptr<std::byte[]> buffers_[kSlots];
  std::size_t capacity_[kSlots] = {};
};

struct AlgorithmContext {
  Transport& transport;
  Format format;
  Residuals* residuals;  // null without error feedback
  AllreduceStats& stats;
  std::size_t segmentCount;        // elements per pipelined segment
  Workspace& workspace;
  Hierarchy* hierarchy = nullptr;  // set for kHierarchical
  Algorithm innerAlgorithm = Algorithm::kTwoShot;  // hierarchical: what each share's peers run
  Timeline* timeline = nullptr;    // records every step's span when set (ADAPREC_TIMELINE)
  // Set when an algorithm runs on a block of a larger error-feedback range (hierarchical's share, in
  // blocks): the residuals cover residualTotal elements and this call's element 0 is residualOffset.
  std::size_t residualOffset = 0;
  std::size_t residualTotal = 0;  // 0: the call's own count
  // Largest message ring and twoshot send (0: one per segment); kInterNodeMessageBytes when the
  // communicator spans several nodes.
  std::size_t messageBytes = 0;
};

// Default elements per segment (adaprec::kDefaultSegmentCount): large enough that per-message costs
// vanish, small enough that encoding one segment overlaps the transfer of the previous one.
using adaprec::kDefaultSegmentCount;

void ringAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count);
void twoShotAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count);
void rabenseifnerAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count);
void recursiveDoublingAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count);
void nativeAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count);
void hierarchicalAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count);
// Dispatches on a concrete (non-auto) algorithm. When the transport has a timeout set, a completion
// vote follows (detail::runWithCompletionVote): either every rank returns the result or every rank
// throws, even when only one rank saw the fault (a lost or damaged message in a last step).
void runAlgorithm(Algorithm algorithm, AlgorithmContext& ctx, float* buf, std::size_t count);
// The same without the vote: for an algorithm run inside another (hierarchical's per-share peers).
void runAlgorithmUnconfirmed(Algorithm algorithm, AlgorithmContext& ctx, float* buf, std::size_t count);

// Whether the native algorithm can carry this format (fp32, bf16, fp16).
bool nativeSupports(Format format);

// The auto rule (docs/algorithms.md). ranks = communicator size, nodes = distinct node ids,
// maxRanksPerNode = ranks on the fullest node.
Algorithm chooseAlgorithm(Format format, std::size_t count, int ranks, int nodes, int maxRanksPerNode);
// What hierarchical's share owners run among the `nodes` ranks of equal local rank: auto's choice for that many ranks, and
// native for fp32 (nothing to compress).
Algorithm hierarchicalInnerAlgorithm(Format format, int nodes);
// auto and hierarchical take twoshot (2 quantizations whatever p) up to this many ranks.
inline constexpr int kTwoShotMaxRanks = 8;
// Below this many fp32 bytes compression cannot pay for its codec and latency costs: auto uses native.
inline constexpr std::size_t kAutoCompressMinBytes = std::size_t{256} << 10;
// The same threshold when all ranks share one node (no network: bytes are cheap to move).
inline constexpr std::size_t kAutoCompressSharedMinBytes = std::size_t{64} << 20;

// Largest message ring and twoshot send between nodes: below Open MPI's TCP eager limit (64 KiB with its
// header), so no message waits for a rendezvous handshake. Measured on 4 emulated nodes at 1 Gbit/s
// (the links' queues hold 50 ms): twoshot's exchange pattern with 512 KiB messages ran at 0.7 of the
// same bytes sent as a ring, with 48 KiB messages at 1.0; the ring itself gained too at 16 MiB
// (docs/algorithms.md, twoshot).
inline constexpr std::size_t kInterNodeMessageBytes = std::size_t{48} << 10;

// Message tags of the algorithms (all < kMaxAlgorithmTag).
inline constexpr int kTagReduceScatter = 1;
inline constexpr int kTagAllgather = 2;
inline constexpr int kTagPreStep = 3;
inline constexpr int kTagPostStep = 4;
inline constexpr int kTagExchange = 5;
inline constexpr int kTagIntraReduce = 6;
inline constexpr int kTagIntraBcast = 7;

}  // namespace adaprec::detail
