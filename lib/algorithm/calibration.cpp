// The calibration probe. Sizes are chosen to be well past any per-message cost and any tbf burst of
// tools/vcluster, yet short: on 4 emulated nodes at 1 Gbit/s the whole probe takes a few hundred ms,
// on shared memory a few tens (docs/algorithms.md, "Calibration", has the measured cost).
#include "algorithm/calibration.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <map>
#include <set>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/device_codec.hpp"

namespace adaprec::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kSmallBytes = 8;
constexpr int kSmallReps = 20;
constexpr int kLargeReps = 3;  // + one untimed warm-up (opens connections, faults pages in)
// Large messages: past the tbf burst (~128 KiB at 1 Gbit/s) and past TCP's slow start after the idle
// barrier (1 MiB measured 0.040 GB/s per rank on 4 emulated nodes at 1 Gbit/s where an allreduce's
// streams got 0.073); on one node, past the caches.
constexpr std::size_t kLinkBytesNetwork = std::size_t{4} << 20;
constexpr std::size_t kLinkBytesShared = std::size_t{8} << 20;
// Why the native curve is probed at kNativeProbeBytes (cost_model.hpp), 1, 4 and 16 MiB: on one node
// the model compares with native only up to the largest probe (chooseAlgorithm); between nodes the
// curve is extrapolated along its slope above the largest, so that is 16 MiB there too: extrapolated from 1 and 4 MiB, a 64 MiB prediction is
// 21 t(4) - 20 t(1) and carried 21x the noise of one 4 MiB call (on 2 emulated nodes x 2 ranks at
// 1 Gbit/s it predicted 178-1233 ms for calls that took 670-790 ms); from 4 and 16 MiB, 5x.
// Wherever the model proposes an engine algorithm the trial measures native anyway.
constexpr int kNativeReps = 2;
// The codec at 8 MiB of fp32, past the caches: the model decides for calls whose chunks stream from
// memory (the large sizes where compressing pays). At 2^18
// elements the probe ran in cache and on shared memory the model under-predicted compressed
// allreduces at 64 MiB by 60-86 % (4 ranks on 2 cores: every rank encodes at once from memory).
constexpr std::size_t kCodecCount = std::size_t{1} << 21;
constexpr double kCodecProbeSeconds = 0.02;
constexpr std::size_t kDeviceCodecMaxCount = std::size_t{1} << 24;  // the device probe on a call's buffer
// One window per device measurement: the device runs the pass whatever the host thread's scheduling
// (the host codec's windows lost whole slices to descheduled ranks), and the probe runs inside the
// first call of each format on the device, so each window is that call's delay.
constexpr int kDeviceCodecWindows = 1;
// 5 ms: hundreds of passes of a GPU's kernels at the sizes where compressing can pay.
constexpr double kDeviceProbeSeconds = 0.005;
constexpr int kCodecWindows = 3;

double seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Median half round trip of `bytes` between rank 0 and `peer`, on those two ranks (0 elsewhere).
double halfRoundTrip(Transport& transport, int peer, std::size_t bytes, int reps) {
  const int me = transport.rank();
  if (me != 0 && me != peer) return 0.0;
  std::vector<std::byte> buffer(bytes);
  std::vector<double> times;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms the connection up
    const auto start = Clock::now();
    if (me == 0) {
      transport.isend(peer, buffer.data(), bytes, kTagCalibration)->wait();
      transport.irecv(peer, buffer.data(), bytes, kTagCalibration)->wait();
    } else {
      transport.irecv(0, buffer.data(), bytes, kTagCalibration)->wait();
      transport.isend(0, buffer.data(), bytes, kTagCalibration)->wait();
    }
    if (rep > 0) times.push_back(seconds(start) / 2);
  }
  return median(times);
}

