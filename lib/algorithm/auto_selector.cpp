// auto's calibration cache, the ADAPREC_CALIBRATION file and the ADAPREC_DEBUG report.
#include "algorithm/auto_selector.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <unistd.h>

#include "adaprec/error.hpp"
#include "codec/host_kernels.hpp"
#include "communicator/signature_hash.hpp"

namespace adaprec::detail {
namespace {

std::string sizeText(double bytes) {
  char buffer[32];
  if (bytes >= 1 << 30) std::snprintf(buffer, sizeof buffer, "%.4g GiB", bytes / (1 << 30));
  else if (bytes >= 1 << 20) std::snprintf(buffer, sizeof buffer, "%.4g MiB", bytes / (1 << 20));
  else if (bytes >= 1 << 10) std::snprintf(buffer, sizeof buffer, "%.4g KiB", bytes / (1 << 10));
  else std::snprintf(buffer, sizeof buffer, "%.0f B", bytes);
  return buffer;
}

std::string secondsText(double s) {
  char buffer[32];
  if (s >= 1) std::snprintf(buffer, sizeof buffer, "%.3g s", s);  // not "1.61e+03 ms"
  else if (s >= 1e-3) std::snprintf(buffer, sizeof buffer, "%.3g ms", s * 1e3);
  else std::snprintf(buffer, sizeof buffer, "%.3g us", s * 1e6);
  return buffer;
}

// A device probe that fails on one rank (device memory exhausted, a CUDA error) fails on every rank:
// the others would otherwise wait for it in the agreement that follows. Collective: one vote.
template <class Measure>
auto measuredOnEveryRank(Transport& transport, Measure&& measure) -> decltype(measure()) {
  decltype(measure()) value{};
  std::optional<Error> failure;
  try {
    value = measure();
  } catch (const Error& e) {
    failure = e;
  } catch (const std::exception& e) {
    failure = Error(ErrorCode::kInternal, e.what());
  }
  std::uint64_t code = failure ? static_cast<std::uint64_t>(failure->code()) : 0;
  transport.allreduceMax(&code, 1);
  // Every Error's text begins with kMessagePrefix, once.
  if (failure)
    throw Error(failure->code(), kMessagePrefix + std::string("auto's probe of the device failed: ") +
                                     withoutMessagePrefix(*failure));
  if (code != 0)
    throw Error(static_cast<ErrorCode>(code), kMessagePrefix + std::string("auto's probe of the device failed on another rank"));
  return value;
}

// What a calibration was measured on: "<kind>-<ranks>r-<nodes>n-<ranks per node>l-<isa>-<piece bytes>m",
// the name of its file in a calibration directory and its key in this process's cache.
// What keeps the calibration file from being read or replaced, or "". Only a regular file (or none
// yet) is: ADAPREC_CALIBRATION=/dev/null, a natural way to say "no cache", renamed a calibration over
// the device as root, and a FIFO blocked every rank's read. A symbolic link is followed.
std::string calibrationFileProblem(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) return "";
  if (error) return "cannot be examined (" + error.message() + ")";
  if (status.type() != std::filesystem::file_type::regular)
    return "is not a regular file (a device, FIFO or directory): neither read nor written";
  return "";
}

// Where the calibration is written: a symbolic link's target, one level (renaming over the link would
// replace the link).
std::string calibrationWritePath(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_symlink(std::filesystem::symlink_status(path, error))) return path;
  const std::filesystem::path link(path);
  const std::filesystem::path target = std::filesystem::read_symlink(link, error);  // may not exist yet
  if (error) return path;
  return (target.is_absolute() ? target : link.parent_path() / target).string();
}

}  // namespace

std::string calibrationTemporaryPath(const std::string& path) {
  static std::atomic<std::uint64_t> writes{0};
  return path + ".tmp" + std::to_string(::getpid()) + '.' + std::to_string(writes.fetch_add(1));
}

