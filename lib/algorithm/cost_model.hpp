// The cost model `auto` and `adaprec-bench --model` use: alpha-beta per link level plus the codec's
// measured speed per format, plus a measured curve of the transport's own allreduce (MPI_Allreduce:
// Open MPI's choice of algorithm cannot be modelled from first principles, so it is timed instead).
//
//   T(algorithm, format, n) = steps * alpha + sentBytes / beta + codec calls * seconds per element
//
// What each algorithm does per rank (steps, bytes, codec calls) is declared once, by algorithmWork()
// in algorithm.cpp next to the algorithm table and the quantization counts; this file holds the
// measured numbers (Calibration) and turns the two into seconds. The terms add rather than overlap:
// on an oversubscribed host (and in the emulated cluster) the network stack and the codec compete for
// the same cores. docs/algorithms.md ("auto") and docs/benchmarks.md ("Cost model") describe it.
#pragma once

#include <cstddef>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"

namespace adaprec::detail {

// The native curve's probe sizes (fp32 bytes), ascending (calibration.cpp says why these). From
// kNativeBandwidthBoundBytes on, a native allreduce is bandwidth-bound (time ~ bytes / rate) and the
// model extrapolates above the largest probe at the best rate of those probes (nativeSeconds); 1 MiB
// still runs the latency-bound algorithms of MPI libraries.
inline constexpr std::size_t kNativeProbeBytes[] = {std::size_t{1} << 20, std::size_t{4} << 20,
                                                    std::size_t{16} << 20};
inline constexpr std::size_t kNativeBandwidthBoundBytes = kNativeProbeBytes[1];
inline constexpr std::size_t kNativeLargestProbeBytes = std::end(kNativeProbeBytes)[-1];

// Per-rank work of one flat algorithm over `ranks` ranks (the slowest rank's share).
struct AlgorithmWork {
  double steps = 0;              // message latencies on the critical path
  double sentBytes = 0;          // bytes this rank sends
  double encodeElements = 0;     // elements encoded
  double decodeElements = 0;     // elements decoded (overwriting)
  double decodeAddElements = 0;  // elements decoded and added in fp32
};

// Defined in algorithm.cpp, from the steps in each algorithm's header comment. For kNative the work
// of an fp32 ring (what the model uses where no measured curve applies: hierarchical's fp32 inner
// step); kHierarchical and kAuto have no flat work (predictSeconds composes hierarchical).
AlgorithmWork algorithmWork(Algorithm algorithm, Format format, std::size_t count, int ranks);

struct LinkCost {
  double alphaSeconds = 0;    // half the round trip of an 8-byte message
  double bytesPerSecond = 0;  // large-message bandwidth one rank achieves
  bool operator==(const LinkCost&) const = default;
};

struct CodecCost {  // seconds per element, max over ranks, every rank running the codec at once
  double encode = 0;
  double decode = 0;
  double decodeAdd = 0;
  bool operator==(const CodecCost&) const = default;
};

// What a calibration was measured on; a saved calibration is only reused on the same topology.
struct CalibrationTopology {
  int ranks = 1;
  int nodes = 1;
  int ranksPerNode = 1;  // on the fullest node
  std::string isa;       // the host codec variant (codec::hostKernels().isa)
  // Largest message between nodes (the Communicator's piece size; 0: whole messages, and on one node):
  // the loaded-link probe sends these pieces, and its figure holds only for them.
  std::size_t messageBytes = 0;
  bool operator==(const CalibrationTopology&) const = default;
};

// The device's own costs (docs/algorithms.md, "Device buffers"), measured at the first auto call on
// device buffers (Communicator::setDevice) through its DeviceCodec: on a GPU the codec runs 100x
// faster than the host's, and staged messages cross PCIe, so the host codec's figures would mislead.
struct DeviceCosts {
  std::string space;                  // DeviceCodec::memorySpace() ("cuda", a test device's name)
  std::map<Format, CodecCost> codec;  // the device codec, synchronized calls; fp32 always
  // One copy between pinned host memory and the device, per byte: the slower direction. Negative:
  // not measured (every call so far went to a transport that takes device memory).
  double stagingSecondsPerByte = -1;
  bool operator==(const DeviceCosts&) const = default;
};

// Where the buffers of a predicted call live.
struct Placement {
  bool device = false;  // device memory, costed with Calibration::device
  bool direct = false;  // the transport takes device memory as it is (CUDA-aware MPI, NCCL): no staging
  bool operator==(const Placement&) const = default;
};

struct Calibration {
  CalibrationTopology topology;
  LinkCost intra;   // ping-pong rank 0 <-> a rank on its node (= inter with one rank per node)
  LinkCost inter;   // ping-pong rank 0 <-> a rank on another node (= intra on one node)
  // Bandwidth per rank while every rank sends at once to the rank with the same local rank on the
  // next node (one node: to its ring successor): the load flat algorithms and hierarchical's inner
  // step put on links and cores. Its alpha is inter's.
  LinkCost loaded;
  // The transport's own fp32 allreduce: (fp32 bytes, seconds) at the probe sizes, ascending.
  std::vector<std::pair<double, double>> native;
  std::map<Format, CodecCost> codec;  // fp32 always; other formats as auto first needs them
  std::optional<DeviceCosts> device;  // after the first auto call on device buffers
  bool operator==(const Calibration&) const = default;
};

// Predicted seconds of one allreduce of `count` elements. kNative is the measured curve (fp32 sum,
// what auto's native sends); kHierarchical is modelled as the reduce-scatter / inner allreduce on
// every rank's share / allgather shape (see cost_model.cpp). Needs the codec of `format` and fp32
// (on the device for a device placement, whose staged calls also copy every message byte once each
// way between host and device, and native the whole buffer down and up).
double predictSeconds(const Calibration& calibration, Algorithm algorithm, Format format, std::size_t count,
                      Placement placement = {});

// The model's inputs as one-line-per-fact text ("adaprec-calibration 1", then key values; doubles
// written exactly), and back. parseCalibration returns nullopt with `why` set (one phrase) for
// malformed text or text measured on another topology than `expected`.
std::string serializeCalibration(const Calibration& calibration);
std::optional<Calibration> parseCalibration(std::string_view text, const CalibrationTopology& expected,
                                            std::string& why);
// The same without the topology check (tools that re-target a calibration, such as
// adaprec-scaling-projection).
std::optional<Calibration> parseCalibrationText(std::string_view text, std::string& why);

// A few lines describing the calibration (for ADAPREC_DEBUG and adaprec-bench --model).
std::string describeCalibration(const Calibration& calibration, std::string_view linePrefix);

}  // namespace adaprec::detail
