// twoshot: direct reduce-scatter + direct allgather ("two-shot" allreduce).
//
// p ranks, p chunks; rank r owns chunk r.
//   reduce-scatter: rank r encodes chunk j of its own data for every peer j != r and sends it there;
//     it receives every peer's encoding of chunk r and decodeAdds them, in the fixed order r+1, r+2, ...
//     (mod p), onto its own fp32 values (its own contribution is never quantized).
//   The owner encodes the fp32 sum once and keeps the decoded value (bit-identical results).
//   allgather: the owner sends that encoding to every peer; each rank decodes every chunk it receives.
// Schedule: one pass over segment indices; step k sends segment k of every other chunk (owners
// interleaved), reduces and forwards my segment k-1 and decodes the owners' segments k-2, so the
// allgather of early segments overlaps the reduce-scatter of later ones. Between emulated 1 Gbit/s
// nodes twoshot still runs at 0.7-0.9 of ring: the difference is the network (p-1 concurrent TCP
// flows per node against the ring's one), not this schedule (docs/algorithms.md, twoshot).
// Bytes sent per rank: 2 (p-1)/p * encodedBytes(count), in 2 (p-1) messages per segment index.
// Quantizations per value: at most 2 (the contributor's encode and the owner's encode), whatever p:
// the most accurate compressed algorithm. Each rank encodes each position once (one EF slot).
#include <span>
#include <vector>

#include "algorithm/algorithm.hpp"
#include "algorithm/layout.hpp"
#include "algorithm/steps.hpp"

namespace adaprec::detail {

void twoShotAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count) {
  const int p = ctx.transport.size();
  const int r = ctx.transport.rank();
  if (p == 1 || count == 0) return;
  const Layout layout(ctx.format, count, p, ctx.segmentCount);
  Steps steps(ctx);
  const std::size_t mine = layout.segments(r);
  const std::size_t myBytes = layout.chunksBytes(r, r + 1);

  // sendStage chunk j: my encoding for owner j (chunk r: my final encoding); reduceStage: every peer's
  // encoding of chunk r; gatherStage chunk j: owner j's final encoding.
  const std::span<std::byte> sendStage = ctx.workspace.bytes(0, layout.totalBytes());
  const std::span<std::byte> reduceStage = ctx.workspace.bytes(1, myBytes * (p - 1));
  const std::span<std::byte> gatherStage = ctx.workspace.bytes(2, layout.totalBytes());
  std::vector<RequestPtr> sends;
  std::vector<std::vector<RequestPtr>> reduceRecvs(p);
  std::vector<std::vector<RequestPtr>> gatherRecvs(p);

  auto reduceSlot = [&](int peer) {  // where peer's encoding of chunk r lands
    return reduceStage.data() + myBytes * static_cast<std::size_t>((peer - r - 1 + p) % p);
  };
  for (int d = 1; d < p; ++d) {
    const int peer = (r + d) % p;
    for (std::size_t k = 0; k < mine; ++k)
      reduceRecvs[peer].push_back(steps.recv(
          peer, reduceSlot(peer) + layout.segmentByteOffset(r, k) - layout.chunkByteOffset(r),
          layout.segmentBytes(r, k), kTagReduceScatter));
    for (std::size_t k = 0; k < layout.segments(peer); ++k)
      gatherRecvs[peer].push_back(steps.recv(
          peer, gatherStage.data() + layout.segmentByteOffset(peer, k),
          layout.segmentBytes(peer, k), kTagAllgather));
  }

  // One pass over segment indices k, the two phases overlapped: at step k send segment k of every
  // other chunk to its owner (owners interleaved, so each owner gets segment k from all peers at
  // about the same time), then reduce my own segment k-1 (its p-1 pieces were sent a step earlier)
  // and send its final encoding to everyone, then decode every owner's segment k-2. (Sending all
  // segments for the nearest owner first made each owner's last contribution arrive only at the end of
  // the reduce-scatter, so no allgather traffic could overlap it.)
  auto sendReduceScatter = [&](std::size_t k) {
    for (int d = 1; d < p; ++d) {
      const int owner = (r + d) % p;
      if (k >= layout.segments(owner)) continue;
      std::byte* dst = sendStage.data() + layout.segmentByteOffset(owner, k);
      const std::size_t n = layout.segmentCount(owner, k);
      const std::size_t bytes = layout.segmentBytes(owner, k);
      steps.encode(buf + layout.segmentOffset(owner, k), n, dst, bytes, 0,
                   layout.segmentOffset(owner, k), count);
      sends.push_back(steps.send(owner, dst, bytes, n, kTagReduceScatter));
    }
  };
  // Sum my segment k in the fixed order r+1, r+2, ... onto my own values, encode it once and send it
  // to everyone.
  auto reduceMine = [&](std::size_t k) {
    if (k >= mine) return;
    const std::size_t n = layout.segmentCount(r, k);
    const std::size_t bytes = layout.segmentBytes(r, k);
    float* acc = buf + layout.segmentOffset(r, k);
    for (int d = 1; d < p; ++d) {
      const int peer = (r + d) % p;
      steps.waitRecv(*reduceRecvs[peer][k], bytes);
      steps.decodeAdd(reduceSlot(peer) + layout.segmentByteOffset(r, k) - layout.chunkByteOffset(r),
                      bytes, acc, n);
    }
    std::byte* dst = sendStage.data() + layout.segmentByteOffset(r, k);
    steps.encodeKeepDecoded(acc, n, dst, bytes, 0, layout.segmentOffset(r, k), count);
    for (int d = 1; d < p; ++d) sends.push_back(steps.send((r + d) % p, dst, bytes, n, kTagAllgather));
  };
  auto decodeGathered = [&](std::size_t k) {
    for (int d = p - 1; d >= 1; --d) {
      const int owner = (r + d) % p;
      if (k >= layout.segments(owner)) continue;
      const std::size_t bytes = layout.segmentBytes(owner, k);
      steps.waitRecv(*gatherRecvs[owner][k], bytes);
      steps.decode(gatherStage.data() + layout.segmentByteOffset(owner, k), bytes,
                   buf + layout.segmentOffset(owner, k), layout.segmentCount(owner, k));
    }
  };
  const std::size_t most = layout.segments(0);  // chunk 0 is the largest
  for (std::size_t k = 0; k < most + 2; ++k) {
    if (k < most) sendReduceScatter(k);
    if (k >= 1) reduceMine(k - 1);
    if (k >= 2) decodeGathered(k - 2);
  }
  steps.waitAll(sends);
}

}  // namespace adaprec::detail
