// The cost model's arithmetic and its file format; the measurements come from calibration.cpp and
// each algorithm's work from algorithmWork() (algorithm.cpp).
#include "algorithm/cost_model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"

namespace adaprec::detail {
namespace {

// Version 2 (2026-11-27) adds message_bytes; a version 1 file is refused (and probed again).
constexpr std::string_view kMagic = "adaprec-calibration 2";

const CodecCost& codecOf(const std::map<Format, CodecCost>& codecs, Format format) {
  auto it = codecs.find(format);
  ADAPREC_CHECK(it != codecs.end(), ErrorCode::kInternal,
                "the cost model has no codec measurement of " << formatName(format));
  return it->second;
}

double codecSeconds(const AlgorithmWork& w, const CodecCost& k) {
  return w.encodeElements * k.encode + w.decodeElements * k.decode + w.decodeAddElements * k.decodeAdd;
}

double linkSeconds(const AlgorithmWork& w, double alphaSeconds, double bytesPerSecond) {
  return w.steps * alphaSeconds + w.sentBytes / std::max(bytesPerSecond, 1.0);
}

// The latency of a small native allreduce: the 2 ceil(log2 p) message latencies of recursive doubling
// or Rabenseifner (what MPI libraries run for small and medium sizes), on the slower link.
double nativeLatencySeconds(const Calibration& calibration) {
  const CalibrationTopology& t = calibration.topology;
  const double alpha = t.nodes > 1 ? calibration.inter.alphaSeconds : calibration.intra.alphaSeconds;
  return 2.0 * std::ceil(std::log2(std::max(2, t.ranks))) * alpha;
}

// The measured native curve at `bytes`: linear between probe sizes; below the smallest probe, linear
// from the latency at 0 bytes to that probe (the smallest probe's time for every smaller size
// over-predicted a 4-byte call 10,000-fold). Above the largest, on from it at the lower of the last
// two points' slope and the best average rate of the bandwidth-bound probes (from
// kNativeBandwidthBoundBytes): noise only ever adds time, and the slope of two noisy points carries
// it several-fold (on 2 emulated nodes x 2 ranks at 1 Gbit/s, 16 MiB probes of 180-265 ms for calls
// that all took about 11 ms per MiB at 64 MiB). Proportional to the size when neither is positive.
double nativeSeconds(const Calibration& calibration, double bytes) {
  const auto& points = calibration.native;
  ADAPREC_CHECK(!points.empty(), ErrorCode::kInternal, "the cost model has no native measurement");
  if (bytes <= points.front().first) {
    const auto& [b0, t0] = points.front();
    const double latency = std::min(nativeLatencySeconds(calibration), t0);
    return latency + (t0 - latency) * bytes / b0;
  }
  for (std::size_t i = 1; i < points.size(); ++i) {
    const auto& [b0, t0] = points[i - 1];
    const auto& [b1, t1] = points[i];
    if (bytes <= b1) return t0 + (t1 - t0) * (bytes - b0) / (b1 - b0);
  }
  const auto& [b1, t1] = points.back();
  double slope = t1 / b1;
  if (points.size() > 1) {
    const auto& [b0, t0] = points[points.size() - 2];
    if (t1 > t0) slope = (t1 - t0) / (b1 - b0);
  }
  for (const auto& [b, t] : points)
    if (b >= static_cast<double>(kNativeBandwidthBoundBytes) && t > 0) slope = std::min(slope, t / b);
  return t1 + (bytes - b1) * slope;
}

std::string exact(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

// Strict: a finite, non-negative decimal number and nothing else.
bool parseNumber(std::string_view text, double& value) {
  if (text.empty() || text.front() == '-' || text.front() == '+') return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  // Bounded so that every prediction from the file stays finite (fuzz_calibration: an alpha of 7.7e307
  // made them infinite): no measured time, size or speed comes near 1e15.
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(value) && value >= 0 &&
         value <= 1e15;
}

bool parseSize(std::string_view text, std::size_t& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

bool parseInt(std::string_view text, int& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size() && value >= 1;
}

// A name (the isa, the device's memory space): printable ASCII without spaces, so that it reads back
// as written; a control character would not (fuzz_calibration: an isa ending in '\r' lost it, since a
// line's one trailing '\r' is taken for a CRLF line end).
bool isName(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char ch) { return ch > ' ' && ch <= '~'; });
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  while (!line.empty()) {
    const std::size_t start = line.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    line.remove_prefix(start);
    const std::size_t end = std::min(line.find(' '), line.size());
    out.push_back(line.substr(0, end));
    line.remove_prefix(end);
  }
  return out;
}

}  // namespace

// Flat algorithms pay the inter-node latency (intra on one node) per step and the loaded bandwidth per
// byte. hierarchical is modelled as the code runs it: with L ranks on each of N nodes, (1) an fp32
// reduce-scatter inside the node over shared memory, each rank ending with a 1/L share (L-1 steps, (L-1) 4n/L bytes, (L-1) n/L fp32 adds);
// (2) on every rank at once, the inner algorithm (hierarchicalInnerAlgorithm) on its share among the
// N ranks with its local rank, over the loaded inter-node link; (3) an fp32 allgather inside the node
// (L-1 steps, (L-1) 4n/L bytes, (L-1) n/L copies).
// On device buffers the codec terms are the device's; staged (the transport takes host memory only),
// every byte a rank sends was copied from the device first and every byte it receives goes up after
// (the algorithms' messages are symmetric: received = sent), native copies the whole buffer down and
// up, and hierarchical the buffer down, the node's contributions and the other shares up and its own
// share down (hierarchical.cpp). The copies add to the rest, as the codec does.
double predictSeconds(const Calibration& calibration, Algorithm algorithm, Format format, std::size_t count,
                      Placement placement) {
  ADAPREC_CHECK_ARG(algorithm != Algorithm::kAuto, "predictSeconds needs a resolved algorithm");
  const CalibrationTopology& t = calibration.topology;
  if (t.ranks <= 1 || count == 0) return 0.0;
  ADAPREC_CHECK(!placement.device || calibration.device, ErrorCode::kInternal,
                "the cost model has no measurement of the device");
  const std::map<Format, CodecCost>& codecs = placement.device ? calibration.device->codec : calibration.codec;
  const double staging = placement.device && !placement.direct ? calibration.device->stagingSecondsPerByte : 0.0;
  ADAPREC_CHECK(staging >= 0, ErrorCode::kInternal, "the cost model has no measurement of the device's staging");
  const double n = static_cast<double>(count);
  if (algorithm == Algorithm::kNative) return nativeSeconds(calibration, 4 * n) + 2 * 4 * n * staging;
  const double flatAlpha = t.nodes > 1 ? calibration.inter.alphaSeconds : calibration.intra.alphaSeconds;
  if (algorithm != Algorithm::kHierarchical) {
    AlgorithmWork w = algorithmWork(algorithm, format, count, t.ranks);
    const CodecCost& k = codecOf(codecs, format);
    const double copies = 2 * w.sentBytes * staging;
    // With L > 1 ranks per node only part of a flat algorithm's bytes cross nodes, and the loaded
    // bandwidth was measured with L streams sharing each node's link: ring's one crossing stream
    // per node and step gets the whole link (L x loaded); the others send (p-L)/(p-1) of their bytes
    // across, the rest over shared memory in parallel. Both factors are 1 with one rank per node.
    if (t.nodes > 1 && t.ranksPerNode > 1) {
      const double l = t.ranksPerNode;
      const double p = t.ranks;
      w.sentBytes *= algorithm == Algorithm::kRing ? 1.0 / l : (p - l) / (p - 1);
    }
    return linkSeconds(w, flatAlpha, calibration.loaded.bytesPerSecond) + codecSeconds(w, k) + copies;
  }
  const int local = std::max(1, t.ranksPerNode);
  const double l = local;
  const std::size_t share = (count + static_cast<std::size_t>(local) - 1) / static_cast<std::size_t>(local);
  const CodecCost& fp32 = codecOf(codecs, Format::kFp32);
  AlgorithmWork node;
  node.steps = l - 1;
  node.sentBytes = (l - 1) * 4 * static_cast<double>(share);
  const double intraPhase = linkSeconds(node, calibration.intra.alphaSeconds, calibration.intra.bytesPerSecond);
  const double adds = (l - 1) * static_cast<double>(share) * fp32.decodeAdd;
  const double copies = (l - 1) * static_cast<double>(share) * fp32.decode;
  const AlgorithmWork w = algorithmWork(hierarchicalInnerAlgorithm(t.nodes), format, share, t.nodes);
  const double innerSeconds = linkSeconds(w, calibration.inter.alphaSeconds, calibration.loaded.bytesPerSecond) +
                              codecSeconds(w, codecOf(codecs, format)) + 2 * w.sentBytes * staging;
  const double stagedNode = (4 * n + 2 * node.sentBytes + 4 * static_cast<double>(share)) * staging;
  return 2 * intraPhase + adds + copies + innerSeconds + stagedNode;
}

std::string serializeCalibration(const Calibration& c) {
  std::ostringstream out;
  out << kMagic << '\n'
      << "ranks " << c.topology.ranks << '\n'
      << "nodes " << c.topology.nodes << '\n'
      << "ranks_per_node " << c.topology.ranksPerNode << '\n'
      << "isa " << c.topology.isa << '\n'
      << "message_bytes " << c.topology.messageBytes << '\n';
  auto link = [&](const char* name, const LinkCost& l) {
    out << name << ' ' << exact(l.alphaSeconds) << ' ' << exact(l.bytesPerSecond) << '\n';
  };
  link("intra", c.intra);
  link("inter", c.inter);
  link("loaded", c.loaded);
  for (const auto& [bytes, seconds] : c.native) out << "native " << exact(bytes) << ' ' << exact(seconds) << '\n';
  for (const auto& [format, k] : c.codec)
    out << "codec " << formatName(format) << ' ' << exact(k.encode) << ' ' << exact(k.decode) << ' '
        << exact(k.decodeAdd) << '\n';
  if (c.device) {
    // "none": staging not measured (only direct calls so far).
    out << "device " << c.device->space << ' '
        << (c.device->stagingSecondsPerByte < 0 ? std::string("none") : exact(c.device->stagingSecondsPerByte)) << '\n';
    for (const auto& [format, k] : c.device->codec)
      out << "device_codec " << formatName(format) << ' ' << exact(k.encode) << ' ' << exact(k.decode) << ' '
          << exact(k.decodeAdd) << '\n';
  }
  return out.str();
}

std::optional<Calibration> parseCalibrationText(std::string_view text, std::string& why) {
  Calibration c;
  bool seen[9] = {};  // ranks nodes ranks_per_node isa intra inter loaded magic message_bytes
  std::size_t lineNumber = 0;
  auto fail = [&](std::string reason) {  // lineNumber 0: the whole file
    why = (lineNumber > 0 ? "line " + std::to_string(lineNumber) + ": " : std::string()) + reason;
    return std::nullopt;
  };
  constexpr std::string_view kFamily = "adaprec-calibration ";
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    ++lineNumber;
    // A file edited on Windows (CRLF) or with blank lines reads as written by this library.
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (lineNumber == 1) {
      if (line.substr(0, kFamily.size()) == kFamily && line != kMagic)
        return fail("calibration format version " + std::string(line.substr(kFamily.size())) +
                    ", not this library's " + std::string(kMagic.substr(kFamily.size())) + " (probing again)");
      if (line != kMagic) return fail("not an AdaPrec calibration (expected '" + std::string(kMagic) + "')");
      seen[7] = true;
      continue;
    }
    const std::vector<std::string_view> w = words(line);
    if (w.empty()) continue;
    const std::string_view key = w[0];
    auto once = [&](int index) {
      if (seen[index]) return false;
      seen[index] = true;
      return true;
    };
    if (key == "ranks" || key == "nodes" || key == "ranks_per_node") {
      const int index = key == "ranks" ? 0 : key == "nodes" ? 1 : 2;
      int* field = index == 0 ? &c.topology.ranks : index == 1 ? &c.topology.nodes : &c.topology.ranksPerNode;
      if (w.size() != 2 || !parseInt(w[1], *field) || !once(index)) return fail("bad or repeated " + std::string(key));
    } else if (key == "message_bytes") {
      if (w.size() != 2 || !parseSize(w[1], c.topology.messageBytes) || !once(8)) return fail("bad or repeated message_bytes");
    } else if (key == "isa") {
      if (w.size() != 2 || !isName(w[1]) || !once(3)) return fail("bad or repeated isa");
      c.topology.isa = std::string(w[1]);
    } else if (key == "intra" || key == "inter" || key == "loaded") {
      const int index = key == "intra" ? 4 : key == "inter" ? 5 : 6;
      LinkCost& l = index == 4 ? c.intra : index == 5 ? c.inter : c.loaded;
      if (w.size() != 3 || !parseNumber(w[1], l.alphaSeconds) || !parseNumber(w[2], l.bytesPerSecond) ||
          l.bytesPerSecond < 1 || !once(index))
        return fail("bad or repeated " + std::string(key) + " link");
    } else if (key == "native") {
      std::pair<double, double> point;
      if (w.size() != 3 || !parseNumber(w[1], point.first) || !parseNumber(w[2], point.second) || point.first < 1 ||
          (!c.native.empty() && point.first <= c.native.back().first))
        return fail("bad native point (sizes must ascend)");
      c.native.push_back(point);
    } else if (key == "codec" || key == "device_codec") {
      const bool onDevice = key == "device_codec";
      if (onDevice && !c.device) return fail("device_codec before its device line");
      std::map<Format, CodecCost>& codecs = onDevice ? c.device->codec : c.codec;
      CodecCost k;
      const std::optional<Format> format = w.size() == 5 ? tryParseFormat(w[1]) : std::nullopt;
      if (!format || !parseNumber(w[2], k.encode) || !parseNumber(w[3], k.decode) || !parseNumber(w[4], k.decodeAdd) ||
          codecs.count(*format) != 0)
        return fail("bad or repeated " + std::string(key) + " line");
      codecs.emplace(*format, k);
    } else if (key == "device") {
      DeviceCosts d;
      if (w.size() != 3 || c.device || !isName(w[1]) || (w[2] != "none" && !parseNumber(w[2], d.stagingSecondsPerByte)))
        return fail("bad or repeated device line");
      d.space = std::string(w[1]);
      c.device = std::move(d);
    } else {
      return fail("unknown key '" + std::string(key) + "'");
    }
  }
  lineNumber = 0;
  if (!seen[7]) return fail("empty file");
  for (int i : {0, 1, 2, 3, 4, 5, 6, 8}) {
    if (!seen[i]) return fail("missing ranks, nodes, ranks_per_node, isa, message_bytes, intra, inter or loaded");
  }
  const CalibrationTopology& t = c.topology;
  if (t.nodes > t.ranks || t.ranksPerNode > t.ranks ||
      static_cast<long long>(t.ranksPerNode) * t.nodes < static_cast<long long>(t.ranks))
    return fail("inconsistent topology (ranks, nodes and ranks_per_node do not fit together)");
  if (c.native.empty()) return fail("no native point");
  if (c.codec.count(Format::kFp32) == 0) return fail("no fp32 codec line");
  if (c.device && c.device->codec.count(Format::kFp32) == 0) return fail("no fp32 device_codec line");
  return c;
}

