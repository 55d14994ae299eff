// rabenseifner: recursive-halving reduce-scatter + recursive-doubling allgather (Open MPI:
// allreduce_intra_redscat_allgather), with the standard treatment of non-power-of-two rank counts.
//
// p ranks; q = largest power of two <= p; extra = p - q. The buffer is cut into q chunks.
//   pre-step (extra > 0): among ranks 0 .. 2*extra-1, each even rank encodes its whole vector and
//     sends it to the odd rank above it, which decodeAdds it and takes part in the core as
//     core rank r/2; the even ranks wait. Ranks >= 2*extra are core rank r - extra.
//   reduce-scatter, distance d = q/2, q/4, ..., 1: a core rank keeps the half of its current chunk
//     range selected by bit d of its core rank, encodes the other half and sends it to core partner
//     (core ^ d); it decodeAdds the partner's encoding of the kept half. Core rank c ends owning
//     chunk c, fully summed, and encodes it once, keeping the decoded value.
//   allgather, distance d = 1, 2, ..., q/2: partners swap the encoded bytes of their current ranges
//     unchanged (one message per round, cut into pieces of at most 64 MiB) and decode them.
// Between nodes (AlgorithmContext::messageBytes) every message is cut into pieces of at most
// ctx.messageBytes, sent eagerly, as ring and twoshot do: whole segments and ranges went by
// rendezvous, whose handshakes queue behind the bulk on the links (on 4 emulated nodes at 1 Gbit/s,
// 16 MiB, rabenseifner took 1.4-1.7x ring's time with the same bytes).
//   post-step: each odd rank below 2*extra sends all encoded chunks to the even rank below it.
// Bytes sent per core rank: 2 (q-1)/q * encodedBytes(count) (+ encodedBytes(count) for pre/post);
// 2 log2(q) messages per segment index.
// Quantizations per value: log2(q) + 1 (+1 for the contributions of pre-step ranks). The halves a rank
// sends are disjoint, so each rank encodes each position at most once per call (one EF slot).
#include <algorithm>
#include <span>
#include <vector>

#include "algorithm/algorithm.hpp"
#include "algorithm/layout.hpp"
#include "algorithm/steps.hpp"