namespace {

std::string calibrationKey(std::string_view transportKind, const CalibrationTopology& topology) {
  return std::string(transportKind) + '-' + std::to_string(topology.ranks) + "r-" + std::to_string(topology.nodes) +
         "n-" + std::to_string(topology.ranksPerNode) + "l-" + topology.isa + '-' +
         std::to_string(topology.messageBytes) + 'm';
}

// The calibrations this process measured or loaded, by calibrationKey: a later communicator of the
// same transport and topology reads its rank's copy instead of probing again (a program that made and
// freed a communicator every few calls paid a 0.3-0.8 s probe each time). Used like a calibration
// file: only when every rank of the new communicator holds the very same one (loadOrProbe's hash
// agreement), so ranks that met in different communicators probe. Loopback ranks are threads of one
// process and share it, which that agreement makes harmless.
struct ProcessCalibrations {
  std::mutex mutex;
  std::map<std::string, Calibration> byKey;
};

ProcessCalibrations& processCalibrations() {
  static ProcessCalibrations instance;
  return instance;
}

}  // namespace

std::string calibrationFile(const std::string& path, std::string_view transportKind,
                            const CalibrationTopology& topology) {
  std::error_code ignored;
  if (path.empty() || (path.back() != '/' && !std::filesystem::is_directory(path, ignored))) return path;
  std::string file = path;
  if (file.back() != '/') file += '/';
  return file + calibrationKey(transportKind, topology) + ".calibration";
}

AutoSelector::AutoSelector(RankLayout layout, AutoSettings settings)
    : layout_(std::move(layout)), settings_(std::move(settings)) {}

CalibrationTopology AutoSelector::topology() const {
  return {static_cast<int>(layout_.nodeOf.size()), layout_.nodes(), layout_.maxRanksPerNode(),
          codec::hostKernels().isa, settings_.messageBytes};
}

AutoSelector::SizeClassKey AutoSelector::keyOf(Format format, std::size_t count, const DevicePlace& place) {
  const std::size_t bytes = count * sizeof(float);
  return {format, bytes == 0 ? -1 : static_cast<int>(std::bit_width(bytes)) - 1, place.device != nullptr};
}

std::optional<Algorithm> AutoSelector::modelChoice(Transport& transport, Format format, std::size_t count,
                                                   const DevicePlace& place) {
  if (autoGuard(format, count, transport.size(), layout_.nodes(), place.device != nullptr)) {
    report(transport, format, count, place, nullptr);
    return std::nullopt;
  }
  const AutoChoice choice = chooseAlgorithm(ensureCalibration(transport, format, place), format, count,
                                            settings_.maxQuantizations, place.placement());
  report(transport, format, count, place, &choice);
  return choice.algorithm;
}

Algorithm AutoSelector::choose(Transport& transport, Format format, std::size_t count, const DevicePlace& place) {
  const std::optional<Algorithm> model = modelChoice(transport, format, count, place);
  if (!model || *model == Algorithm::kNative) return Algorithm::kNative;
  const auto it = trials_.find(keyOf(format, count, place));
  return it != trials_.end() && it->second.settled ? *it->second.settled : *model;
}

AutoCall AutoSelector::nextCall(Transport& transport, Format format, std::size_t count, const DevicePlace& place) {
  const std::optional<Algorithm> model = modelChoice(transport, format, count, place);
  if (!model || *model == Algorithm::kNative) return {Algorithm::kNative, false};
  Trial& trial = trials_[keyOf(format, count, place)];
  if (trial.settled) return {*trial.settled, false};
  if (trial.calls == 0) trial.engine = *model;
  // Native first: the first call of a size class gets the exact answer whatever the trial shows.
  return {trial.calls % 2 == 0 ? Algorithm::kNative : trial.engine, true};
}

bool AutoSelector::inTrial(Format format, std::size_t count, const DevicePlace& place) const {
  const auto it = trials_.find(keyOf(format, count, place));
  return it != trials_.end() && !it->second.settled;
}