LinkCost pingPong(Transport& transport, int peer, std::size_t largeBytes) {
  transport.barrier();
  const double small = halfRoundTrip(transport, peer, kSmallBytes, kSmallReps);
  transport.barrier();
  const double large = halfRoundTrip(transport, peer, largeBytes, kLargeReps);
  if (small == 0.0 && large == 0.0) return {};  // not taking part: 0 loses the max-reduction
  return {small, static_cast<double>(largeBytes) / std::max(large - small, 1e-9)};
}

// Every rank sends `bytes` to next[r] while receiving from previous[r], all at once, as messages of at
// most `pieceBytes` (0: one message): the pieces the algorithms send over that link
// (AlgorithmContext::messageBytes), so the probe meets the protocol they meet. Between nodes one 4 MiB
// message goes by Open MPI's rendezvous, whose handshake queues behind the peer's own bulk in the
// opposite direction: on 2 emulated nodes x 2 ranks at 1 Gbit/s that probe measured anything from
// 0.031 to 0.060 GB/s per rank from run to run where the algorithms' eager pieces steadily got 0.058.
double loadedBytesPerSecond(Transport& transport, const std::vector<int>& next, const std::vector<int>& previous,
                            std::size_t bytes, std::size_t pieceBytes, double alphaSeconds) {
  const int me = transport.rank();
  const std::size_t piece = pieceBytes == 0 ? bytes : pieceBytes;
  std::vector<std::byte> out(bytes, std::byte{1});
  std::vector<std::byte> in(bytes);
  std::vector<double> times;
  std::vector<RequestPtr> requests;
  for (int rep = 0; rep <= kLargeReps; ++rep) {
    transport.barrier();
    const auto start = Clock::now();
    for (std::size_t offset = 0; offset < bytes; offset += piece)
      requests.push_back(transport.irecv(previous[static_cast<std::size_t>(me)], in.data() + offset,
                                         std::min(piece, bytes - offset), kTagCalibration));
    for (std::size_t offset = 0; offset < bytes; offset += piece)
      requests.push_back(transport.isend(next[static_cast<std::size_t>(me)], out.data() + offset,
                                         std::min(piece, bytes - offset), kTagCalibration));
    for (RequestPtr& request : requests) request->wait();
    requests.clear();
    if (rep > 0) times.push_back(seconds(start));
  }
  return static_cast<double>(bytes) / std::max(median(times) - alphaSeconds, 1e-9);
}

std::vector<float> gradientLike(std::size_t count, int rank) {
  std::vector<float> values(count);
  std::uint32_t state = 0x9e3779b9u ^ static_cast<std::uint32_t>(rank * 7919 + 1);
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.01f;
  }
  return values;
}

// Seconds per element of f (one call codes kCodecCount elements): calls repeated for at least
// kCodecProbeSeconds of wall time after one untimed call. Every rank probes at once, and a window
// that long spans the scheduler's time slices, so where ranks outnumber cores (or share memory
// bandwidth) the probe sees the share each rank gets inside an allreduce; a window of a few calls
// did not (on 4 ranks over 2 cores it measured 4x the speed the codec had in 64 MiB allreduces).
// The median of kCodecWindows such windows: one window can still lose most of itself to a rank
// descheduled for longer than a slice (on 2 emulated nodes x 2 ranks one fp8s decode window measured
// 0.43 GB/s where the others measured 6.3-7.4, and the agreed max put every fp8s prediction +40-60 %
// off). Bounded by time, not by speed: a slow (sanitized) build probes no longer than a fast one.
template <class F>
double windowSecondsPerElement(F&& f, std::size_t elementsPerCall = kCodecCount, int windowCount = kCodecWindows,
                               double windowSeconds = kCodecProbeSeconds) {
  f();
  std::vector<double> windows;
  for (int window = 0; window < windowCount; ++window) {
    const auto start = Clock::now();
    std::size_t calls = 0;
    double elapsed = 0;
    do {
      f();
      ++calls;
      elapsed = seconds(start);
    } while (elapsed < windowSeconds);
    windows.push_back(elapsed / static_cast<double>(calls * elementsPerCall));
  }
  return median(std::move(windows));
}