std::optional<Calibration> parseCalibration(std::string_view text, const CalibrationTopology& expected,
                                            std::string& why) {
  std::optional<Calibration> parsed = parseCalibrationText(text, why);
  if (!parsed) return std::nullopt;
  const Calibration& c = *parsed;
  if (!(c.topology == expected)) {
    std::ostringstream s;
    s << "measured on another topology (file: " << c.topology.ranks << " ranks, " << c.topology.nodes << " nodes, "
      << c.topology.ranksPerNode << " ranks/node, isa " << c.topology.isa << ", messages of "
      << c.topology.messageBytes << " bytes between nodes; this job: " << expected.ranks << ", " << expected.nodes
      << ", " << expected.ranksPerNode << ", " << expected.isa << ", " << expected.messageBytes << ")";
    why = s.str();
    return std::nullopt;
  }
  return c;
}

std::string describeCalibration(const Calibration& c, std::string_view prefix) {
  std::ostringstream out;
  char buffer[256];
  const std::string p(prefix);
  std::snprintf(buffer, sizeof buffer,
                "%d rank(s), %d node(s), %d rank(s)/node, isa %s, messages between nodes %zu B (0: whole); intra "
                "alpha %.1f us beta %.3f GB/s; inter alpha %.1f us beta %.3f GB/s; all ranks sending: %.3f GB/s "
                "each\n",
                c.topology.ranks, c.topology.nodes, c.topology.ranksPerNode, c.topology.isa.c_str(),
                c.topology.messageBytes,
                c.intra.alphaSeconds * 1e6, c.intra.bytesPerSecond / 1e9, c.inter.alphaSeconds * 1e6,
                c.inter.bytesPerSecond / 1e9, c.loaded.bytesPerSecond / 1e9);
  out << p << buffer;
  out << p << "native:";
  for (const auto& [bytes, seconds] : c.native) {
    std::snprintf(buffer, sizeof buffer, " %.0f KiB %.1f us;", bytes / 1024, seconds * 1e6);
    out << buffer;
  }
  out << '\n';
  for (const auto& [format, k] : c.codec) {
    std::snprintf(buffer, sizeof buffer, "codec %-7s encode %.3f decode %.3f decodeAdd %.3f GB/s of fp32\n",
                  std::string(formatName(format)).c_str(), 4e-9 / std::max(k.encode, 1e-15),
                  4e-9 / std::max(k.decode, 1e-15), 4e-9 / std::max(k.decodeAdd, 1e-15));
    out << p << buffer;
  }
  if (c.device) {
    if (c.device->stagingSecondsPerByte < 0)
      std::snprintf(buffer, sizeof buffer, "device %s: staging not measured (direct transport)\n", c.device->space.c_str());
    else
      std::snprintf(buffer, sizeof buffer, "device %s: staging %.3f GB/s (host <-> device, the slower way)\n",
                    c.device->space.c_str(), 1e-9 / std::max(c.device->stagingSecondsPerByte, 1e-18));
    out << p << buffer;
    for (const auto& [format, k] : c.device->codec) {
      std::snprintf(buffer, sizeof buffer,
                    "device codec %-7s encode %.3f decode %.3f decodeAdd %.3f GB/s of fp32\n",
                    std::string(formatName(format)).c_str(), 4e-9 / std::max(k.encode, 1e-15),
                    4e-9 / std::max(k.decode, 1e-15), 4e-9 / std::max(k.decodeAdd, 1e-15));
      out << p << buffer;
    }
  }
  return out.str();
}

}  // namespace adaprec::detail
