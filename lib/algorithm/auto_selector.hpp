// auto's state for one Communicator: the agreed calibration (probed at the first call that needs the
// model, or reloaded from ADAPREC_CALIBRATION), cached for the communicator's life, and the
// ADAPREC_DEBUG report of each choice. Used from the communicator's one thread.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "adaprec/transport.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/calibration.hpp"

namespace adaprec::detail {

struct AutoSettings {
  int maxQuantizations = 2;     // the error budget for lossy formats
  std::string calibrationPath;  // empty: probe, keep in memory only
  bool debug = false;           // rank 0 prints each choice once per format and size class
};

class AutoSelector {
 public:
  AutoSelector(RankLayout layout, AutoSettings settings);

  // auto's algorithm for this call (kNative: the transport's fp32 allreduce). Collective whenever the
  // model is consulted for a format it has no codec measurement of yet (the first time only), so every
  // rank must call it for the same (format, count) in the same order; the guard cases never are.
  Algorithm choose(Transport& transport, Format format, std::size_t count);

  // The calibration, after choose() consulted the model (else nullopt). Collective variant: measures
  // (or loads) it now, with the codec of `format`.
  const std::optional<Calibration>& calibration() const { return calibration_; }
  const Calibration& ensureCalibration(Transport& transport, Format format);
  const AutoSettings& settings() const { return settings_; }
  CalibrationTopology topology() const;
  // Seconds this rank spent in the last link probe (0 when loaded from the file or not yet run).
  double probeSeconds() const { return probeSeconds_; }

 private:
  void loadOrProbe(Transport& transport);
  void save(Transport& transport) const;
  void report(Transport& transport, Format format, std::size_t count, const AutoChoice* choice);

  RankLayout layout_;
  AutoSettings settings_;
  std::optional<Calibration> calibration_;
  std::set<std::pair<Format, int>> reported_;
  double probeSeconds_ = 0;  // (format, size class) already printed
};

}  // namespace adaprec::detail