void AutoSelector::recordTrial(Transport& transport, Format format, std::size_t count, double seconds,
                               const DevicePlace& place) {
  // The slowest rank's time counts.
  const double perElement = agreeSeconds(transport, seconds) / static_cast<double>(std::max<std::size_t>(count, 1));
  Trial& trial = trials_[keyOf(format, count, place)];
  if (trial.settled) return;
  double& side = trial.calls % 2 == 0 ? trial.nativePerElement : trial.enginePerElement;
  side = trial.calls < 2 ? perElement : std::min(side, perElement);
  if (++trial.calls < kAutoTrialCalls) return;
  // Ties go to native: exact, and the safe side.
  trial.settled = trial.enginePerElement < trial.nativePerElement ? trial.engine : Algorithm::kNative;
  if (settings_.debug && transport.rank() == 0) {
    const double elements = static_cast<double>(count);
    std::fprintf(stderr, "adaprec: auto %s %s%s: trial measured native fp32 %s, %s %s -> %s\n",
                 std::string(formatName(format)).c_str(), sizeText(elements * sizeof(float)).c_str(),
                 place.device != nullptr ? " on the device" : "",
                 secondsText(trial.nativePerElement * elements).c_str(), std::string(algorithmName(trial.engine)).c_str(),
                 secondsText(trial.enginePerElement * elements).c_str(),
                 std::string(algorithmName(*trial.settled)).c_str());
  }
}

const Calibration& AutoSelector::ensureCalibration(Transport& transport, Format format, const DevicePlace& place) {
  if (!calibration_) loadOrProbe(transport);
  // Every rank holds the same calibration and passes the same place, so every rank lacks the same
  // measurements and probes them now, all at once.
  bool changed = false;
  if (calibration_->codec.count(format) == 0) {
    transport.barrier();
    calibration_->codec[format] = agreeCodec(transport, measureCodec(format));
    changed = true;
  }
  if (place.device != nullptr) {
    std::optional<DeviceCosts>& device = calibration_->device;
    if (device && device->space != place.device->memorySpace()) device.reset();  // one device per calibration
    if (!device) {
      device = DeviceCosts{std::string(place.device->memorySpace()), {}, -1.0};
      changed = true;
    }
    // Staging only where calls stage (a direct transport never copies a message between host and device).
    if (!place.direct && device->stagingSecondsPerByte < 0) {
      transport.barrier();
      const double local = measuredOnEveryRank(transport, [&] { return measureStaging(*place.device); });
      device->stagingSecondsPerByte = agreeSeconds(transport, local);
      changed = true;
    }
    for (const Format f : {Format::kFp32, format}) {
      if (device->codec.count(f) != 0) continue;
      transport.barrier();
      const CodecCost local = measuredOnEveryRank(transport, [&] {
        return measureDeviceCodec(*place.device, f, settings_.segmentCount, place.input, place.inputCount);
      });
      device->codec[f] = agreeCodec(transport, local);
      changed = true;
    }
  }
  if (changed) {
    save(transport);
    remember(transport);
    // The probe's own line printed fp32's codec only: each format measured later gets its lines here.
    if (settings_.debug && transport.rank() == 0) {
      std::istringstream lines(describeCalibration(*calibration_, "adaprec:   "));
      const std::string tag = "codec " + std::string(formatName(format)) + ' ';
      std::string measured;
      for (std::string line; std::getline(lines, line);)
        if (line.find(tag) != std::string::npos) measured += line + '\n';
      std::fprintf(stderr, "adaprec: auto: measured for %s:\n%s", std::string(formatName(format)).c_str(), measured.c_str());
    }
  }
  return *calibration_;
}

void AutoSelector::remember(Transport& transport) const {
  ProcessCalibrations& cache = processCalibrations();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  cache.byKey.insert_or_assign(calibrationKey(transport.kind(), topology()), *calibration_);
}