// Time-like encodings for the max-reduction: a non-negative double's bits order as its value.
std::uint64_t bitsOf(double v) { return std::bit_cast<std::uint64_t>(std::max(v, 0.0)); }
double valueOf(std::uint64_t bits) { return std::bit_cast<double>(bits); }
double perByte(double bytesPerSecond) { return bytesPerSecond > 0 ? 1.0 / bytesPerSecond : 0.0; }
double perSecond(double secondsPerByte) { return secondsPerByte > 0 ? 1.0 / secondsPerByte : 0.0; }

}  // namespace

int RankLayout::nodes() const {
  return nodeOf.empty() ? 1 : *std::max_element(nodeOf.begin(), nodeOf.end()) + 1;
}

int RankLayout::maxRanksPerNode() const {
  std::map<int, int> perNode;
  int most = 1;
  for (int node : nodeOf) most = std::max(most, ++perNode[node]);
  return most;
}

CodecCost measureCodec(Format format) {
  const std::vector<float> input = gradientLike(kCodecCount, 1);
  std::vector<float> output(kCodecCount, 0.0f);
  std::vector<unsigned char> chunk(encodedBytes(format, kCodecCount));
  CodecCost k;
  k.encode = windowSecondsPerElement([&] { encode(format, input.data(), kCodecCount, chunk.data(), chunk.size()); });
  k.decode = windowSecondsPerElement([&] { decode(format, chunk.data(), chunk.size(), output.data(), kCodecCount); });
  k.decodeAdd =
      windowSecondsPerElement([&] { decodeAdd(format, chunk.data(), chunk.size(), output.data(), kCodecCount); });
  return k;
}

CodecCost measureDeviceCodec(DeviceCodec& device, Format format, std::size_t callElements, const float* input,
                             std::size_t inputCount) {
  // As an allreduce calls it: one call per segment, queued back to back, one synchronization per pass
  // (a GPU's launch cost per call counts). The values: the caller's own buffer on the device where
  // given (real data at the call's own size, up to 64 MiB: past a GPU's L2 cache where the call is;
  // nothing copied between host and device), else 8 MiB of gradient-like values uploaded once through
  // pinned memory.
  DeviceScratch values(device), output(device), chunks(device);
  if (input == nullptr || inputCount == 0) {
    inputCount = kCodecCount;
    auto* in = static_cast<float*>(values.get(kCodecCount * sizeof(float)));
    const std::vector<float> host = gradientLike(kCodecCount, 1);
    HostStaging upload(device, kCodecCount * sizeof(float));  // pinned: a pageable copy would wait for itself
    std::copy(host.begin(), host.end(), upload.as<float>());
    device.copyToDevice(in, upload.as<float>(), kCodecCount * sizeof(float));
    device.synchronize();
    input = in;
  }
  const std::size_t total = std::min(inputCount, kDeviceCodecMaxCount);
  const std::size_t per = std::max<std::size_t>(1, std::min(callElements, total));
  auto* out = static_cast<float*>(output.get(total * sizeof(float)));
  std::vector<std::size_t> chunkOffsets;
  std::size_t chunkBytes = 0;
  for (std::size_t first = 0; first < total; first += per) {
    chunkOffsets.push_back(chunkBytes);
    chunkBytes += encodedBytes(format, std::min(per, total - first));
  }
  chunkOffsets.push_back(chunkBytes);
  auto* chunk = static_cast<std::byte*>(chunks.get(chunkBytes));
  device.fillZero(out, total * sizeof(float));
  device.synchronize();
  auto pass = [&](auto&& call) {
    for (std::size_t i = 0, first = 0; first < total; ++i, first += per)
      call(first, std::min(per, total - first), chunk + chunkOffsets[i], chunkOffsets[i + 1] - chunkOffsets[i]);
    device.synchronize();
  };
  CodecCost k;
  k.encode = windowSecondsPerElement(
      [&] {
        pass([&](std::size_t f, std::size_t n, std::byte* at, std::size_t b) { device.encode(format, input + f, n, at, b); });
      },
      total, kDeviceCodecWindows, kDeviceProbeSeconds);
  k.decode = windowSecondsPerElement(
      [&] {
        pass([&](std::size_t f, std::size_t n, std::byte* at, std::size_t b) { device.decode(format, at, b, out + f, n); });
      },
      total, kDeviceCodecWindows, kDeviceProbeSeconds);
  k.decodeAdd = windowSecondsPerElement(
      [&] {
        pass([&](std::size_t f, std::size_t n, std::byte* at, std::size_t b) { device.decodeAdd(format, at, b, out + f, n); });
      },
      total, kDeviceCodecWindows, kDeviceProbeSeconds);
  return k;
}

