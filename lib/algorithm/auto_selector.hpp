// auto's state for one Communicator: the agreed calibration (probed at the first call that needs the
// model, or reloaded from ADAPREC_CALIBRATION), cached for the communicator's life; the measured
// trial that confirms each choice of an engine algorithm over native; and the ADAPREC_DEBUG report of
// each choice. Used from the communicator's one thread.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "adaprec/transport.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/calibration.hpp"
#include "algorithm/device_codec.hpp"

namespace adaprec::detail {

struct AutoSettings {
  int maxQuantizations = 2;     // the error budget for lossy formats
  std::string calibrationPath;  // empty: probe (or reuse this process's of the same shape); a directory: calibrationFile()
  bool debug = false;           // rank 0 prints each choice once per format and size class
  std::size_t messageBytes = 0;  // largest message between nodes (0: whole; always 0 on one node)
  std::size_t segmentCount = kDefaultSegmentCount;  // elements per codec call (the device probe's calls)
};

// Where a call's buffers live: host memory (device null, or a DeviceCodec of host memory), or a
// device whose codec and staging the model then costs (Calibration::device), direct when the
// transport takes its memory as it is. Every rank of a call must pass the same placement (the
// Communicator agrees it with the call before auto consults the model).
struct DevicePlace {
  DeviceCodec* device = nullptr;
  bool direct = false;
  // The call's input on the device (read only), which a device probe codes: real values, and no copy
  // between host and device. Null: the probe uploads values of its own.
  const float* input = nullptr;
  std::size_t inputCount = 0;
  Placement placement() const { return {device != nullptr, device != nullptr && direct}; }
};

// The file ADAPREC_CALIBRATION=`path` names for this communicator: `path` itself, or, where `path` ends
// in '/' or names a directory, the file in it for this transport and topology
// ("<kind>-<ranks>r-<nodes>n-<ranks per node>l-<isa>-<piece bytes>m.calibration"): one directory then
// serves every job shape of a cluster (and every shape of a test sweep), and every ADAPREC_MESSAGE_BYTES.
std::string calibrationFile(const std::string& path, std::string_view transportKind,
                            const CalibrationTopology& topology);

// The name a calibration file is first written under before it is renamed into place: in the file's
// directory and unique to this write (process and a per-process counter), so threads of one process
// saving their communicators' calibrations at once never truncate or rename each other's file (named
// by the process alone, they did: "cannot rename", the calibration lost).
std::string calibrationTemporaryPath(const std::string& path);

// What auto runs for one call, and whether the call is one of a trial's measurements (then the
// caller times it and passes the seconds to AutoSelector::recordTrial).
struct AutoCall {
  Algorithm algorithm = Algorithm::kNative;
  bool trial = false;
};

class AutoSelector {
 public:
  AutoSelector(RankLayout layout, AutoSettings settings);

  // auto's algorithm for this (format, count) (kNative: the transport's fp32 allreduce): the trial's
  // outcome once the size class has one, else the model's choice. Collective whenever the model is
  // consulted for a format it has no codec measurement of yet (the first time only), so every rank
  // must call it for the same (format, count) in the same order; the guard cases never are.
  Algorithm choose(Transport& transport, Format format, std::size_t count, const DevicePlace& place = {});

  // What the next allreduce of (format, count) runs. Where the model picks an engine algorithm over
  // native, the first kAutoTrialCalls calls of the (format, size class) are a trial: native and the
  // engine algorithm in turn, native first; their agreed times (recordTrial) decide what every later
  // call runs, so auto never keeps an algorithm it measured slower than MPI_Allreduce. Collective as
  // choose().
  AutoCall nextCall(Transport& transport, Format format, std::size_t count, const DevicePlace& place = {});
  // Collective, after a call nextCall marked as a trial: agrees this rank's `seconds` (the slowest
  // rank's time counts) and advances the trial; the last one settles the size class.
  void recordTrial(Transport& transport, Format format, std::size_t count, double seconds,
                   const DevicePlace& place = {});
  // Whether the size class of (format, count) has begun a trial and not settled it (identical on every
  // rank): timing loops warm up until it is false.
  bool inTrial(Format format, std::size_t count, const DevicePlace& place = {}) const;

  // The calibration, after choose() consulted the model (else nullopt). Collective variant: measures
  // (or loads) it now, with the codec of `format` (and with a device place, the device's codec of
  // `format` and its staging: a loaded calibration of another memory space has them probed again).
  const std::optional<Calibration>& calibration() const { return calibration_; }
  const Calibration& ensureCalibration(Transport& transport, Format format, const DevicePlace& place = {});
  const AutoSettings& settings() const { return settings_; }
  CalibrationTopology topology() const;
  // Seconds this rank spent in the last link probe (0 when loaded from the file or not yet run).
  double probeSeconds() const { return probeSeconds_; }

 private:
  void loadOrProbe(Transport& transport);
  void save(Transport& transport) const;
  // Keeps the calibration in this process's cache for later communicators of the same shape.
  void remember(Transport& transport) const;
  void report(Transport& transport, Format format, std::size_t count, const DevicePlace& place,
              const AutoChoice* choice);

  // The measurements of one (format, size class): seconds per element, agreed (max over ranks).
  struct Trial {
    Algorithm engine = Algorithm::kNative;  // the model's choice when the trial began
    int calls = 0;                           // measured so far: even ones native, odd ones the engine's
    double nativePerElement = 0;             // the least of each side's calls
    double enginePerElement = 0;
    std::optional<Algorithm> settled;
  };
  // (format, size class, on a device): host and device calls of one size differ in cost.
  using SizeClassKey = std::tuple<Format, int, bool>;
  static SizeClassKey keyOf(Format format, std::size_t count, const DevicePlace& place);
  // The model's choice, or nullopt where the guard decides (native).
  std::optional<Algorithm> modelChoice(Transport& transport, Format format, std::size_t count,
                                       const DevicePlace& place);

  RankLayout layout_;
  AutoSettings settings_;
  std::optional<Calibration> calibration_;
  std::set<SizeClassKey> reported_;  // (format, size class) already printed
  std::map<SizeClassKey, Trial> trials_;
  double probeSeconds_ = 0;
};

}  // namespace adaprec::detail
