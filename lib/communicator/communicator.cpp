// Communicator: agreement check, in-place/out-of-place handling, algorithm selection, error-feedback
// state per key, averaging and stats around the stateless algorithms of lib/algorithm.
#include "adaprec/communicator.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <utility>
#include <optional>
#include <set>
#include <string>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/auto_selector.hpp"
#include "algorithm/device_codec.hpp"
#include "codec/host_kernels.hpp"
#include "communicator/fast_clock.hpp"
#include "communicator/signature_hash.hpp"
#include "communicator/timeline.hpp"
#include "config/environment_variables.hpp"
#include "transport/internal_tags.hpp"

namespace adaprec {
namespace {

// Error-feedback state layout (see Communicator::saveErrorFeedback).
constexpr char kFeedbackMagic[8] = {'A', 'D', 'A', 'P', 'R', 'E', 'F', 'B'};
constexpr std::uint32_t kFeedbackVersion = 1;

class FeedbackWriter {
 public:
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  void uint(std::uint64_t v, int width) {
    for (int i = 0; i < width; ++i) bytes.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
  }
  std::vector<std::byte> bytes;
};

// Every read is bounds-checked against what is left, so no length field can make it read past the end
// or allocate more than the input could hold.
class FeedbackReader {
 public:
  explicit FeedbackReader(std::span<const std::byte> b) : b_(b) {}
  std::size_t left() const { return b_.size() - at_; }
  void need(std::uint64_t n, const char* what) const {
    ADAPREC_CHECK(n <= left(), ErrorCode::kMalformedInput,
                  "error-feedback state is truncated: " << what << " needs " << n << " bytes at offset " << at_
                                                        << ", " << left() << " left");
  }
  std::uint64_t uint(int width, const char* what) {
    need(static_cast<std::uint64_t>(width), what);
    std::uint64_t v = 0;
    for (int i = 0; i < width; ++i) v |= static_cast<std::uint64_t>(b_[at_ + i]) << (8 * i);
    at_ += static_cast<std::size_t>(width);
    return v;
  }
  std::span<const std::byte> raw(std::uint64_t n, const char* what) {
    need(n, what);
    auto out = b_.subspan(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return out;
  }

 private:
  std::span<const std::byte> b_;
  std::size_t at_ = 0;
};

}  // namespace

struct Communicator::Impl {
  struct Feedback {
    std::size_t count = 0;
    Algorithm algorithm = Algorithm::kAuto;
    detail::Residuals residuals;
  };

  std::shared_ptr<Transport> transport;
  // Where allreduce's buffers live (setDevice); null: host memory. Declared before the state that
  // holds its memory (feedback's residuals), so it outlives it.
  std::shared_ptr<detail::DeviceCodec> device;
  int nodes = 1;
  int maxRanksPerNode = 1;
  int minRanksPerNode = 1;
  std::size_t segmentCount = detail::kDefaultSegmentCount;
  // Largest message to another node (CommunicatorOptions::interNodeMessageBytes, else the transport's).
  std::size_t messageBytes = 0;
  std::unique_ptr<detail::Hierarchy> hierarchy;
  detail::Workspace workspace;
  std::map<std::string, Feedback, std::less<>> feedback;
  // Selection::kFastest's choice per (count, requested algorithm): measured with that algorithm, so a
  // choice made for one algorithm (auto running native at a small size: noise) is not another's.
  std::map<std::pair<std::size_t, Algorithm>, Format> fastestChoices;
  AllreduceStats totals;
  std::shared_ptr<detail::Timeline> timeline;  // null: no timeline
  // The failure that broke this communicator (empty: none). A call that failed in the transport, on a
  // damaged message or a broken invariant may leave messages in flight; the next call would read them
  // as its own (a timed-out call's late messages gave one rank a wrong sum and success, 3 runs of 3),
  // so every later call is refused instead. Caller errors (kInvalidArgument, kMismatch from the
  // agreement, kUnsupported) leave nothing behind and do not break it.
  std::string brokenBy;
  std::unique_ptr<detail::AutoSelector> autoSelector;  // auto's calibration and choices

  detail::Hierarchy& ensureHierarchy() {
    if (!hierarchy) {
      // Collective: every rank resolves kHierarchical for the same call.
      auto h = std::make_unique<detail::Hierarchy>();
      const int r = transport->rank();
      h->intra = transport->split(transport->nodeId(), r);
      h->peers = transport->split(h->intra->rank(), r);
      h->lanes = minRanksPerNode;
      hierarchy = std::move(h);
    }
    return *hierarchy;
  }