double measureStaging(DeviceCodec& device) {
  const std::size_t bytes = kCodecCount * sizeof(float);
  DeviceScratch onDevice(device);
  void* d = onDevice.get(bytes);
  HostStaging host(device, bytes);
  std::fill_n(host.as<unsigned char>(), bytes, 0);
  device.fillZero(d, bytes);
  device.synchronize();
  const double down = windowSecondsPerElement(
      [&] {
        device.copyToHost(host.as<void>(), d, bytes);
        device.synchronize();
      },
      kCodecCount, kDeviceCodecWindows, kDeviceProbeSeconds);
  const double up = windowSecondsPerElement(
      [&] {
        device.copyToDevice(d, host.as<void>(), bytes);
        device.synchronize();
      },
      kCodecCount, kDeviceCodecWindows, kDeviceProbeSeconds);
  return std::max(down, up) / sizeof(float);  // per element of kCodecCount -> per byte
}

Calibration measureCalibration(Transport& transport, const RankLayout& layout, const CalibrationTopology& topology) {
  Calibration c;
  c.topology = topology;
  const int p = transport.size();
  const int me = transport.rank();
  const std::vector<int>& nodeOf = layout.nodeOf;
  int intraPeer = -1;
  int interPeer = -1;
  for (int r = 1; r < p; ++r) {
    const bool sameNode = nodeOf[static_cast<std::size_t>(r)] == nodeOf[0];
    if (sameNode && intraPeer < 0) intraPeer = r;
    if (!sameNode && interPeer < 0) interPeer = r;
  }
  const int nodes = layout.nodes();
  const std::size_t linkBytes = nodes > 1 ? kLinkBytesNetwork : kLinkBytesShared;
  // The inter-node ping-pong's bandwidth is only reported (flat algorithms use the loaded one): 1 MiB.
  if (intraPeer >= 0) c.intra = pingPong(transport, intraPeer, kLinkBytesShared);
  if (interPeer >= 0) c.inter = pingPong(transport, interPeer, std::size_t{1} << 20);
  // Every rank knows the layout, so every rank takes the same branches above and below.
  if (intraPeer < 0) c.intra = c.inter;
  if (interPeer < 0) c.inter = c.intra;

  // The loaded pattern: with equal nodes of L ranks, L rings of the ranks sharing a local rank (what
  // hierarchical's inner step does, and every link carries L streams, as in a flat algorithm); else
  // one ring over all ranks.
  std::vector<std::vector<int>> members(static_cast<std::size_t>(nodes));
  for (int r = 0; r < p; ++r) members[static_cast<std::size_t>(nodeOf[static_cast<std::size_t>(r)])].push_back(r);
  const bool even = std::all_of(members.begin(), members.end(),
                                [&](const std::vector<int>& m) { return m.size() == members[0].size(); });
  std::vector<int> next(static_cast<std::size_t>(p));
  std::vector<int> previous(static_cast<std::size_t>(p));
  for (int node = 0; node < nodes; ++node) {
    const auto& m = members[static_cast<std::size_t>(node)];
    for (std::size_t i = 0; i < m.size(); ++i) {
      const int r = m[i];
      if (even && nodes > 1) {
        next[static_cast<std::size_t>(r)] = members[static_cast<std::size_t>((node + 1) % nodes)][i];
        previous[static_cast<std::size_t>(r)] = members[static_cast<std::size_t>((node + nodes - 1) % nodes)][i];
      } else {
        next[static_cast<std::size_t>(r)] = (r + 1) % p;
        previous[static_cast<std::size_t>(r)] = (r + p - 1) % p;
      }
    }
  }
  c.loaded.alphaSeconds = c.inter.alphaSeconds;
  c.loaded.bytesPerSecond =
      p > 1 ? loadedBytesPerSecond(transport, next, previous, linkBytes, topology.messageBytes,
                                   c.inter.alphaSeconds)
            : 0.0;
  // Non-participants of the ping-pongs report 0; the agreement's max brings rank 0's values.
  (void)me;

  // The transport's own fp32 allreduce at the probe sizes (each rank's fastest; agreed as the max).
  const std::span<const std::size_t> sizes(kNativeProbeBytes);
  std::vector<float> buffer = gradientLike(sizes.back() / sizeof(float), me);
  // One warm-up before the smallest size only, then kNativeReps timed calls per size, the faster kept:
  // a disturbed call only ever adds time (the native calls are most of the probe's time between nodes).
  for (std::size_t bytes : sizes) {
    std::vector<double> times;
    const int warm = bytes == sizes.front() ? 1 : 0;
    for (int rep = 0; rep < warm + kNativeReps; ++rep) {
      transport.barrier();
      const auto start = Clock::now();
      transport.nativeAllreduce(buffer.data(), bytes / sizeof(float), NativeType::kFp32);
      if (rep >= warm) times.push_back(seconds(start));
      std::fill_n(buffer.begin(), bytes / sizeof(float), 1e-3f);  // keep sums finite
    }
    c.native.emplace_back(static_cast<double>(bytes), *std::min_element(times.begin(), times.end()));
  }
  transport.barrier();  // the codec runs on every rank at once, as inside an allreduce
  c.codec[Format::kFp32] = measureCodec(Format::kFp32);
  return c;
}

