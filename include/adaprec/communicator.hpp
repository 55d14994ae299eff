// Communicator: the object users hold. Sum-allreduce of fp32 buffers where what travels between ranks
// is a compressed encoding and the sum itself is formed in fp32.
//
//   auto comm = adaprec::makeMpiCommunicator(MPI_COMM_WORLD);          // adaprec/communicator_mpi.hpp
//   adaprec::AllreduceOptions opt;
//   opt.format = adaprec::parseFormatSpec("table1+ef");
//   opt.average = true;
//   opt.key = "fc1.weight";                                             // error-feedback state per tensor
//   adaprec::AllreduceStats s = comm.allreduce(grad.data(), grad.size(), opt);
//
// Guarantees: every rank ends with bit-identical results (the owner of a chunk keeps the decoded value
// of what it sent); any rank count >= 1 and any count >= 0; for the compressed algorithms, ranks that
// disagree on count, format, algorithm, averaging or error feedback get Error(kMismatch) on every rank
// instead of a hang (the native path, auto's choice for fp32 and small messages, keeps MPI's own
// semantics and cost unless AllreduceOptions::checkEveryPath). Error bounds per format x algorithm are in docs/algorithms.md. A Communicator
// is used from one thread; construction is collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adaprec/format.hpp"
#include "adaprec/transport.hpp"

namespace adaprec {

namespace detail {
class DeviceCodec;  // lib/algorithm/device_codec.hpp
}

// Allreduce algorithms; names follow Open MPI's coll/base where one exists. docs/algorithms.md gives
// each one's steps, bytes per rank and number of quantizations per value.
enum class Algorithm : std::uint8_t {
  kAuto = 0,               // chosen by the cost model within an error budget (resolveAlgorithm)
  kNative = 1,             // the transport's own uncompressed allreduce (MPI_Allreduce); fp32/bf16/fp16
  kRing = 2,               // ring reduce-scatter + ring allgather
  kTwoShot = 3,            // direct reduce-scatter + direct allgather: at most 2 quantizations per value
  kRabenseifner = 4,       // recursive-halving reduce-scatter + recursive-doubling allgather
  kRecursiveDoubling = 5,  // full-vector exchange, log2(p) rounds: small messages
  kHierarchical = 6,       // fp32 reduce in each node, compressed allreduce among node leaders, bcast
};

// Every algorithm in canonical order, kAuto first.
std::span<const Algorithm> allAlgorithms();
std::string_view algorithmName(Algorithm algorithm);
std::optional<Algorithm> tryParseAlgorithm(std::string_view name);
// Throws Error(kInvalidArgument) listing the valid names.
Algorithm parseAlgorithm(std::string_view name);
std::string validAlgorithmNames();

// Environment variables read by EnvironmentConfig (the C API and the preload library use them). The
// declaration of every ADAPREC_* variable (valid values, default, meaning) is one table in the library;
// `adaprec-codec env` prints it and docs/cluster.md lists it.
inline constexpr const char* kEnvFormat = "ADAPREC_FORMAT";        // format spec; default fp32
inline constexpr const char* kEnvAlgo = "ADAPREC_ALGO";            // algorithm name; default auto
inline constexpr const char* kEnvMinBytes = "ADAPREC_MIN_BYTES";   // smaller messages pass through
inline constexpr const char* kEnvStats = "ADAPREC_STATS";          // 1: print totals at finalize
inline constexpr const char* kEnvRanksPerNode = "ADAPREC_RANKS_PER_NODE";  // emulate nodes
inline constexpr std::size_t kDefaultMinBytes = 65536;
inline constexpr std::size_t kDefaultSegmentCount = std::size_t{1} << 18;  // 1 MiB of fp32
// auto's default error budget: at most this many quantizations per value for lossy formats.
inline constexpr int kDefaultMaxQuantizations = 2;
// Where auto's cost model picks a compressed (engine) algorithm over native, the first calls of each
// (format, size class) are a measured trial: MPI_Allreduce and the engine algorithm in turn, native
// first, kAutoTrialCalls in all; every later call of that size class runs the one whose best call was
// faster, by the slowest rank's time (docs/algorithms.md, "auto"). Benchmarks warm auto up for this
// many calls.
inline constexpr int kAutoTrialCalls = 4;

// What a Communicator is built with. Every rank must pass the same segmentCount and checksum (the
// constructor checks, and refuses a mismatch with Error(kMismatch) on every rank); timeoutSeconds may
// differ per rank.
struct CommunicatorOptions {
  std::size_t segmentCount = kDefaultSegmentCount;  // elements per pipelined segment, 256 .. 2^28
  // CRC32C over every message between ranks, with its sequence number (makeChecksumTransport): payload
  // corruption and reordered or lost messages become Error(kTransport) instead of a wrong sum. The
  // native path (MPI_Allreduce) is not covered.
  bool checksum = false;
  // > 0: a wait for a peer longer than this throws Error(kTransport) naming the peer, and every
  // allreduce ends with a completion vote, so a failure any rank sees is an error on every rank
  // (Transport::setTimeout; one more small message round per call). 0: wait forever.
  double timeoutSeconds = 0;
  // Non-empty: write a timeline of every allreduce (Chrome Trace Event Format, docs/timeline.md) to
  // timelinePath + ".rank<N>.json", N = this communicator's rank. May differ per rank. Empty: off.
  std::string timelinePath;
  // auto's error budget: for lossy formats it only picks algorithms that quantize each value at most
  // this many times (docs/algorithms.md, column Q); lossless fp32 may use any. Every rank must pass
  // the same value (checked like segmentCount). 1 .. 64.
  int maxQuantizations = kDefaultMaxQuantizations;
  // Non-empty: auto's calibration is loaded from this file when it holds one for this topology, else
  // probed and written there (docs/algorithms.md, "Calibration"). May differ per rank.
  std::string calibrationPath;
  // Rank 0 prints auto's calibration and each choice with its predicted times to stderr, once per
  // format and size class.
  bool debug = false;
  // Largest message the algorithms send to a rank on another node, in bytes; 0: whole segments and
  // ranges. Unset: the transport's (Transport::interNodeMessageBytes: MPI 48 KiB, under Open MPI's TCP
  // eager limit; NCCL 0). For MPI over another network (InfiniBand's eager and rendezvous limits differ
  // from TCP's) a cluster may do better with another size. Every rank must pass the same value
  // (checked like segmentCount). 0 or 1024 .. 2^30.
  std::optional<std::size_t> interNodeMessageBytes;

