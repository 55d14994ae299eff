// The cost model's measurements on a communicator's own links and CPU (collective probes), and their
// agreement across ranks: every number is max-reduced over the ranks through the transport, so every
// rank ends with the same Calibration and chooses the same algorithm (no rank's clock is trusted to
// agree with another's). docs/algorithms.md ("auto", "Calibration") gives the probe and its cost.
#pragma once

#include <cstdint>
#include <vector>

#include "adaprec/transport.hpp"
#include "algorithm/cost_model.hpp"

namespace adaprec::detail {

// Where the ranks are: node index (0 .. nodes-1, in order of first appearance) of every rank.
struct RankLayout {
  std::vector<int> nodeOf;
  int nodes() const;
  int maxRanksPerNode() const;
};

// Collective. This rank's local measurements of the links (ping-pongs of rank 0 with a rank on its
// node and one on another node: 0 on ranks that took no part), of the bandwidth with every rank
// sending at once, and of the transport's fp32 allreduce at the probe sizes; the fp32 codec too.
// Not yet agreed: pass it through agreeCalibration.
Calibration measureCalibration(Transport& transport, const RankLayout& layout, const CalibrationTopology& topology);
// Local: this rank's codec speed for `format` (the caller makes every rank run it at once).
CodecCost measureCodec(Format format);
// Collective: every time-like number of `local` max-reduced over the ranks (bandwidths as seconds per
// byte, so the slowest rank's counts). Every rank must pass calibrations with the same native probe
// sizes and the same codec formats. Exactly what each rank then holds is the same bits.
Calibration agreeCalibration(Transport& transport, const Calibration& local);
// The same for one codec measurement.
CodecCost agreeCodec(Transport& transport, const CodecCost& local);

}  // namespace adaprec::detail
