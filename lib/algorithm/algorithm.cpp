// Algorithm names, dispatch, error-feedback slots, the auto rule, each algorithm's number of
// quantizations per value (declared in error_model.hpp) and its per-rank work for the cost model
// (declared in cost_model.hpp).
#include "algorithm/algorithm.hpp"
#include "algorithm/device_codec.hpp"

#include <array>
#include <cmath>
#include <limits>

#include "adaprec/codec.hpp"
#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/error.hpp"
#include "algorithm/error_model.hpp"
#include "transport/timeout.hpp"

namespace adaprec {
namespace {

struct AlgorithmRow {
  Algorithm algorithm;
  std::string_view name;
};

constexpr std::array<AlgorithmRow, 7> kAlgorithms = {{
    {Algorithm::kAuto, "auto"},
    {Algorithm::kNative, "native"},
    {Algorithm::kRing, "ring"},
    {Algorithm::kTwoShot, "twoshot"},
    {Algorithm::kRabenseifner, "rabenseifner"},
    {Algorithm::kRecursiveDoubling, "recursive_doubling"},
    {Algorithm::kHierarchical, "hierarchical"},
}};

constexpr std::array<Algorithm, kAlgorithms.size()> kAlgorithmList = {
    Algorithm::kAuto,         Algorithm::kNative,            Algorithm::kRing,
    Algorithm::kTwoShot,      Algorithm::kRabenseifner,      Algorithm::kRecursiveDoubling,
    Algorithm::kHierarchical};

}  // namespace

std::span<const Algorithm> allAlgorithms() { return kAlgorithmList; }

std::string_view algorithmName(Algorithm algorithm) {
  for (const AlgorithmRow& row : kAlgorithms) {
    if (row.algorithm == algorithm) return row.name;
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument,
               "unknown algorithm id " << static_cast<int>(static_cast<std::uint8_t>(algorithm)));
}

std::optional<Algorithm> tryParseAlgorithm(std::string_view name) {
  for (const AlgorithmRow& row : kAlgorithms) {
    if (row.name == name) return row.algorithm;
  }
  return std::nullopt;
}

std::string validAlgorithmNames() {
  std::string names;
  for (const AlgorithmRow& row : kAlgorithms) {
    if (!names.empty()) names += ", ";
    names += row.name;
  }
  return names;
}

Algorithm parseAlgorithm(std::string_view name) {
  const std::optional<Algorithm> algorithm = tryParseAlgorithm(name);
  ADAPREC_CHECK_ARG(algorithm.has_value(),
                    "unknown algorithm '" << name << "'; valid algorithms: " << validAlgorithmNames());
  return *algorithm;
}

namespace detail {

float* Residuals::slot(std::size_t index, std::size_t count) {
  if (device_ == nullptr) {
    if (slots_.size() <= index) slots_.resize(index + 1);
    std::vector<float>& s = slots_[index];
    if (s.size() != count) s.assign(count, 0.0f);
    return s.data();
  }
  if (deviceSlots_.size() <= index) deviceSlots_.resize(index + 1);
  DeviceSlot& d = deviceSlots_[index];
  if (!d.data || d.count != count) {
    DeviceCodec* device = device_;
    d.data = std::shared_ptr<float>(static_cast<float*>(device->allocate(count * sizeof(float))),
                                    [device](float* p) { device->release(p); });
    d.count = count;
    // Loaded or moved state of this count goes up; anything else starts from zero.
    if (index < slots_.size() && slots_[index].size() == count) {
      device->copyToDevice(d.data.get(), slots_[index].data(), count * sizeof(float));
      device->synchronize();  // slots_ may change once this returns
    } else {
      device->fillZero(d.data.get(), count * sizeof(float));
    }
  }
  return d.data.get();
}

const std::vector<std::vector<float>>& Residuals::slots() const {
  if (device_ != nullptr && !deviceSlots_.empty()) {
    if (slots_.size() < deviceSlots_.size()) slots_.resize(deviceSlots_.size());
    for (std::size_t i = 0; i < deviceSlots_.size(); ++i) {
      if (!deviceSlots_[i].data) continue;
      slots_[i].resize(deviceSlots_[i].count);
      device_->copyToHost(slots_[i].data(), deviceSlots_[i].data.get(), deviceSlots_[i].count * sizeof(float));
    }
    device_->synchronize();
  }
  return slots_;
}

void Residuals::forgetWhereResultNotFinite(const float* result, std::size_t count) {
  if (device_ == nullptr) {
    // Most calls have no non-finite result: one read pass, and the slots only when there is one.
    std::size_t first = 0;
    while (first < count && std::isfinite(result[first])) ++first;
    if (first == count) return;
    for (std::vector<float>& s : slots_) {
      if (s.size() != count) continue;
      for (std::size_t i = first; i < count; ++i) s[i] = residualAfterSum(result[i], s[i]);
    }
    return;
  }
  for (DeviceSlot& d : deviceSlots_) {
    if (d.data && d.count == count) device_->forgetResidualsOfNonFiniteSums(result, d.data.get(), count);
  }
}

void Residuals::useDevice(DeviceCodec* device) {
  if (device != nullptr && device->hostMemory()) device = nullptr;
  if (device == device_) return;
  slots();  // the state, in host memory
  deviceSlots_.clear();
  device_ = device;
}

std::span<std::byte> Workspace::bytes(std::size_t slot, std::size_t size) {
  ADAPREC_CHECK(slot < kSlots, ErrorCode::kInternal, "workspace slot " << slot);
  if (capacity_[slot] < size) {
    // A queued copy or kernel may still use the old buffer: the stream drains first (rare: buffers
    // only grow). That also covers stream-ordered device memory, which cudaMallocAsync may hand back
    // from what a queued cudaFreeAsync frees, going to the transport outside the stream's order.
    if (device_ != nullptr) device_->synchronize();
    buffers_[slot].reset();  // release first: the old and new buffer need not coexist
    DeviceCodec* device = device_;
    if (device != nullptr && onDevice_) {
      buffers_[slot] = std::shared_ptr<std::byte>(static_cast<std::byte*>(device->allocate(size)),
                                                  [device](std::byte* p) { device->release(p); });
      device->synchronize();
    } else if (device != nullptr) {
      buffers_[slot] = std::shared_ptr<std::byte>(static_cast<std::byte*>(device->allocateHost(size)),
                                                  [device](std::byte* p) { device->releaseHost(p); });
    } else {
      buffers_[slot] = std::shared_ptr<std::byte>(new std::byte[size], std::default_delete<std::byte[]>());
    }
    capacity_[slot] = size;
  }
  return {buffers_[slot].get(), size};
}

bool deviceDirect(const Transport& transport, const DeviceCodec* device) {
  return device != nullptr && !device->hostMemory() && transport.acceptsDeviceMemory(device->memorySpace());
}

void Workspace::use(DeviceCodec* device, bool onDevice) {
  if (device != nullptr && device->hostMemory()) device = nullptr;
  onDevice = onDevice && device != nullptr;
  if (device == device_ && onDevice == onDevice_) return;
  if (device_ != nullptr) device_->synchronize();  // nothing queued may still use the old buffers
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    buffers_[slot].reset();
    capacity_[slot] = 0;
  }
  device_ = device;
  onDevice_ = onDevice;
}

std::span<float> Workspace::floats(std::size_t slot, std::size_t count) {
  const std::span<std::byte> raw = bytes(slot, count * sizeof(float));
  return {reinterpret_cast<float*>(raw.data()), count};
}

void runAlgorithm(Algorithm algorithm, AlgorithmContext& ctx, float* buf, std::size_t count) {
  runWithCompletionVote(ctx.transport, [&] { runAlgorithmUnconfirmed(algorithm, ctx, buf, count); });
}

bool algorithmReadsInput(Algorithm algorithm) {
  return algorithm == Algorithm::kRing || algorithm == Algorithm::kTwoShot || algorithm == Algorithm::kHierarchical;
}

void runAlgorithmUnconfirmed(Algorithm algorithm, AlgorithmContext& ctx, float* buf,
                             std::size_t count) {
  switch (algorithm) {
    case Algorithm::kNative: return nativeAllreduce(ctx, buf, count);
    case Algorithm::kRing: return ringAllreduce(ctx, buf, count);
    case Algorithm::kTwoShot: return twoShotAllreduce(ctx, buf, count);
    case Algorithm::kRabenseifner: return rabenseifnerAllreduce(ctx, buf, count);
    case Algorithm::kRecursiveDoubling: return recursiveDoublingAllreduce(ctx, buf, count);
    case Algorithm::kHierarchical: return hierarchicalAllreduce(ctx, buf, count);
    case Algorithm::kAuto: break;
  }
  ADAPREC_FAIL(ErrorCode::kInternal, "runAlgorithm needs a concrete algorithm, got "
                                         << algorithmName(algorithm));
}

// The auto rule; docs/algorithms.md explains the reasons.
std::optional<Algorithm> autoGuard(Format format, std::size_t count, int ranks, int nodes, bool onDevice) {
  const std::size_t bytes = count * sizeof(float);
  if (ranks == 1 || bytes < kAutoModelMinBytes) return Algorithm::kNative;
  // fp32 on host shared memory up to native's largest probe: MPI's own sum is the fastest there is
  // (4 ranks, 16 MiB: native 15.8 ms, the engine's fp32 ring 22.1). Above it the model proposes an
  // engine algorithm and the trial measures both (256 MiB: ring 293 ms, native 394; docs/benchmarks.md,
  // 0f). Not on device buffers at any size: native stages the whole buffer down, sums and copies it
  // up, one after the other, where the engine overlaps its copies with the transfers (one H100, 2
  // ranks, 64 MiB: ring 37 ms, native 54 ms); the model and the trial decide there.
  if (nodes == 1 && isLossless(format) && !onDevice && bytes <= kNativeLargestProbeBytes)
    return Algorithm::kNative;
  return std::nullopt;
}

AutoChoice chooseAlgorithm(const Calibration& calibration, Format format, std::size_t count,
                           int maxQuantizations, Placement placement) {
  const CalibrationTopology& t = calibration.topology;
  AutoChoice choice;
  // native sends fp32 under auto whatever the format: no quantization.
  choice.candidates.push_back({Algorithm::kNative, predictSeconds(calibration, Algorithm::kNative, format, count, placement), 0,
                               true});
  double fastest = std::numeric_limits<double>::infinity();
  for (Algorithm algorithm : allAlgorithms()) {
    if (algorithm == Algorithm::kAuto || algorithm == Algorithm::kNative) continue;
    // hierarchical only differs from its inner algorithm with several nodes of several ranks.
    if (algorithm == Algorithm::kHierarchical && (t.nodes == 1 || t.ranksPerNode == 1)) continue;
    AutoCandidate c;
    c.algorithm = algorithm;
    c.quantizations = isLossless(format) ? 0 : quantizationsPerValue(algorithm, format, t.ranks, t.nodes);
    c.withinBudget = c.quantizations <= maxQuantizations;
    c.seconds = predictSeconds(calibration, algorithm, format, count, placement);
    choice.candidates.push_back(c);
    if (c.withinBudget) fastest = std::min(fastest, c.seconds);
  }
  // Near-ties go to the earlier algorithm of the table (ring before rabenseifner: the model does not
  // see ring's pipelining of codec and transfer, only rabenseifner's fewer latencies), but on one node
  // to twoshot first: there its 2 steps beat ring's 2 (p-1) (4 ranks, fp32, 32-128 MiB out of place:
  // twoshot 37 / 67 / 127 ms, ring 43 / 77 / 156: ring still copies (p-1)/p of an out-of-place input,
  // twoshot 1/p; alike in place), where between nodes ring's pipelining wins (4 emulated nodes at
  // 1 Gbit/s, fp32 64 MiB: ring 858-870 ms, twoshot 911-921). Lossy formats on more than 2 ranks have
  // only twoshot within the default budget anyway.
  const auto preferred = [&](const AutoCandidate& c) { return t.nodes == 1 && c.algorithm == Algorithm::kTwoShot; };
  const AutoCandidate* tied = nullptr;
  for (const AutoCandidate& c : choice.candidates) {
    if (c.algorithm == Algorithm::kNative || !c.withinBudget || c.seconds > fastest * kAutoTieMargin) continue;
    if (tied == nullptr || (preferred(c) && !preferred(*tied))) tied = &c;
  }
  const double native = choice.candidates.front().seconds;
  if (tied != nullptr) {
    const AutoCandidate& c = *tied;
    // Above native's largest probe its time is extrapolated: on one node (measured 2-5x slower at
    // 256 MiB than its slope says) the engine algorithm is taken whatever it says, between nodes when
    // within kAutoExtrapolatedNativeMargin of it; the trial then measures both. Within the probed
    // sizes only by the margin.
    const bool nativeBeyondProbes = 4.0 * static_cast<double>(count) > calibration.native.back().first;
    const bool extrapolated =
        nativeBeyondProbes && (t.nodes == 1 || c.seconds <= native * kAutoExtrapolatedNativeMargin);
    if (extrapolated || c.seconds <= native * kAutoNativeMargin) choice.algorithm = c.algorithm;
  }
  return choice;
}

Algorithm hierarchicalInnerAlgorithm(int nodes) {
  return nodes <= kTwoShotMaxRanks ? Algorithm::kTwoShot : Algorithm::kRabenseifner;
}

namespace {

int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

}  // namespace

// Q of docs/algorithms.md, from the steps in each algorithm's header comment; q = largest power of two
// <= p, and p != q adds the pre/post step of rabenseifner and recursive_doubling.
int quantizationsPerValue(Algorithm algorithm, Format wire, int ranks, int nodes) {
  if (ranks <= 1) return 0;
  const int log2q = floorLog2(ranks);
  const bool prePostStep = (1 << log2q) != ranks;
  switch (algorithm) {
    // MPI sums fp32 as is; bf16/fp16 round once up front and after each of up to p-1 additions.
    case Algorithm::kNative: return wire == Format::kFp32 ? 0 : ranks;
    // p-1 re-encodes of partial sums in the reduce-scatter + 1 by the owner.
    case Algorithm::kRing: return ranks;
    // The contributor's encode + the owner's encode.
    case Algorithm::kTwoShot: return 2;
    // One encode per halving round + the owner's; the pre-step's encode of the even ranks' vectors.
    case Algorithm::kRabenseifner: return log2q + 1 + (prePostStep ? 1 : 0);
    // One encode per round; pre-step and post-step encodes.
    case Algorithm::kRecursiveDoubling: return log2q + (prePostStep ? 2 : 0);
    // fp32 inside a node; only each share's inner allreduce among the nodes quantizes.
    case Algorithm::kHierarchical:
      return quantizationsPerValue(hierarchicalInnerAlgorithm(nodes), wire, nodes, nodes);
    case Algorithm::kAuto: break;
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument,
               "quantizationsPerValue needs a concrete algorithm, got " << algorithmName(algorithm));
}

// Per-rank work of each flat algorithm (the model's steps / bytes / codec calls), from the same header
// comments as Q above. c = ceil(n / p) elements per chunk, E(m) = encodedBytes(format, m), q = largest
// power of two <= p, L = log2 q; "pre/post" is the p != q step of rabenseifner and recursive_doubling.
//   ring      2(p-1) steps, 2(p-1) E(c) bytes; encode p c, decodeAdd (p-1) c, decode p c
//   twoshot   the same work (p-1 messages at once per phase; one latency each is charged)
//   rabenseif 2L steps, 2(q-1) E(n/q) (+E(n) pre/post) bytes; codec as ring over q chunks
//   rec.doubl L steps, L E(n) (+E(n)) bytes; encode L n, decode 2 L n (mine and theirs)
//   native    as ring in fp32 (a decodeAdd of fp32 is an add)
AlgorithmWork algorithmWork(Algorithm algorithm, Format format, std::size_t count, int ranks) {
  AlgorithmWork w;
  if (ranks <= 1 || count == 0) return w;
  const double p = ranks;
  const int log2q = floorLog2(ranks);
  const double q = static_cast<double>(1 << log2q);
  const bool prePost = (1 << log2q) != ranks;
  const double n = static_cast<double>(count);
  auto bytesOf = [&](double elements) {
    return static_cast<double>(encodedBytes(format, static_cast<std::size_t>(std::ceil(elements))));
  };
  const double c = std::ceil(n / p);
  switch (algorithm) {
    case Algorithm::kNative:
    case Algorithm::kRing:
    case Algorithm::kTwoShot:
      w.steps = 2 * (p - 1);
      w.sentBytes = 2 * (p - 1) * (algorithm == Algorithm::kNative ? 4 * c : bytesOf(c));
      w.encodeElements = algorithm == Algorithm::kNative ? 0 : p * c;
      w.decodeAddElements = (p - 1) * c;
      w.decodeElements = algorithm == Algorithm::kNative ? 0 : p * c;
      return w;
    case Algorithm::kRabenseifner: {
      const double cq = std::ceil(n / q);
      w.steps = 2 * log2q + (prePost ? 2 : 0);
      w.sentBytes = 2 * (q - 1) * bytesOf(cq) + (prePost ? bytesOf(n) : 0);
      w.encodeElements = q * cq + (prePost ? n : 0);
      w.decodeAddElements = (q - 1) * cq + (prePost ? n : 0);
      w.decodeElements = q * cq;
      return w;
    }
    case Algorithm::kRecursiveDoubling:
      w.steps = log2q + (prePost ? 2 : 0);
      w.sentBytes = log2q * bytesOf(n) + (prePost ? bytesOf(n) : 0);
      w.encodeElements = log2q * n + (prePost ? 2 * n : 0);
      w.decodeElements = 2 * log2q * n;
      w.decodeAddElements = prePost ? n : 0;
      return w;
    case Algorithm::kHierarchical:
    case Algorithm::kAuto: break;
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument, "algorithmWork has no flat work for " << algorithmName(algorithm));
}

}  // namespace detail
}  // namespace adaprec