  // ADAPREC_SEGMENT_COUNT, ADAPREC_CHECKSUM, ADAPREC_TIMEOUT, ADAPREC_TIMELINE, ADAPREC_MAX_QUANTIZATIONS,
  // ADAPREC_CALIBRATION, ADAPREC_DEBUG, ADAPREC_MESSAGE_BYTES; unset or empty keeps the default, an
  // invalid value throws Error(kInvalidArgument) with one line naming the variable and valid values.
  static CommunicatorOptions fromEnvironment();
};

struct EnvironmentConfig {
  FormatSpec format;                       // ADAPREC_FORMAT
  Algorithm algorithm = Algorithm::kAuto;  // ADAPREC_ALGO
  std::size_t minBytes = kDefaultMinBytes; // ADAPREC_MIN_BYTES (decimal bytes)
  bool stats = false;                      // ADAPREC_STATS (0 or 1)
  int ranksPerNode = 0;                    // ADAPREC_RANKS_PER_NODE; 0: the real node layout
  CommunicatorOptions communicator;        // ADAPREC_SEGMENT_COUNT, ADAPREC_CHECKSUM, ADAPREC_TIMEOUT

  // Reads every ADAPREC_* variable the library knows (ADAPREC_CPU_ISA too: validated, and refused when
  // this CPU lacks the ISA); an unset or empty variable keeps its default. An invalid value throws
  // Error(kInvalidArgument) whose message is one line naming the variable and the valid values.
  static EnvironmentConfig fromEnvironment();
  // The settings every rank must share, as "ADAPREC_FORMAT=fp8s ADAPREC_ALGO=auto ..." (for the
  // agreement check and its message).
  std::string agreedSettings() const;
};

struct AllreduceOptions {
  // A fixed wire format, optionally with error feedback ("table1+ef"). Selection::kFastest picks, per
  // distinct count and requested algorithm, the fastest format of fastestCandidates() measured on this
  // communicator with that algorithm (once, collectively, then cached). Selection::kAdaptive is the controller's job: rejected here.
  FormatSpec format;
  Algorithm algorithm = Algorithm::kAuto;
  bool average = false;  // divide the sum by size() (in fp32, identically on every rank)
  // Error-feedback state key (one per tensor); required when format.errorFeedback. The residual of
  // every quantization this rank performs is kept under the key and added before the next encode of
  // the same element positions; the state resets when the count for a key changes.
  std::string key;
  // Agree the call across ranks before every path, the native one too (one extra allreduce of two
  // words for native calls): ranks that differ in count, format, algorithm or averaging then get
  // Error(kMismatch) instead of MPI's undefined behaviour (heap corruption in Open MPI's ring
  // allreduce for different counts). Off, the native path is a plain MPI_Allreduce and only the
  // compressed algorithms are checked.
  bool checkEveryPath = false;
};

struct AllreduceStats {
  Algorithm algorithm = Algorithm::kNative;  // what ran (kAuto resolved)
  Format format = Format::kFp32;             // wire format used
  std::size_t count = 0;                     // elements reduced
  std::size_t wireBytes = 0;                 // bytes this rank sent
  std::size_t fp32Bytes = 0;                 // bytes this rank would have sent, same algorithm, fp32
  double encodeSeconds = 0;                  // in encode (and error-feedback arithmetic)
  double decodeSeconds = 0;                  // in decode / decodeAdd
  double transferSeconds = 0;                // blocked waiting for transfers
  double totalSeconds = 0;                   // wall time of the whole call
  std::size_t calls = 1;                     // allreduce calls summed into this record

