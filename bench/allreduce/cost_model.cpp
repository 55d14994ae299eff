#include "cost_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "bench_data.hpp"

namespace adaprec::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPingTag = kMaxAlgorithmTag - 2;
constexpr std::size_t kSmallBytes = 8;
constexpr std::size_t kLargeBytes = std::size_t{8} << 20;  // >> any tbf burst vcluster sets
constexpr std::size_t kCodecCount = std::size_t{1} << 20;
constexpr int kSmallReps = 50;
constexpr int kLargeReps = 5;
constexpr int kCodecReps = 5;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Median half round trip of `bytes` between rank 0 and `peer`, on rank 0 (0 elsewhere).
double halfRoundTrip(Transport& transport, int peer, std::size_t bytes, int reps) {
  std::vector<char> buffer(bytes, 0);
  std::vector<double> times;
  const int me = transport.rank();
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms the connection up
    const auto start = Clock::now();
    if (me == 0) {
      transport.isend(peer, buffer.data(), bytes, kPingTag)->wait();
      transport.irecv(peer, buffer.data(), bytes, kPingTag)->wait();
    } else if (me == peer) {
      transport.irecv(0, buffer.data(), bytes, kPingTag)->wait();
      transport.isend(0, buffer.data(), bytes, kPingTag)->wait();
    }
    if (rep > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count() / 2);
  }
  return me == 0 ? median(times) : 0.0;
}