void AutoSelector::loadOrProbe(Transport& transport) {
  const auto start = std::chrono::steady_clock::now();
  const CalibrationTopology expected = topology();
  const bool rank0 = transport.rank() == 0;
  const std::string path = calibrationFile(settings_.calibrationPath, transport.kind(), expected);
  // The file ADAPREC_CALIBRATION names, else this process's earlier calibration of the same shape.
  std::string why;
  std::optional<Calibration> loaded;
  if (!path.empty()) {
    why = calibrationFileProblem(path);
    if (why.empty()) {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        why = "cannot be read (probing, then writing it)";
      } else {
        std::ostringstream text;
        text << in.rdbuf();
        loaded = parseCalibration(text.str(), expected, why);
      }
    }
  } else {
    ProcessCalibrations& cache = processCalibrations();
    const std::lock_guard<std::mutex> lock(cache.mutex);
    const auto it = cache.byKey.find(calibrationKey(transport.kind(), expected));
    if (it != cache.byKey.end()) loaded = it->second;
  }
  // Each rank read its own copy: use it only if every rank holds the very same calibration.
  const std::uint64_t hash = loaded ? (hashSignatureText(serializeCalibration(*loaded)) | 1) : 0;
  std::uint64_t words[2] = {hash, ~hash};
  transport.allreduceMax(words, 2);
  if (hash != 0 && words[0] == hash && words[1] == ~hash) {
    calibration_ = std::move(loaded);
    if (settings_.debug && rank0)
      std::fprintf(stderr, "adaprec: auto: calibration %s\n%s",
                   path.empty() ? "of an earlier communicator of the same transport and topology (not probed again)"
                                : ("loaded from " + path).c_str(),
                   describeCalibration(*calibration_, "adaprec:   ").c_str());
    remember(transport);
    return;
  }
  if (!path.empty() && rank0)
    std::fprintf(stderr, "adaprec: ADAPREC_CALIBRATION=%s ignored: %s\n", path.c_str(),
                 loaded ? "not the same file on every rank (probing)" : why.c_str());
  calibration_ = agreeCalibration(transport, measureCalibration(transport, layout_, expected));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  probeSeconds_ = seconds;
  if (settings_.debug && rank0)
    std::fprintf(stderr, "adaprec: auto: calibration probe took %s (rank 0)\n%s", secondsText(seconds).c_str(),
                 describeCalibration(*calibration_, "adaprec:   ").c_str());
  save(transport);
  remember(transport);
}

void AutoSelector::save(Transport& transport) const {
  if (settings_.calibrationPath.empty() || transport.rank() != 0) return;
  std::error_code ignored;
  if (settings_.calibrationPath.back() == '/') std::filesystem::create_directories(settings_.calibrationPath, ignored);
  const std::string named = calibrationFile(settings_.calibrationPath, transport.kind(), topology());
  if (!calibrationFileProblem(named).empty()) return;  // loadOrProbe said why
  const std::string path = calibrationWritePath(named);
  // Written whole under a temporary name, then renamed: a reader never sees half a file.
  const std::string temporary = calibrationTemporaryPath(path);
  {
    errno = 0;
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << serializeCalibration(*calibration_);
    out.close();  // the bytes reach the file here: a full disk fails at the close, not at the <<
    if (out.fail()) {
      std::fprintf(stderr, "adaprec: cannot write the calibration to %s: %s (the file %s is left as it was)\n",
                   temporary.c_str(), errno ? std::strerror(errno) : "write failed", path.c_str());
      std::remove(temporary.c_str());
      return;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "adaprec: cannot rename %s to %s\n", temporary.c_str(), path.c_str());
    std::remove(temporary.c_str());
  }
}

void AutoSelector::report(Transport& transport, Format format, std::size_t count, const DevicePlace& place,
                          const AutoChoice* choice) {
  if (!settings_.debug || transport.rank() != 0) return;
  const std::size_t bytes = count * sizeof(float);
  const SizeClassKey key = keyOf(format, count, place);
  const int sizeClass = std::get<1>(key);
  if (!reported_.insert(key).second) return;
  std::ostringstream line;
  line << "adaprec: auto " << formatName(format) << ' ' << sizeText(static_cast<double>(bytes)) << " (class "
       << (sizeClass < 0 ? std::string("0 B") : sizeText(std::ldexp(1.0, sizeClass)));
  if (place.device != nullptr)
    line << ", " << place.device->memorySpace() << " memory, " << (place.direct ? "direct" : "staged");
  line << "): ";
  if (choice == nullptr) {
    line << "native fp32 (guard: ";
    if (transport.size() == 1) {
      line << "one rank";
    } else if (bytes < kAutoModelMinBytes) {
      line << "below " << sizeText(static_cast<double>(kAutoModelMinBytes));
    } else {
      line << "fp32 on one node";
    }
    line << "; model not consulted)";
  } else {
    for (const AutoCandidate& c : choice->candidates) {
      line << algorithmName(c.algorithm) << ' ' << secondsText(c.seconds);
      if (!c.withinBudget) line << " (Q " << c.quantizations << " > " << settings_.maxQuantizations << ")";
      line << ", ";
    }
    line << "-> " << algorithmName(choice->algorithm);
    if (choice->algorithm == Algorithm::kNative) line << " fp32";
  }
  std::fprintf(stderr, "%s\n", line.str().c_str());
}

}  // namespace adaprec::detail