  AllreduceStats& operator+=(const AllreduceStats& other);  // sums bytes, seconds and calls
};

// One key's error-feedback state (Communicator::errorFeedback / setErrorFeedback). slots[s][i] is the
// residual of this rank's quantization in encode step s of `algorithm` at element position i; a slot
// the algorithm never used is empty.
struct ErrorFeedbackState {
  // More slots than any algorithm uses (recursive_doubling: one per round, log2 of the rank count + 2).
  static constexpr std::size_t kMaxSlots = 64;
  std::size_t count = 0;
  Algorithm algorithm = Algorithm::kNative;  // the resolved algorithm the residuals belong to
  std::vector<std::vector<float>> slots;     // each empty or `count` floats
};

// One layer's outcome of Communicator::chooseFastest.
struct LayerChoice {
  std::size_t count = 0;
  Format format = Format::kFp32;             // fastest candidate
  Algorithm algorithm = Algorithm::kNative;  // what kAuto resolved to for it
  double seconds = 0;                        // its time per allreduce (max over ranks, median of reps)
  std::vector<double> candidateSeconds;      // same order as the candidates passed in; +Inf for a
                                             // format the algorithm cannot carry (native: fp8, ...)
};

struct FastestOptions {
  int warmup = 1;                          // untimed allreduces per candidate
  int repetitions = 3;                     // timed ones; the median is used
  Algorithm algorithm = Algorithm::kAuto;  // algorithm to time each format with
};

class Communicator {
 public:
  // Collective: every rank passes the same segmentCount and checksum, else Error(kMismatch) on every
  // rank. With options.checksum the communicator works over makeChecksumTransport(transport); with a
  // timeout it sets it on the transport (Transport::setTimeout).
  explicit Communicator(std::shared_ptr<Transport> transport,
                        const CommunicatorOptions& options = CommunicatorOptions::fromEnvironment());
  ~Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;