namespace adaprec::detail {

void rabenseifnerAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count) {
  const int p = ctx.transport.size();
  const int r = ctx.transport.rank();
  if (p == 1 || count == 0) return;
  int q = 1;
  while (q * 2 <= p) q *= 2;
  const int extra = p - q;
  const Layout layout(ctx.format, count, q, ctx.segmentCount);
  Steps steps(ctx);
  const std::span<std::byte> sendStage = ctx.workspace.bytes(0, layout.totalBytes());
  const std::span<std::byte> recvStage = ctx.workspace.bytes(1, layout.totalBytes());
  std::vector<RequestPtr> sends;
  const std::size_t piece = ctx.messageBytes;  // 0: one message per segment or range

  // Every segment of chunks [first, last), in order.
  auto forEachSegment = [&](int first, int last, auto&& fn) {
    for (int c = first; c < last; ++c)
      for (std::size_t k = 0; k < layout.segments(c); ++k) fn(c, k);
  };
  auto decodeAll = [&](int first, int last) {
    forEachSegment(first, last, [&](int c, std::size_t k) {
      steps.decode(recvStage.data() + layout.segmentByteOffset(c, k), layout.segmentBytes(c, k),
                   buf + layout.segmentOffset(c, k), layout.segmentCount(c, k));
    });
  };

  if (r < 2 * extra && r % 2 == 0) {
    // Pre-step sender: contribute, then wait for the finished encodings.
    std::vector<RequestPtr> result =
        steps.recvPieces(r + 1, recvStage.data(), layout.totalBytes(), kTagPostStep, piece);
    forEachSegment(0, q, [&](int c, std::size_t k) {
      std::byte* dst = sendStage.data() + layout.segmentByteOffset(c, k);
      steps.encode(buf + layout.segmentOffset(c, k), layout.segmentCount(c, k), dst,
                   layout.segmentBytes(c, k), 0, layout.segmentOffset(c, k), count);
      steps.sendPieces(r + 1, dst, layout.segmentBytes(c, k), layout.segmentCount(c, k), kTagPreStep, piece, sends);
    });
    steps.waitPieces(result, layout.totalBytes(), piece);
    decodeAll(0, q);
    steps.waitAll(sends);
    return;
  }

  auto coreToRank = [&](int core) { return core < extra ? 2 * core + 1 : core + extra; };
  const int core = r < 2 * extra ? r / 2 : r - extra;

  if (r < 2 * extra) {
    std::vector<std::vector<RequestPtr>> pre;  // per segment: its pieces
    forEachSegment(0, q, [&](int c, std::size_t k) {
      pre.push_back(steps.recvPieces(r - 1, recvStage.data() + layout.segmentByteOffset(c, k),
                                     layout.segmentBytes(c, k), kTagPreStep, piece));
    });
    std::size_t i = 0;
    forEachSegment(0, q, [&](int c, std::size_t k) {
      steps.waitPieces(pre[i++], layout.segmentBytes(c, k), piece);
      steps.decodeAdd(recvStage.data() + layout.segmentByteOffset(c, k), layout.segmentBytes(c, k),
                      buf + layout.segmentOffset(c, k), layout.segmentCount(c, k));
    });
  }

  // Reduce-scatter by recursive halving over chunk ranges [lo, hi).
  int lo = 0;
  int hi = q;
  for (int d = q / 2; d >= 1; d /= 2) {
    const int partner = coreToRank(core ^ d);
    const int mid = lo + (hi - lo) / 2;
    const bool keepUpper = (core & d) != 0;
    const int keepLo = keepUpper ? mid : lo;
    const int keepHi = keepUpper ? hi : mid;
    const int sendLo = keepUpper ? lo : mid;
    const int sendHi = keepUpper ? mid : hi;
    std::vector<std::vector<RequestPtr>> recvs;  // per segment: its pieces
    forEachSegment(keepLo, keepHi, [&](int c, std::size_t k) {
      recvs.push_back(steps.recvPieces(partner, recvStage.data() + layout.segmentByteOffset(c, k),
                                       layout.segmentBytes(c, k), kTagReduceScatter, piece));
    });
    forEachSegment(sendLo, sendHi, [&](int c, std::size_t k) {
      std::byte* dst = sendStage.data() + layout.segmentByteOffset(c, k);
      steps.encode(buf + layout.segmentOffset(c, k), layout.segmentCount(c, k), dst,
                   layout.segmentBytes(c, k), 0, layout.segmentOffset(c, k), count);
      steps.sendPieces(partner, dst, layout.segmentBytes(c, k), layout.segmentCount(c, k), kTagReduceScatter,
                       piece, sends);
    });
    std::size_t i = 0;
    forEachSegment(keepLo, keepHi, [&](int c, std::size_t k) {
      steps.waitPieces(recvs[i++], layout.segmentBytes(c, k), piece);
      steps.decodeAdd(recvStage.data() + layout.segmentByteOffset(c, k), layout.segmentBytes(c, k),
                      buf + layout.segmentOffset(c, k), layout.segmentCount(c, k));
    });
    lo = keepLo;
    hi = keepHi;
  }

  // The owner's final encoding goes where the allgather exchanges bytes from (recvStage is free:
  // every reduce-scatter receive has been consumed).
  forEachSegment(core, core + 1, [&](int c, std::size_t k) {
    steps.encodeKeepDecoded(buf + layout.segmentOffset(c, k), layout.segmentCount(c, k),
                            recvStage.data() + layout.segmentByteOffset(c, k),
                            layout.segmentBytes(c, k), 0, layout.segmentOffset(c, k), count);
  });

  // Allgather by recursive doubling: ranges double each round, bytes forwarded unchanged.
  lo = core;
  hi = core + 1;
  for (int d = 1; d < q; d *= 2) {
    const int partner = coreToRank(core ^ d);
    const int otherLo = (core & d) != 0 ? lo - d : lo + d;
    const int otherHi = otherLo + (hi - lo);
    const std::size_t sendBytes = layout.chunksBytes(lo, hi);
    const std::size_t recvBytes = layout.chunksBytes(otherLo, otherHi);
    std::vector<RequestPtr> recvs = steps.recvPieces(
        partner, recvStage.data() + layout.chunkByteOffset(otherLo), recvBytes, kTagAllgather, piece);
    steps.sendPieces(partner, recvStage.data() + layout.chunkByteOffset(lo), sendBytes,
                     layout.chunkOffset(hi - 1) + layout.chunkCount(hi - 1) - layout.chunkOffset(lo),
                     kTagAllgather, piece, sends);
    steps.waitPieces(recvs, recvBytes, piece);
    decodeAll(otherLo, otherHi);
    lo = std::min(lo, otherLo);
    hi = std::max(hi, otherHi);
  }

  if (r < 2 * extra) {
    steps.sendPieces(r - 1, recvStage.data(), layout.totalBytes(), count, kTagPostStep, piece, sends);
  }
  steps.waitAll(sends);
}

}  // namespace adaprec::detail