  // The device allreduce's buffers live on; null where they are host memory (no device, or a
  // DeviceCodec of host memory).
  detail::DeviceCodec* bufferDevice() const { return device && !device->hostMemory() ? device.get() : nullptr; }
  // Where a call's buffers live, for auto's model (a device's codec and staging cost differ from the
  // host's); `input` is the call's input for a device probe to code (null: the probe uploads its own).
  detail::DevicePlace placeOf(const float* input, std::size_t count) const {
    detail::DeviceCodec* d = bufferDevice();
    if (d == nullptr) return {};
    return {d, detail::deviceDirect(*transport, d), input, input != nullptr ? count : 0};
  }
  // auto's agreement of a call that consults the model (not a guard case): the call itself and the
  // memory space, so that a device probe, and the model's choice, happen on every rank or on none.
  void agreeAutoCall(std::size_t count, Format format, Algorithm requested, bool average, bool errorFeedback) {
    detail::DeviceCodec* d = bufferDevice();
    checkAgreement(count, static_cast<std::uint64_t>(format), formatName(format), requested, average, errorFeedback,
                   d != nullptr ? d->memorySpace() : "host");
  }

  // All ranks must agree on everything that shapes the message schedule; a mismatch becomes
  // Error(kMismatch) on every rank before any data moves. formatWord identifies the format (its id, or
  // a hash of the whole spec when the check runs before "fastest" is resolved).
  // memory: where the buffers live ("host", a device's memory space), agreed where the choice depends
  // on it (auto); empty: not part of the signature.
  void checkAgreement(std::size_t count, std::uint64_t formatWord, std::string_view formatText,
                      Algorithm algorithm, bool average, bool errorFeedback, std::string_view memory = {}) {
    std::uint64_t signature = detail::signatureOf(0, count, formatWord, static_cast<std::uint64_t>(algorithm),
                                                 average, errorFeedback);
    if (!memory.empty()) signature ^= detail::hashSignatureText(memory);
    std::uint64_t values[2] = {signature, ~signature};
    if (timeline) {
      const std::uint64_t start = detail::fastClockTicks();
      transport->allreduceMax(values, 2);
      timeline->span(detail::Timeline::Kind::kAgreement, start, detail::fastClockTicks());
    } else {
      transport->allreduceMax(values, 2);
    }
    ADAPREC_CHECK(values[0] == signature && values[1] == ~signature, ErrorCode::kMismatch,
                  "ranks disagree on the allreduce (this rank: count=" << count << " format=" << formatText
                      << " algorithm=" << algorithmName(algorithm) << " average=" << average
                      << " errorFeedback=" << errorFeedback << (memory.empty() ? "" : " memory=")
                      << memory << ")");
  }
};

Communicator::Communicator(std::shared_ptr<Transport> transport, const CommunicatorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  ADAPREC_CHECK_ARG(transport != nullptr, "Communicator needs a transport");
  ADAPREC_CHECK_ARG(options.timeoutSeconds >= 0 && options.timeoutSeconds <= 1e6,
                    "CommunicatorOptions::timeoutSeconds " << options.timeoutSeconds
                                                           << " is invalid; valid values: 0 to 1e6");
  if (options.timeoutSeconds > 0)
    transport->setTimeout(std::chrono::milliseconds(
        std::max<std::int64_t>(1, std::llround(options.timeoutSeconds * 1000))));
  impl_->transport = options.checksum ? makeChecksumTransport(std::move(transport)) : std::move(transport);
  impl_->segmentCount = options.segmentCount;
  impl_->totals.calls = 0;
  detail::fastClockSecondsPerTick();  // calibrate now, not inside the first allreduce
  // Local validation first; its failure is reported through the agreement round below, so a rank
  // with a bad setting does not leave the others waiting in it.
  std::optional<Error> localError;
  int ranksPerNode = 0;
  try {
    const detail::EnvironmentVariable& segment = detail::environmentVariable(detail::kEnvSegmentCount);
    ADAPREC_CHECK_ARG(options.segmentCount >= segment.min && options.segmentCount <= segment.max,
                      "CommunicatorOptions::segmentCount " << options.segmentCount << " is invalid; valid values: "
                                                           << segment.valid);
    const detail::EnvironmentVariable& budget = detail::environmentVariable(detail::kEnvMaxQuantizations);
    ADAPREC_CHECK_ARG(options.maxQuantizations >= static_cast<int>(budget.min) &&
                          options.maxQuantizations <= static_cast<int>(budget.max),
                      "CommunicatorOptions::maxQuantizations " << options.maxQuantizations
                                                               << " is invalid; valid values: " << budget.valid);
    if (options.interNodeMessageBytes) {
      ADAPREC_CHECK_ARG(detail::validMessageBytes(*options.interNodeMessageBytes),
                        "CommunicatorOptions::interNodeMessageBytes " << *options.interNodeMessageBytes
                                                                      << " is invalid; valid values: "
                                                                      << detail::environmentVariable(detail::kEnvMessageBytes).valid);
    }
    codec::hostKernels();  // ADAPREC_CPU_ISA is refused now, not at the first encode
    ranksPerNode = detail::ranksPerNodeOverride();
    if (!options.timelinePath.empty())
      // Named by the rank in the job: communicators over sub-communicators of different processes
      // share rank numbers, and two processes writing one file lost each other's events.
      impl_->timeline = detail::Timeline::open(options.timelinePath, impl_->transport->jobRank());
  } catch (const Error& e) {
    localError = e;
  }
  // Node layout (collective): node id + 1 of every rank, gathered with an element-wise max; then the
  // settings that shape every message (a mismatch would hang or mis-decode), and the lowest rank whose
  // local validation failed (as p - rank, so 0 means none).
  const int p = impl_->transport->size();
  const int r = impl_->transport->rank();
  impl_->messageBytes = options.interNodeMessageBytes.value_or(impl_->transport->interNodeMessageBytes());
  // Whether a timeout is set must agree (its value need not): with one, every call ends with a
  // completion vote, which a rank without one never joins (the others then timed out naming it).
  const bool timeoutSet = options.timeoutSeconds > 0;
  const std::uint64_t settings = detail::signatureOf(1, options.segmentCount, ranksPerNode, options.checksum,
                                                     options.maxQuantizations, impl_->messageBytes, timeoutSet);
  std::vector<std::uint64_t> ids(static_cast<std::size_t>(p) + 3, 0);
  ids[static_cast<std::size_t>(r)] = static_cast<std::uint64_t>(impl_->transport->nodeId()) + 1;
  ids[static_cast<std::size_t>(p)] = localError ? 0 : settings;
  ids[static_cast<std::size_t>(p) + 1] = localError ? 0 : ~settings;
  ids[static_cast<std::size_t>(p) + 2] = localError ? static_cast<std::uint64_t>(p - r) : 0;
  impl_->transport->allreduceMax(ids.data(), ids.size());
  if (localError) throw *localError;
  ADAPREC_CHECK(ids[static_cast<std::size_t>(p) + 2] == 0, ErrorCode::kMismatch,
                "rank " << p - static_cast<int>(ids[static_cast<std::size_t>(p) + 2])
                        << " refused its communicator settings (see its error); no communicator was made");
  ADAPREC_CHECK(ids[static_cast<std::size_t>(p)] == settings && ids[static_cast<std::size_t>(p) + 1] == ~settings,
                ErrorCode::kMismatch,
                "ranks disagree on the communicator's settings (this rank: "
                    << detail::kEnvSegmentCount << '=' << options.segmentCount << ' ' << detail::kEnvRanksPerNodeName
                    << '=' << ranksPerNode << ' ' << detail::kEnvChecksum << '=' << (options.checksum ? 1 : 0) << ' '
                    << detail::kEnvMaxQuantizations << '=' << options.maxQuantizations << ' '
                    << detail::kEnvMessageBytes << '=' << impl_->messageBytes << ' ' << detail::kEnvTimeout << '='
                    << (timeoutSet ? "set" : "0") << "); set the same values on every rank (" << detail::kEnvTimeout
                    << ": set on every rank or on none)");
  ids.resize(static_cast<std::size_t>(p));
  std::map<std::uint64_t, int> perNode;
  for (std::uint64_t id : ids) ++perNode[id];
  impl_->nodes = static_cast<int>(perNode.size());
  for (const auto& [id, n] : perNode) impl_->maxRanksPerNode = std::max(impl_->maxRanksPerNode, n);
  impl_->minRanksPerNode = impl_->maxRanksPerNode;
  for (const auto& [id, n] : perNode) impl_->minRanksPerNode = std::min(impl_->minRanksPerNode, n);
  detail::RankLayout layout;  // node index per rank, in order of first appearance
  std::map<std::uint64_t, int> nodeIndex;
  for (std::uint64_t id : ids) layout.nodeOf.push_back(nodeIndex.emplace(id, static_cast<int>(nodeIndex.size())).first->second);
  impl_->autoSelector = std::make_unique<detail::AutoSelector>(
      std::move(layout), detail::AutoSettings{options.maxQuantizations, options.calibrationPath, options.debug,
                                                    interNodeMessageBytes(), options.segmentCount});
}

Communicator::~Communicator() {
  if (impl_ && impl_->timeline) impl_->timeline->flush();
}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

void Communicator::setDevice(std::shared_ptr<detail::DeviceCodec> device) {
  impl_->device = std::move(device);  // residuals move to it on their next use
}

int Communicator::rank() const { return impl_->transport->rank(); }
int Communicator::size() const { return impl_->transport->size(); }
Transport& Communicator::transport() { return *impl_->transport; }
std::size_t Communicator::interNodeMessageBytes() const { return impl_->nodes > 1 ? impl_->messageBytes : 0; }
const AllreduceStats& Communicator::totals() const { return impl_->totals; }

void Communicator::resetErrorFeedback() { impl_->feedback.clear(); }

void Communicator::resetErrorFeedback(std::string_view key) {
  auto it = impl_->feedback.find(key);
  if (it != impl_->feedback.end()) impl_->feedback.erase(it);
}

std::vector<std::byte> Communicator::saveErrorFeedback() const {
  FeedbackWriter w;
  w.raw(kFeedbackMagic, sizeof kFeedbackMagic);
  w.uint(kFeedbackVersion, 4);
  w.uint(impl_->feedback.size(), 4);
  for (const auto& [key, state] : impl_->feedback) {
    w.uint(key.size(), 4);
    w.raw(key.data(), key.size());
    w.uint(state.count, 8);
    w.uint(static_cast<std::uint8_t>(state.algorithm), 1);
    const auto& slots = state.residuals.slots();
    w.uint(slots.size(), 4);
    for (const std::vector<float>& slot : slots) {
      w.uint(slot.size(), 8);
      for (float v : slot) w.uint(std::bit_cast<std::uint32_t>(v), 4);
    }
  }
  return std::move(w.bytes);
}

void Communicator::loadErrorFeedback(std::span<const std::byte> bytes) {
  FeedbackReader r(bytes);
  const auto magic = r.raw(sizeof kFeedbackMagic, "the magic");
  ADAPREC_CHECK(std::memcmp(magic.data(), kFeedbackMagic, sizeof kFeedbackMagic) == 0,
                ErrorCode::kMalformedInput, "not an AdaPrec error-feedback state (bad magic)");
  const std::uint64_t version = r.uint(4, "the version");
  ADAPREC_CHECK(version == kFeedbackVersion, ErrorCode::kMalformedInput,
                "error-feedback state has version " << version << ", this build reads " << kFeedbackVersion);
  const std::uint64_t keys = r.uint(4, "the key count");
  // Parsed into a new map and swapped in at the end: a malformed input leaves the state unchanged.
  std::map<std::string, Impl::Feedback, std::less<>> loaded;
  for (std::uint64_t k = 0; k < keys; ++k) {
    const std::uint64_t keyBytes = r.uint(4, "a key length");
    const auto keyText = r.raw(keyBytes, "a key");
    std::string key(reinterpret_cast<const char*>(keyText.data()), keyText.size());
    ADAPREC_CHECK(!key.empty() && loaded.count(key) == 0, ErrorCode::kMalformedInput,
                  "error-feedback state has an empty or repeated key '" << key << "'");
    Impl::Feedback state;
    const std::uint64_t count = r.uint(8, "a count");
    const std::uint64_t algorithm = r.uint(1, "an algorithm");
    bool known = false;
    for (Algorithm a : allAlgorithms()) {
      known = known || (a != Algorithm::kAuto && static_cast<std::uint64_t>(a) == algorithm);
    }
    ADAPREC_CHECK(known, ErrorCode::kMalformedInput,
                  "error-feedback state of key '" << key << "' names algorithm " << algorithm);
    state.count = static_cast<std::size_t>(count);
    state.algorithm = static_cast<Algorithm>(algorithm);
    const std::uint64_t slotCount = r.uint(4, "a slot count");
    r.need(slotCount * 8, "the slots");  // every slot has at least its length: bounds the allocation
    std::vector<std::vector<float>> slots(static_cast<std::size_t>(slotCount));
    for (std::vector<float>& slot : slots) {
      const std::uint64_t floats = r.uint(8, "a slot length");
      ADAPREC_CHECK(floats == 0 || floats == count, ErrorCode::kMalformedInput,
                    "error-feedback state of key '" << key << "' has a slot of " << floats
                                                    << " floats for count " << count);
      // Checked before the multiplication by 4 can overflow and before allocating.
      ADAPREC_CHECK(floats <= r.left() / 4, ErrorCode::kMalformedInput,
                    "error-feedback state is truncated in key '" << key << "'");
      slot.resize(static_cast<std::size_t>(floats));
      for (float& v : slot) v = std::bit_cast<float>(static_cast<std::uint32_t>(r.uint(4, "a residual")));
    }
    state.residuals.setSlots(std::move(slots));
    loaded.emplace(std::move(key), std::move(state));
  }
  ADAPREC_CHECK(r.left() == 0, ErrorCode::kMalformedInput,
                "error-feedback state has " << r.left() << " trailing bytes");
  impl_->feedback = std::move(loaded);
}

std::optional<ErrorFeedbackState> Communicator::errorFeedback(std::string_view key) const {
  auto it = impl_->feedback.find(key);
  if (it == impl_->feedback.end()) return std::nullopt;
  return ErrorFeedbackState{it->second.count, it->second.algorithm, it->second.residuals.slots()};
}

void Communicator::setErrorFeedback(std::string_view key, ErrorFeedbackState state) {
  ADAPREC_CHECK_ARG(!key.empty(), "error-feedback key must not be empty");
  ADAPREC_CHECK_ARG(state.algorithm != Algorithm::kAuto,
                    "error-feedback state of key '" << key << "' needs a resolved algorithm, not auto");
  ADAPREC_CHECK_ARG(state.slots.size() <= ErrorFeedbackState::kMaxSlots,
                    "error-feedback state of key '" << key << "' has " << state.slots.size() << " slots (at most "
                                                    << ErrorFeedbackState::kMaxSlots << ")");
  for (const std::vector<float>& slot : state.slots) {
    ADAPREC_CHECK_ARG(slot.empty() || slot.size() == state.count,
                      "error-feedback state of key '" << key << "' has a slot of " << slot.size()
                                                      << " floats for count " << state.count);
  }
  Impl::Feedback feedback;
  feedback.count = state.count;
  feedback.algorithm = state.algorithm;
  feedback.residuals.setSlots(std::move(state.slots));
  impl_->feedback.insert_or_assign(std::string(key), std::move(feedback));
}

std::vector<Format> Communicator::fastestCandidates() {
  // tableNz moves the same bytes as tableN: probing it too would only double those probes.
  std::vector<Format> candidates;
  for (Format format : allFormats()) {
    if (!hasZeroCode(format)) candidates.push_back(format);
  }
  return candidates;
}

Algorithm Communicator::resolveAlgorithm(Algorithm requested, Format format, std::size_t count) const {
  if (requested != Algorithm::kAuto) return requested;
  // For the buffers allreduce would get: on a communicator with a device, device buffers (their own
  // size classes, trials and device costs), agreed like allreduce's auto calls.
  const detail::DevicePlace place = impl_->placeOf(nullptr, count);
  if (!detail::autoGuard(format, count, size(), impl_->nodes, place.device != nullptr))
    impl_->agreeAutoCall(count, format, requested, false, false);
  return impl_->autoSelector->choose(*impl_->transport, format, count, place);
}

AllreduceStats Communicator::allreduce(float* buf, std::size_t count,
                                       const AllreduceOptions& options) {
  return allreduce(buf, buf, count, options);
}

// A function-try-block: whatever makes the call fail (a timeout, a damaged message, ranks that
// disagree) is recorded on the timeline and written out before the error leaves, since the program
// usually ends on it (MPI's fatal error handler, an uncaught exception) and would lose the buffered
// events that show what led there.
AllreduceStats Communicator::allreduce(const float* send, float* recv, std::size_t count,
                                       const AllreduceOptions& options) try {
  const std::uint64_t start = detail::fastClockTicks();
  ADAPREC_CHECK(impl_->brokenBy.empty(), ErrorCode::kTransport,
                "this communicator cannot be reused after its failed allreduce (" << impl_->brokenBy
                    << "): messages of that call may still be in flight and would be read as this call's; "
                       "destroy it and make a new one (C API, LD_PRELOAD and Python's per-communicator cache: "
                       "free the MPI communicator, which frees AdaPrec's with it, and reduce on a new one)");
  ADAPREC_CHECK_ARG(options.format.selection != Selection::kAdaptive,
                    "format 'adaptive' is chosen by the trainer's controller, not by allreduce");
  ADAPREC_CHECK_ARG(count == 0 || (send != nullptr && recv != nullptr), "null buffer for " << count
                                                                              << " elements");
  ADAPREC_CHECK_ARG(!options.format.errorFeedback || !options.key.empty(),
                    "error feedback (+ef) needs AllreduceOptions::key to name the tensor");
  if (options.checkEveryPath) {
    // Before anything collective (fastest's probes, the native MPI_Allreduce): the request itself.
    const std::string spec = toString(options.format);
    impl_->checkAgreement(count, detail::hashSignatureText(spec), spec, options.algorithm, options.average,
                          options.format.errorFeedback);
  }
  Format format = options.format.format;
  if (options.format.selection == Selection::kFastest) {
    auto it = impl_->fastestChoices.find({count, options.algorithm});
    if (it == impl_->fastestChoices.end()) {
      const std::vector<Format> candidates = fastestCandidates();
      const std::size_t counts[1] = {count};
      FastestOptions fastest;
      fastest.algorithm = options.algorithm;
      const LayerChoice choice = chooseFastest(counts, candidates, fastest).front();
      it = impl_->fastestChoices.emplace(std::make_pair(count, options.algorithm), choice.format).first;
    }
    format = it->second;
  }
  // auto: the guard cases (small, fp32 on one node) need nothing collective; the model may run
  // the calibration probe, so the call is agreed first (ranks that disagree on the count must get
  // kMismatch, not a probe that only some of them enter).
  bool agreed = options.checkEveryPath;
  Algorithm algorithm = options.algorithm;
  bool autoTrial = false;  // this call is one of auto's measured trial calls (AutoSelector::nextCall)
  const Format requestedFormat = format;
  detail::DeviceCodec* device = impl_->bufferDevice();
  const detail::DevicePlace place = impl_->placeOf(send, count);
  if (algorithm == Algorithm::kAuto) {
    if (!detail::autoGuard(format, count, size(), impl_->nodes, device != nullptr)) {
      // Always, even after checkEveryPath's round: the memory space is agreed with the call.
      impl_->agreeAutoCall(count, format, options.algorithm, options.average, options.format.errorFeedback);
      agreed = true;
    }
    const detail::AutoCall call = impl_->autoSelector->nextCall(*impl_->transport, format, count, place);
    algorithm = call.algorithm;
    autoTrial = call.trial;
  }
  // A trial call is timed from here, after auto's own work (a calibration probe, the agreement), and
  // from a common start: without it a rank's time would include waiting for the last to arrive.
  std::uint64_t trialStart = 0;
  if (autoTrial) {
    impl_->transport->barrier();
    trialStart = detail::fastClockTicks();
  }
  if (algorithm == Algorithm::kNative && options.algorithm == Algorithm::kAuto) {
    // auto fell back to uncompressed: compression cannot pay here, and native's 16-bit user op
    // (bf16/fp16) is many times slower than MPI's own fp32 sum on fast links.
    format = Format::kFp32;
  }
  ADAPREC_CHECK(algorithm != Algorithm::kNative || detail::nativeSupports(format),
                ErrorCode::kUnsupported,
                "algorithm native carries " << detail::nativeFormatNames() << ", not " << formatName(format));
  const bool feedback = options.format.errorFeedback && !isLossless(format);

  // The native path keeps MPI's own cost and semantics (no extra round trip for tiny messages) unless
  // checkEveryPath asked for the check above.
  if (algorithm != Algorithm::kNative && !agreed)
    impl_->checkAgreement(count, static_cast<std::uint64_t>(format), formatName(format), options.algorithm,
                          options.average, options.format.errorFeedback);

  auto finish = [&](AllreduceStats& stats) {
    if (options.average && size() > 1) {
      const float ranks = static_cast<float>(size());
      if (device != nullptr) {
        device->divide(recv, count, ranks);
      } else {
        for (std::size_t i = 0; i < count; ++i) recv[i] /= ranks;
      }
    }
    if (device != nullptr) device->synchronize();  // the result is in recv when allreduce returns
    const std::uint64_t end = detail::fastClockTicks();
    stats.totalSeconds = detail::fastClockSeconds(start, end);
    impl_->totals += stats;
    if (impl_->timeline) impl_->timeline->call(start, end, stats);
    if (autoTrial)
      impl_->autoSelector->recordTrial(*impl_->transport, requestedFormat, count,
                                       detail::fastClockSeconds(trialStart, end), place);
  };
  AllreduceStats stats;
  stats.algorithm = algorithm;
  stats.format = format;
  stats.count = count;
  // Device memory the transport takes as it is (CUDA-aware MPI, NCCL): encoded messages stay on the
  // device too (the workspace), and nothing queued may be pending when a buffer is handed over.
  const bool direct = place.direct;
  impl_->workspace.use(device, direct);
  if (algorithm == Algorithm::kNative && format == Format::kFp32 && (device == nullptr || direct)) {
    // The baseline path: one MPI_Allreduce with the caller's buffers, nothing else.
    if (direct) device->synchronize();
    impl_->transport->nativeAllreduceOutOfPlace(send, recv, count, NativeType::kFp32);
    const int p = size();
    const std::size_t moved = p > 1 ? 2 * static_cast<std::size_t>(p - 1) * count / p : 0;
    stats.wireBytes = stats.fp32Bytes = moved * sizeof(float);
    finish(stats);
    return stats;
  }
  // An algorithm that reads its input where it is (algorithmReadsInput) is spared the copy of the
  // whole send buffer into recv; it must be host memory, and not overlap recv (an erroneous call that
  // memmove still serves as before).
  const auto address = [](const float* p) { return reinterpret_cast<std::uintptr_t>(p); };
  const bool outOfPlace = send != recv && count != 0;
  const bool disjoint = address(send + count) <= address(recv) || address(recv + count) <= address(send);
  const bool readsInput = outOfPlace && disjoint && device == nullptr && detail::algorithmReadsInput(algorithm);
  if (outOfPlace && !readsInput) {
    if (device != nullptr) {
      device->copyOnDevice(recv, send, count * sizeof(float));
      if (direct) device->synchronize();  // recv may go to the transport first thing
    } else {
      std::memmove(recv, send, count * sizeof(float));
    }
  }
  detail::Residuals* residuals = nullptr;
  if (feedback) {
    auto it = impl_->feedback.find(options.key);
    if (it == impl_->feedback.end()) it = impl_->feedback.emplace(options.key, Impl::Feedback{}).first;
    Impl::Feedback& state = it->second;
    if (state.count != count || state.algorithm != algorithm) {
      state.residuals.clear();
      state.count = count;
      state.algorithm = algorithm;
    }
    state.residuals.useDevice(device);
    residuals = &state.residuals;
  }
  detail::AlgorithmContext ctx{*impl_->transport, format, residuals, stats, impl_->segmentCount,
                               impl_->workspace};
  ctx.timeline = impl_->timeline.get();
  ctx.device = device;
  ctx.messageBytes = interNodeMessageBytes();
  if (readsInput) ctx.input = send;
  if (algorithm == Algorithm::kHierarchical) {
    ctx.hierarchy = &impl_->ensureHierarchy();
    ctx.innerAlgorithm = detail::hierarchicalInnerAlgorithm(impl_->nodes);
  }
  detail::runAlgorithm(algorithm, ctx, recv, count);
  if (residuals != nullptr) residuals->forgetWhereResultNotFinite(recv, count);

  finish(stats);
  return stats;
} catch (const Error& e) {
  if (impl_ && impl_->timeline) impl_->timeline->failure(errorCodeName(e.code()), e.what(), count);
  const bool leavesMessages = e.code() == ErrorCode::kTransport || e.code() == ErrorCode::kMalformedInput ||
                              e.code() == ErrorCode::kInternal || e.code() == ErrorCode::kCuda;
  if (impl_ && leavesMessages && impl_->brokenBy.empty()) {
    // Without the prefix and the check's file:line (but an internal error's).
    impl_->brokenBy = std::string(errorCodeName(e.code())) + ": " + messageForUsers(e);
  }
  throw;
}

std::vector<LayerChoice> Communicator::chooseFastest(std::span<const std::size_t> layerCounts,
                                                     std::span<const Format> candidates,
                                                     const FastestOptions& options) {
  ADAPREC_CHECK_ARG(!candidates.empty(), "chooseFastest needs at least one candidate format");
  ADAPREC_CHECK_ARG(options.repetitions >= 1 && options.warmup >= 0,
                    "chooseFastest: repetitions " << options.repetitions << " must be >= 1, warmup "
                                                  << options.warmup << " >= 0");
  // native carries only some formats: the others are not candidates there (`fastest` with
  // ADAPREC_ALGO=native picks among fp32, bf16 and fp16), and a list with none of them is refused.
  auto carried = [&](Format f) { return options.algorithm != Algorithm::kNative || detail::nativeSupports(f); };
  ADAPREC_CHECK_ARG(std::any_of(candidates.begin(), candidates.end(), carried),
                    "chooseFastest: algorithm native carries " << detail::nativeFormatNames()
                                                                << ", none of the candidate formats");
  const AllreduceStats savedTotals = impl_->totals;
  std::map<std::size_t, LayerChoice> measured;
  std::vector<float> scratch;
  // With buffers on a device the candidates are timed on device memory: scratch is copied up.
  detail::DeviceCodec* device = impl_->bufferDevice();
  std::optional<detail::DeviceScratch> deviceScratch;
  if (device != nullptr) deviceScratch.emplace(*device);
  auto onDevice = [&]() -> float* {
    if (device == nullptr) return scratch.data();
    auto* d = static_cast<float*>(deviceScratch->get(scratch.size() * sizeof(float)));
    device->copyToDevice(d, scratch.data(), scratch.size() * sizeof(float));
    device->synchronize();
    return d;
  };
  for (std::size_t count : layerCounts) {
    if (measured.count(count) != 0) continue;
    LayerChoice choice;
    choice.count = count;
    scratch.resize(count);
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (!carried(candidates[c])) {
        choice.candidateSeconds.push_back(std::numeric_limits<double>::infinity());
        continue;
      }
      AllreduceOptions opt;
      opt.format.format = candidates[c];
      opt.algorithm = options.algorithm;
      // Gradient-like data, different per rank, refilled before every run so sums never overflow.
      auto fill = [&] {
        std::uint32_t state = 0x9e3779b9u ^ static_cast<std::uint32_t>(rank() * 7919 + 1);
        for (float& v : scratch) {
          state = state * 1664525u + 1013904223u;
          v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.01f;
        }
      };
      // auto's trial calls (one native, then the engine algorithm's) are part of the warm-up: the
      // timed runs see what auto settled on.
      const bool autoRequested = opt.algorithm == Algorithm::kAuto;
      for (int w = 0; w < options.warmup || (autoRequested && impl_->autoSelector->inTrial(candidates[c], count));
           ++w) {
        fill();
        allreduce(onDevice(), count, opt);
      }
      std::vector<std::uint64_t> nanos(static_cast<std::size_t>(options.repetitions));
      for (int rep = 0; rep < options.repetitions; ++rep) {
        fill();
        const AllreduceStats s = allreduce(onDevice(), count, opt);
        nanos[static_cast<std::size_t>(rep)] = static_cast<std::uint64_t>(s.totalSeconds * 1e9);
      }
      // Every rank must decide the same: use the slowest rank's time of each repetition.
      impl_->transport->allreduceMax(nanos.data(), nanos.size());
      std::sort(nanos.begin(), nanos.end());
      const double seconds = static_cast<double>(nanos[nanos.size() / 2]) * 1e-9;
      choice.candidateSeconds.push_back(seconds);
      if (seconds < best) {  // the first carried candidate always (its time is finite)
        best = seconds;
        choice.format = candidates[c];
      }
    }
    choice.seconds = best;
    choice.algorithm = resolveAlgorithm(options.algorithm, choice.format, count);
    measured.emplace(count, choice);
  }
  impl_->totals = savedTotals;
  std::vector<LayerChoice> result;
  result.reserve(layerCounts.size());
  for (std::size_t count : layerCounts) result.push_back(measured.at(count));
  return result;
}

}  // namespace adaprec