// Collective: each rank of `members` (in ring order) sends kLargeBytes to the next one while receiving
// from the previous one, the pattern of an allreduce step; every rank returns the bytes per second a
// member achieved (slowest member). Members share cores and links the way an allreduce's ranks do.
double ringBytesPerSecond(Transport& transport, RankCollectives& ranks, const std::vector<int>& members,
                          double alphaSeconds) {
  std::vector<char> out(kLargeBytes, 1);
  std::vector<char> in(kLargeBytes, 0);
  const auto me = std::find(members.begin(), members.end(), transport.rank());
  std::vector<double> times;
  for (int rep = 0; rep <= kLargeReps; ++rep) {  // rep 0 opens the connections
    ranks.barrier();
    const auto start = Clock::now();
    if (me != members.end() && members.size() > 1) {
      const std::size_t i = static_cast<std::size_t>(me - members.begin());
      const int next = members[(i + 1) % members.size()];
      const int previous = members[(i + members.size() - 1) % members.size()];
      RequestPtr receive = transport.irecv(previous, in.data(), in.size(), kPingTag);
      RequestPtr send = transport.isend(next, out.data(), out.size(), kPingTag);
      send->wait();
      receive->wait();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (rep > 0) times.push_back(ranks.maxOverRanks(seconds));
  }
  return static_cast<double>(kLargeBytes) / std::max(median(times) - alphaSeconds, 1e-9);
}

// Collective; every rank returns rank 0's measurement of the link to `peer`.
LinkEstimate measureLink(Transport& transport, RankCollectives& ranks, int peer) {
  ranks.barrier();
  const double small = halfRoundTrip(transport, peer, kSmallBytes, kSmallReps);
  ranks.barrier();
  const double large = halfRoundTrip(transport, peer, kLargeBytes, kLargeReps);
  std::vector<double> shared{small, large};
  ranks.maxOverRanks(shared);  // only rank 0 holds non-zero values
  LinkEstimate link;
  link.alphaSeconds = shared[0];
  link.bytesPerSecond = static_cast<double>(kLargeBytes) / std::max(shared[1] - shared[0], 1e-9);
  return link;
}

template <class F>
double medianSecondsPerElement(F&& f) {
  std::vector<double> times;
  f();
  for (int rep = 0; rep < kCodecReps; ++rep) {
    const auto start = Clock::now();
    f();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(times) / static_cast<double>(kCodecCount);
}

}  // namespace

CostModel CostModel::measure(Transport& transport, RankCollectives& ranks, std::span<const Format> formats) {
  CostModel model;
  model.ranks_ = ranks.size();
  const std::vector<int> ids = ranks.nodeIds();
  model.nodes_ = static_cast<int>(std::set<int>(ids.begin(), ids.end()).size());
  model.ranksPerNode_ = static_cast<int>(std::count(ids.begin(), ids.end(), ids[0]));

  int interPeer = -1;
  int intraPeer = -1;
  std::vector<int> leaders;  // lowest rank of each node
  std::set<int> seen;
  for (int r = 0; r < ranks.size(); ++r) {
    const int id = ids[static_cast<std::size_t>(r)];
    if (seen.insert(id).second) leaders.push_back(r);
    if (r == 0) continue;
    if (id != ids[0] && interPeer < 0) interPeer = r;
    if (id == ids[0] && intraPeer < 0) intraPeer = r;
  }
  if (intraPeer >= 0) model.intra_ = measureLink(transport, ranks, intraPeer);
  model.inter_ = interPeer >= 0 ? measureLink(transport, ranks, interPeer) : model.intra_;
  if (intraPeer < 0) model.intra_ = model.inter_;
  // Bandwidth while everyone sends at once: all ranks (flat algorithms), node leaders (hierarchical).
  std::vector<int> everyone(static_cast<std::size_t>(ranks.size()));
  for (int r = 0; r < ranks.size(); ++r) everyone[static_cast<std::size_t>(r)] = r;
  model.flat_ = model.nodes_ > 1 ? model.inter_ : model.intra_;
  model.leaders_ = model.inter_;
  if (ranks.size() > 1) model.flat_.bytesPerSecond = ringBytesPerSecond(transport, ranks, everyone, model.flat_.alphaSeconds);
  if (leaders.size() > 1 && leaders.size() < everyone.size()) {
    model.leaders_.bytesPerSecond = ringBytesPerSecond(transport, ranks, leaders, model.leaders_.alphaSeconds);
  } else {
    model.leaders_ = model.flat_;
  }

  std::set<Format> wanted(formats.begin(), formats.end());
  wanted.insert(Format::kFp32);
  const BenchData data(777);
  std::vector<float> input(kCodecCount);
  data.fill(ranks.rank(), input.data(), 0, kCodecCount);
  std::vector<float> output(kCodecCount, 0.0f);
  for (Format format : wanted) {
    std::vector<unsigned char> chunk(encodedBytes(format, kCodecCount));
    ranks.barrier();  // every rank encodes at the same time, as in an allreduce
    std::vector<double> perElement{
        medianSecondsPerElement([&] { encode(format, input.data(), kCodecCount, chunk.data(), chunk.size()); }),
        medianSecondsPerElement([&] { decode(format, chunk.data(), chunk.size(), output.data(), kCodecCount); }),
        medianSecondsPerElement([&] { decodeAdd(format, chunk.data(), chunk.size(), output.data(), kCodecCount); }),
    };
    ranks.maxOverRanks(perElement);
    model.codec_[format] = CodecEstimate{perElement[0], perElement[1], perElement[2]};
  }
  return model;
}

const CodecEstimate& CostModel::codec(Format format) const {
  auto it = codec_.find(format);
  ADAPREC_CHECK(it != codec_.end(), ErrorCode::kInternal, "codec of " << formatName(format) << " not measured");
  return it->second;
}

// Per rank, for `ranks` ranks, c = ceil(n / ranks), E(m) = encodedBytes(format, m), L = ceil(log2 ranks):
//   ring            steps 2(P-1)  bytes 2(P-1) E(c)  codec P enc(c) + (P-1) decAdd(c) + P dec(c)
//   twoshot         steps 2(P-1)  bytes 2(P-1) E(c)  codec as ring (all chunks at once, one alpha each)
//   rabenseifner    steps 2L      bytes 2(P-1) E(c)  codec as ring (halving sizes sum to the same)
//   recursive_doubl steps L       bytes L E(n)       codec L (enc(n) + decAdd(n))
//   native          steps 2(P-1)  bytes 2(P-1) 4c    codec (P-1) add(c)   (fp32 ring, as MPI does for big n)
CostModel::Parts CostModel::flatParts(Algorithm algorithm, Format format, std::size_t count, int ranks) const {
  Parts parts;
  if (ranks <= 1) return parts;
  const double p = ranks;
  const std::size_t chunk = (count + static_cast<std::size_t>(ranks) - 1) / static_cast<std::size_t>(ranks);
  const double c = static_cast<double>(chunk);
  const double n = static_cast<double>(count);
  const double logP = std::ceil(std::log2(p));
  const CodecEstimate& k = codec(format);
  const double ringCodec = p * k.encode * c + (p - 1) * k.decodeAdd * c + p * k.decode * c;
  const double chunkBytes = static_cast<double>(encodedBytes(format, chunk));
  switch (algorithm) {
    case Algorithm::kRing:
      parts = {2 * (p - 1), 2 * (p - 1) * chunkBytes, ringCodec};
      break;
    case Algorithm::kTwoShot:
      parts = {2 * (p - 1), 2 * (p - 1) * chunkBytes, ringCodec};
      break;
    case Algorithm::kRabenseifner:
      parts = {2 * logP, 2 * (p - 1) * chunkBytes, ringCodec};
      break;
    case Algorithm::kRecursiveDoubling:
      parts = {logP, logP * static_cast<double>(encodedBytes(format, count)), logP * (k.encode + k.decodeAdd) * n};
      break;
    case Algorithm::kNative:
      parts = {2 * (p - 1), 2 * (p - 1) * 4 * c, (p - 1) * codec(Format::kFp32).decodeAdd * c};
      break;
    default:
      ADAPREC_FAIL(ErrorCode::kInternal, "no flat model for " << algorithmName(algorithm));
  }
  return parts;
}

double CostModel::predictSeconds(Algorithm algorithm, Format format, std::size_t count) const {
  ADAPREC_CHECK_ARG(algorithm != Algorithm::kAuto, "predictSeconds needs a resolved algorithm");
  ADAPREC_CHECK_ARG(ranks_ > 1, "the cost model needs at least 2 ranks");
  auto time = [](const Parts& parts, const LinkEstimate& link) {
    return parts.steps * link.alphaSeconds + parts.wireBytes / link.bytesPerSecond + parts.codecSeconds;
  };
  if (algorithm != Algorithm::kHierarchical) return time(flatParts(algorithm, format, count, ranks_), flat_);
  // hierarchical: fp32 reduce to the node leader and broadcast back (each log2(K) steps of n floats over
  // the intra-node link, K-1 fp32 adds of n), a ring among the node leaders on the inter-node link.
  const double k = ranksPerNode_;
  const double n = static_cast<double>(count);
  double intra = 0;
  if (ranksPerNode_ > 1) {
    const double logK = std::ceil(std::log2(k));
    intra = 2 * logK * (intra_.alphaSeconds + 4 * n / intra_.bytesPerSecond) +
            (k - 1) * codec(Format::kFp32).decodeAdd * n;
  }
  return intra + time(flatParts(Algorithm::kRing, format, count, nodes_), leaders_);
}

std::string CostModel::describe() const {
  char buffer[512];
  std::string text;
  std::snprintf(buffer, sizeof buffer,
                "# cost model: %d rank(s), %d node(s), %d rank(s)/node\n"
                "#   inter-node link (ping-pong): alpha %.1f us, beta %.3f GB/s\n"
                "#   intra-node link (ping-pong): alpha %.1f us, beta %.3f GB/s\n"
                "#   all ranks sending at once (ring): beta %.3f GB/s; node leaders only: beta %.3f GB/s\n",
                ranks_, nodes_, ranksPerNode_, inter_.alphaSeconds * 1e6, inter_.bytesPerSecond / 1e9,
                intra_.alphaSeconds * 1e6, intra_.bytesPerSecond / 1e9, flat_.bytesPerSecond / 1e9,
                leaders_.bytesPerSecond / 1e9);
  text += buffer;
  for (const auto& [format, k] : codec_) {
    std::snprintf(buffer, sizeof buffer, "#   codec %-7s encode %.3f decode %.3f decodeAdd %.3f GB/s of fp32\n",
                  std::string(formatName(format)).c_str(), 4e-9 / k.encode, 4e-9 / k.decode, 4e-9 / k.decodeAdd);
    text += buffer;
  }
  return text;
}

}  // namespace adaprec::bench