  int rank() const;
  int size() const;
  Transport& transport();
  // The largest message the algorithms send to another node (CommunicatorOptions::interNodeMessageBytes,
  // else the transport's); 0: whole messages, and always 0 when every rank is on one node.
  std::size_t interNodeMessageBytes() const;

  // In place: buf holds this rank's contribution and receives the sum.
  AllreduceStats allreduce(float* buf, std::size_t count, const AllreduceOptions& options = {});
  // Out of place; send == recv is allowed and means in place. send is not modified.
  AllreduceStats allreduce(const float* send, float* recv, std::size_t count,
                           const AllreduceOptions& options = {});

  // What kAuto runs for this format and count on this communicator (identical on every rank), for the
  // buffers allreduce takes here (device buffers where setDevice gave a device); a non-auto request is
  // returned unchanged. See docs/algorithms.md for the rule. Collective wherever the rule consults the
  // cost model (the call is agreed like allreduce's, and the first time for a format probes it): call
  // it on every rank.
  Algorithm resolveAlgorithm(Algorithm requested, Format format, std::size_t count) const;

  // Collective. For each layer size, times an allreduce of that many elements in every candidate
  // format on this communicator (scratch buffers; no error feedback) and picks the fastest; every rank
  // gets the same answer. Equal sizes are measured once.
  std::vector<LayerChoice> chooseFastest(std::span<const std::size_t> layerCounts,
                                         std::span<const Format> candidates,
                                         const FastestOptions& options = {});
  // Candidates used by Selection::kFastest: every wire format but the tableNz variants (same bytes
  // as tableN).
  static std::vector<Format> fastestCandidates();

  void resetErrorFeedback();                      // every key
  void resetErrorFeedback(std::string_view key);  // one key
  // This rank's error-feedback state (every key's residuals), for checkpoints: loading what
  // saveErrorFeedback returned into a Communicator of the same rank (a fresh one, or this one later)
  // makes its following +ef allreduces bit-identical to those of the communicator that saved it. Each
  // rank saves and loads its own state; nothing is communicated. Loading replaces all current state.
  // Layout (version 1, integers and floats little-endian): "ADAPREFB", u32 version, u32 keys; per key:
  // u32 key bytes, key, u64 count, u8 algorithm, u32 slots; per slot: u64 floats (0 or count),
  // floats as IEEE binary32. Malformed, truncated or padded input throws Error(kMalformedInput) and
  // leaves the state unchanged.
  std::vector<std::byte> saveErrorFeedback() const;
  void loadErrorFeedback(std::span<const std::byte> bytes);
  // One key's state, to move residuals when tensors are regrouped (a framework rebuilding its gradient
  // buckets): read the old keys' slots, place each tensor's positions in a new layout, set the new key.
  // errorFeedback returns nullopt for an unknown key. setErrorFeedback replaces the key's state; it
  // throws Error(kInvalidArgument) for an empty key, algorithm kAuto or a slot that is neither empty
  // nor `count` long. The next +ef allreduce under the key uses the state only if its count and
  // resolved algorithm match (otherwise it starts from zero, as after any change of count).
  std::optional<ErrorFeedbackState> errorFeedback(std::string_view key) const;
  void setErrorFeedback(std::string_view key, ErrorFeedbackState state);
  // The buffers allreduce gets from now on live on this device, and the codec runs there (docs/gpu.md,
  // "The device seam"); only encoded bytes are staged through host memory. Null (the default): host
  // memory. Each allreduce synchronizes the device before it returns. Not collective; the
  // communicator shares the device and is its only user during an allreduce (one device per rank).
  void setDevice(std::shared_ptr<detail::DeviceCodec> device);
  // Sum of the stats of every allreduce so far.
  const AllreduceStats& totals() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace adaprec
