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

class DeviceCodec;

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
// Local: `format`'s codec on `device` (DeviceCodec), called as an allreduce calls it, per
// callElements-element segment, synchronized once per pass over 8 MiB of fp32; on `input` (inputCount
// floats of device memory, read only) when given, else on values it uploads.
CodecCost measureDeviceCodec(DeviceCodec& device, Format format, std::size_t callElements,
                             const float* input = nullptr, std::size_t inputCount = 0);
// Local: seconds per byte of one copy between pinned host memory and `device`, the slower direction.
double measureStaging(DeviceCodec& device);
// Collective: every time-like number of `local` max-reduced over the ranks (bandwidths as seconds per
// byte, so the slowest rank's counts). Every rank must pass calibrations with the same native probe
// sizes and the same codec formats. Exactly what each rank then holds is the same bits.
Calibration agreeCalibration(Transport& transport, const Calibration& local);
// The same for one codec measurement, and for one number of seconds.
CodecCost agreeCodec(Transport& transport, const CodecCost& local);
double agreeSeconds(Transport& transport, double local);

}  // namespace adaprec::detail