Calibration agreeCalibration(Transport& transport, const Calibration& local) {
  std::vector<std::uint64_t> words;
  auto link = [&](const LinkCost& l) {
    words.push_back(bitsOf(l.alphaSeconds));
    words.push_back(bitsOf(perByte(l.bytesPerSecond)));
  };
  link(local.intra);
  link(local.inter);
  link(local.loaded);
  for (const auto& point : local.native) words.push_back(bitsOf(point.second));
  for (const auto& entry : local.codec) {
    words.push_back(bitsOf(entry.second.encode));
    words.push_back(bitsOf(entry.second.decode));
    words.push_back(bitsOf(entry.second.decodeAdd));
  }
  transport.allreduceMax(words.data(), words.size());
  Calibration agreed = local;
  std::size_t i = 0;
  auto take = [&](LinkCost& l) {
    l.alphaSeconds = valueOf(words[i++]);
    l.bytesPerSecond = perSecond(valueOf(words[i++]));
  };
  take(agreed.intra);
  take(agreed.inter);
  take(agreed.loaded);
  for (auto& point : agreed.native) point.second = valueOf(words[i++]);
  for (auto& entry : agreed.codec) {
    entry.second.encode = valueOf(words[i++]);
    entry.second.decode = valueOf(words[i++]);
    entry.second.decodeAdd = valueOf(words[i++]);
  }
  return agreed;
}

double agreeSeconds(Transport& transport, double local) {
  std::uint64_t word = bitsOf(local);
  transport.allreduceMax(&word, 1);
  return valueOf(word);
}

CodecCost agreeCodec(Transport& transport, const CodecCost& local) {
  std::uint64_t words[3] = {bitsOf(local.encode), bitsOf(local.decode), bitsOf(local.decodeAdd)};
  transport.allreduceMax(words, 3);
  return {valueOf(words[0]), valueOf(words[1]), valueOf(words[2])};
}

}  // namespace adaprec::detail
