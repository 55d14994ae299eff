// auto's calibration cache, the ADAPREC_CALIBRATION file and the ADAPREC_DEBUG report.
#include "algorithm/auto_selector.hpp"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

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
  if (s >= 1e-3) std::snprintf(buffer, sizeof buffer, "%.3g ms", s * 1e3);
  else std::snprintf(buffer, sizeof buffer, "%.3g us", s * 1e6);
  return buffer;
}

void barrier(Transport& transport) {
  std::uint64_t none = 0;
  transport.allreduceMax(&none, 1);
}

}  // namespace

AutoSelector::AutoSelector(RankLayout layout, AutoSettings settings)
    : layout_(std::move(layout)), settings_(std::move(settings)) {}

CalibrationTopology AutoSelector::topology() const {
  return {static_cast<int>(layout_.nodeOf.size()), layout_.nodes(), layout_.maxRanksPerNode(),
          codec::hostKernels().isa};
}

Algorithm AutoSelector::choose(Transport& transport, Format format, std::size_t count) {
  if (const std::optional<Algorithm> guarded = autoGuard(format, count, transport.size(), layout_.nodes())) {
    report(transport, format, count, nullptr);
    return *guarded;
  }
  const AutoChoice choice = chooseAlgorithm(ensureCalibration(transport, format), format, count,
                                            settings_.maxQuantizations);
  report(transport, format, count, &choice);
  return choice.algorithm;
}

const Calibration& AutoSelector::ensureCalibration(Transport& transport, Format format) {
  if (!calibration_) loadOrProbe(transport);
  if (calibration_->codec.count(format) == 0) {
    // Every rank holds the same calibration, so every rank lacks the same format and probes it now.
    barrier(transport);
    calibration_->codec[format] = agreeCodec(transport, measureCodec(format));
    save(transport);
  }
  return *calibration_;
}

void AutoSelector::loadOrProbe(Transport& transport) {
  const auto start = std::chrono::steady_clock::now();
  const CalibrationTopology expected = topology();
  const bool rank0 = transport.rank() == 0;
  if (!settings_.calibrationPath.empty()) {
    std::string why;
    std::optional<Calibration> loaded;
    std::ifstream in(settings_.calibrationPath, std::ios::binary);
    if (!in) {
      why = "cannot be read (probing, then writing it)";
    } else {
      std::ostringstream text;
      text << in.rdbuf();
      loaded = parseCalibration(text.str(), expected, why);
    }
    // Each rank read its own copy: use it only if every rank holds the very same calibration.
    const std::uint64_t hash = loaded ? (hashSignatureText(serializeCalibration(*loaded)) | 1) : 0;
    std::uint64_t words[2] = {hash, ~hash};
    transport.allreduceMax(words, 2);
    if (hash != 0 && words[0] == hash && words[1] == ~hash) {
      calibration_ = std::move(loaded);
      if (settings_.debug && rank0)
        std::fprintf(stderr, "adaprec: auto: calibration loaded from %s\n%s", settings_.calibrationPath.c_str(),
                     describeCalibration(*calibration_, "adaprec:   ").c_str());
      return;
    }
    if (rank0)
      std::fprintf(stderr, "adaprec: ADAPREC_CALIBRATION=%s ignored: %s\n", settings_.calibrationPath.c_str(),
                   loaded ? "not the same file on every rank (probing)" : why.c_str());
  }
  calibration_ = agreeCalibration(transport, measureCalibration(transport, layout_, expected));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  probeSeconds_ = seconds;
  if (settings_.debug && rank0)
    std::fprintf(stderr, "adaprec: auto: calibration probe took %s (rank 0)\n%s", secondsText(seconds).c_str(),
                 describeCalibration(*calibration_, "adaprec:   ").c_str());
  save(transport);
}

void AutoSelector::save(Transport& transport) const {
  if (settings_.calibrationPath.empty() || transport.rank() != 0) return;
  // Written whole under a temporary name, then renamed: a reader never sees half a file.
  const std::string temporary = settings_.calibrationPath + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << serializeCalibration(*calibration_);
    if (!out) {
      std::fprintf(stderr, "adaprec: cannot write the calibration to %s\n", temporary.c_str());
      return;
    }
  }
  if (std::rename(temporary.c_str(), settings_.calibrationPath.c_str()) != 0) {
    std::fprintf(stderr, "adaprec: cannot rename %s to %s\n", temporary.c_str(), settings_.calibrationPath.c_str());
    std::remove(temporary.c_str());
  }
}

void AutoSelector::report(Transport& transport, Format format, std::size_t count, const AutoChoice* choice) {
  if (!settings_.debug || transport.rank() != 0) return;
  const std::size_t bytes = count * sizeof(float);
  const int sizeClass = bytes == 0 ? -1 : static_cast<int>(std::bit_width(bytes)) - 1;
  if (!reported_.insert({format, sizeClass}).second) return;
  std::ostringstream line;
  line << "adaprec: auto " << formatName(format) << ' ' << sizeText(static_cast<double>(bytes)) << " (class "
       << (sizeClass < 0 ? std::string("0 B") : sizeText(std::ldexp(1.0, sizeClass))) << "): ";
  if (choice == nullptr) {
    line << "native fp32 (guard: ";
    if (transport.size() == 1) {
      line << "one rank";
    } else if (bytes < kAutoModelMinBytes) {
      line << "below " << sizeText(static_cast<double>(kAutoModelMinBytes));
    } else {
      line << "one node, below " << sizeText(static_cast<double>(kAutoSharedModelMinBytes)) << " or fp32";
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
