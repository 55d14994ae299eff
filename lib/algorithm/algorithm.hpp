// What every allreduce algorithm gets: a transport, a wire format, optional error-feedback residuals,
// the stats record to fill and the pipelining segment size. Algorithms are stateless functions that
// reduce `buf` in place (one that algorithmReadsInput reads an out-of-place call's input from
// AlgorithmContext::input instead); the Communicator does agreement checks, copies, averaging and
// selection.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"
#include "adaprec/transport.hpp"
#include "algorithm/cost_model.hpp"

namespace adaprec::detail {

class DeviceCodec;
class Timeline;

// Error-feedback state of one tensor key on one rank. Slot s holds one float per element position:
// the error of the last quantization this rank made in "encode step" s of the algorithm at that
// position (algorithms that encode a position at most once per call use slot 0 only).
class Residuals {
 public:
  // Zero-filled on first use; `count` must stay the same for a key (the Communicator resets it).
  // Memory of the device set by useDevice (host memory by default).
  float* slot(std::size_t index, std::size_t count);
  void clear() {
    slots_.clear();
    deviceSlots_.clear();
  }
  // Every slot as stored (a slot never used by the algorithm is empty): for saving and loading the
  // state (Communicator::saveErrorFeedback / loadErrorFeedback). Device slots are copied down first.
  const std::vector<std::vector<float>>& slots() const;
  void setSlots(std::vector<std::vector<float>> slots) {
    slots_ = std::move(slots);
    deviceSlots_.clear();  // uploaded again on next use
  }
  // After a call whose result (`count` floats in the memory of the device set by useDevice) is not
  // finite at some positions: every slot this key uses forgets its residual there
  // (detail::residualAfterSum).
  void forgetWhereResultNotFinite(const float* result, std::size_t count);
  // Where slot() keeps the residuals from now on: a device whose memory is not the host's (null or a
  // host one: host memory). The state moves along.
  void useDevice(DeviceCodec* device);

 private:
  mutable std::vector<std::vector<float>> slots_;  // host memory (or the device slots' last copy)
  DeviceCodec* device_ = nullptr;
  struct DeviceSlot {
    std::shared_ptr<float> data;  // released on device_ when the last copy goes
    std::size_t count = 0;
  };
  std::vector<DeviceSlot> deviceSlots_;
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
// Host memory; with a device, its staging memory (DeviceCodec::allocateHost: pinned, so copies overlap
// transfers) or, when its messages go to the transport directly, its device memory. The device must
// outlive the workspace.
class Workspace {
 public:
  // 0-2: algorithms; 3: hierarchical's intra-node buffer; staged, the host copy of the buffer: 4 for
  // hierarchical's fp32 messages, 5 for native (which runs inside hierarchical: one slot each).
  static constexpr std::size_t kSlots = 6;
  static constexpr std::size_t kHierarchicalHostSlot = 4;
  static constexpr std::size_t kNativeHostSlot = 5;
  std::span<std::byte> bytes(std::size_t slot, std::size_t size);
  std::span<float> floats(std::size_t slot, std::size_t count);
  // Where the buffers live from now on: plain host memory (device null), `device`'s staging memory,
  // or its device memory (onDevice). A change releases every buffer.
  void use(DeviceCodec* device, bool onDevice);

 private:
  DeviceCodec* device_ = nullptr;
  bool onDevice_ = false;
  std::shared_ptr<std::byte> buffers_[kSlots];  // released with delete[] or on device_
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
  // Largest message the algorithms send (0: one per segment or range): the transport's
  // interNodeMessageBytes() when the communicator spans several nodes.
  std::size_t messageBytes = 0;
  // Where buf lives and the codec runs (device_codec.hpp); null: host memory, the host codec.
  DeviceCodec* device = nullptr;
  // The call's input when it is not in buf: the caller's send buffer (host memory, disjoint from buf),
  // set only for an algorithm that algorithmReadsInput() at the top level of a call, which then reads
  // its values there and writes the sum to buf. Null: buf holds the input (copied there first).
  const float* input = nullptr;
};

// Whether `algorithm` reads an out-of-place call's input from AlgorithmContext::input, so that the
// Communicator need not copy the send buffer into the receive buffer first. That copy took 8-9 ms of a
// 25 ms table1 twoshot allreduce of 64 MiB (2 emulated nodes at 1 Gbit/s, both ranks copying at once
// on this host's memory), before any byte was sent. ring and twoshot: they encode from the input what
// they send first and copy the rest into buf segment by segment as they sum; hierarchical sends its
// intra-node reduce-scatter from the input and copies only its own share (the others, which re-send
// their input in later rounds, still have it copied).
bool algorithmReadsInput(Algorithm algorithm);

// Such an algorithm's input: AlgorithmContext::input when set, else buf itself.
inline const float* callInput(const AlgorithmContext& ctx, float* buf) {
  return ctx.input != nullptr ? ctx.input : buf;
}

// Brings input elements [offset, offset + n) into buf, where they are not there already.
inline void bringInput(const float* input, float* buf, std::size_t offset, std::size_t n) {
  if (input != buf) std::memcpy(buf + offset, input + offset, n * sizeof(float));
}

// Whether buffers on `device` go to `transport` as they are (Transport::acceptsDeviceMemory): then the
// workspace is device memory and nothing is staged through the host. False for host memory (null or a
// host device). The one rule Steps, native and the Communicator follow.
bool deviceDirect(const Transport& transport, const DeviceCodec* device);

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
// Those formats' names for messages, from nativeSupports: "fp32, bf16 or fp16".
std::string nativeFormatNames();

// The auto rule (docs/algorithms.md, "auto"), in two parts. autoGuard: the cases decided without the
// cost model (one rank; small messages; fp32 on one shared-memory node in host memory), where it
// returns native. ranks = communicator size, nodes = distinct node ids, onDevice: the buffers are in
// device memory (Communicator::setDevice).
std::optional<Algorithm> autoGuard(Format format, std::size_t count, int ranks, int nodes, bool onDevice = false);
// One algorithm auto weighed: its predicted time and quantizations per value (0 when sent lossless).
struct AutoCandidate {
  Algorithm algorithm = Algorithm::kNative;
  double seconds = 0;
  int quantizations = 0;
  bool withinBudget = true;
};
struct AutoChoice {
  Algorithm algorithm = Algorithm::kNative;  // kNative means the transport's fp32 allreduce
  std::vector<AutoCandidate> candidates;     // in the order weighed (native first)
};
// The model part: among native (fp32) and every engine algorithm whose quantizations per value in
// `format` are at most maxQuantizations (any for a lossless format), the one with the least predicted
// time (near-ties, kAutoTieMargin, to the earlier in the table); an engine algorithm must beat
// native's prediction by kAutoNativeMargin (above native's largest probe it is proposed whatever
// native's extrapolated curve says on one node, and when within kAutoExtrapolatedNativeMargin of it
// between nodes). The trial then confirms it by measurement. A pure function of its arguments: ranks that hold
// the same (agreed) calibration choose the same.
AutoChoice chooseAlgorithm(const Calibration& calibration, Format format, std::size_t count,
                           int maxQuantizations, Placement placement = {});
// What hierarchical's share owners run (the inner allreduce among the ranks with the same local rank) among `nodes`
// ranks: twoshot up to kTwoShotMaxRanks nodes (2 quantizations), else rabenseifner, for fp32 too: the
// engine's eager messages got the loaded link's rate where MPI_Allreduce between the two ranks of 2
// emulated nodes x 2 at 1 Gbit/s did not (hierarchical fp32 at 64 MiB: 605-617 ms against 787-849 ms
// with a native inner step, and against MPI_Allreduce's 660-793 ms; docs/benchmarks.md section 0a).
Algorithm hierarchicalInnerAlgorithm(int nodes);
inline constexpr int kTwoShotMaxRanks = 8;
// Below this many fp32 bytes auto sends native without consulting the model: latency and the codec's
// fixed costs dominate, compression cannot pay, and MPI's small-message algorithms beat ours; also
// the calibration probe never runs for a job of only small messages.
inline constexpr std::size_t kAutoModelMinBytes = std::size_t{256} << 10;
// All ranks on one node (shared memory): fp32 is always native there (the engine's fp32 algorithms
// only copy what MPI copies). A lossy format goes to the model from kAutoModelMinBytes like between
// nodes: on 4 ranks over shared memory the 8-bit and Table-N formats ran up to 1.7x faster compressed
// from 512 KiB, bf16/fp16 no faster than native fp32 (docs/benchmarks.md), and the trial
// (AutoSelector) confirms each choice of compression by measurement. On one node native's curve is
// only trusted up to its largest probe (16 MiB): above it a lossy format is proposed compressed
// (measured 2-5x slower at 256 MiB than the curve's slope says), the model picking which algorithm
// within the budget and the trial whether it beats native.
// An engine algorithm replaces native only when predicted at most this fraction of native's time:
// the model is optimistic for the compressed algorithms (docs/benchmarks.md), native is the safe side.
inline constexpr double kAutoNativeMargin = 0.9;
// Between nodes above native's largest probe native's time is an extrapolation too (its best
// bandwidth-bound rate, cost_model.cpp): on 2 emulated nodes x 2 ranks at 1 Gbit/s it predicted 605 ms
// for 64 MiB fp32 calls measured at 690-930 ms, so auto stayed native where hierarchical ran 605 ms
// (0.66-0.78 of the best). There an engine algorithm predicted within this factor of native's time is
// proposed and the trial (AutoSelector) measures both: the model's stated error is +-25 %.
inline constexpr double kAutoExtrapolatedNativeMargin = 1.25;
// Engine algorithms predicted within this factor of the fastest count as tied: the earliest in the
// algorithm table is taken.
inline constexpr double kAutoTieMargin = 1.05;

// Message tags of the algorithms (all < kMaxAlgorithmTag).
inline constexpr int kTagReduceScatter = 1;
inline constexpr int kTagAllgather = 2;
inline constexpr int kTagPreStep = 3;
inline constexpr int kTagPostStep = 4;
inline constexpr int kTagExchange = 5;
inline constexpr int kTagIntraReduce = 6;
inline constexpr int kTagIntraBcast = 7;
inline constexpr int kTagCalibration = 8;  // the cost model's probes (calibration.cpp)

}  // namespace adaprec::detail
