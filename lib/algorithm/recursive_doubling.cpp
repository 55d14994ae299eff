// recursive_doubling: full-vector exchange in log2 rounds (Open MPI:
// allreduce_intra_recursivedoubling). Latency-optimal: for small messages.
//
// p ranks; q = largest power of two <= p; extra = p - q (same pre/post steps as rabenseifner).
//   pre-step: each even rank below 2*extra encodes its vector and sends it to the odd rank above it,
//     which decodeAdds it onto its own fp32 values.
//   rounds d = 1, 2, ..., q/2: every core rank encodes its whole current vector, swaps it with core
//     partner (core ^ d), and sets vector = decode(mine) + decode(partner's). Both partners compute the
//     same two decodes and fp32 addition is commutative, so they end bit-identical; by induction
//     every core rank holds the same vector after the last round. Except for NaN: adding two NaNs
//     keeps the first operand's (x86), here the rank's own, so +NaN on one rank and -NaN on another
//     (or e4m3's NaN for +Inf and -Inf) ended with different bits on different ranks (a hostile
//     client). After the last round every NaN becomes the default quiet NaN.
//   post-step (extra > 0): every core rank re-encodes the result and keeps the decoded value (all
//     core ranks do it, so they stay identical); odd ranks below 2*extra send that encoding down.
// Bytes sent per rank: log2(q) * encodedBytes(count) (+1 for pre/post); log2(q) messages per segment
// (between nodes, per piece of at most ctx.messageBytes: eager, as ring, twoshot, rabenseifner).
// Quantizations per value: log2(q) (+1 pre-step, +1 post-step when p is not a power of two).
// Error feedback: a rank encodes each position once per round, so slot = round (pre-step slot 0,
// rounds 1..log2 q, post-step log2 q + 1). All ranks of a group hold the same vector and residual,
// and add that residual once to the shared value, so the correction is not multiplied.
#include <span>
#include <vector>

#include "algorithm/algorithm.hpp"
#include "algorithm/layout.hpp"
#include "algorithm/steps.hpp"

namespace adaprec::detail {

void recursiveDoublingAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count) {
  const int p = ctx.transport.size();
  const int r = ctx.transport.rank();
  if (p == 1 || count == 0) return;
  int q = 1;
  int rounds = 0;
  while (q * 2 <= p) {
    q *= 2;
    ++rounds;
  }
  const int extra = p - q;
  // The whole vector is one "chunk" cut into segments.
  const Layout layout(ctx.format, count, 1, ctx.segmentCount);
  const std::size_t segments = layout.segments(0);
  const std::size_t total = layout.totalBytes();
  Steps steps(ctx);
  const std::span<std::byte> mine = ctx.workspace.bytes(0, total);
  const std::span<std::byte> theirs = ctx.workspace.bytes(1, total);
  std::vector<RequestPtr> sends;
  const std::size_t piece = ctx.messageBytes;  // 0: one message per segment

  auto encodeAll = [&](std::size_t slot, int peer, int tag, bool keepDecoded) {
    for (std::size_t k = 0; k < segments; ++k) {
      std::byte* dst = mine.data() + layout.segmentByteOffset(0, k);
      float* src = buf + layout.segmentOffset(0, k);
      const std::size_t n = layout.segmentCount(0, k);
      const std::size_t bytes = layout.segmentBytes(0, k);
      if (keepDecoded) {
        steps.encodeKeepDecoded(src, n, dst, bytes, slot, layout.segmentOffset(0, k), count);
      } else {
        steps.encode(src, n, dst, bytes, slot, layout.segmentOffset(0, k), count);
      }
      if (peer >= 0) steps.sendPieces(peer, dst, bytes, n, tag, piece, sends);
    }
  };
  auto receiveAll = [&](int peer, int tag) {
    std::vector<std::vector<RequestPtr>> recvs;  // per segment: its pieces
    for (std::size_t k = 0; k < segments; ++k)
      recvs.push_back(steps.recvPieces(peer, theirs.data() + layout.segmentByteOffset(0, k),
                                       layout.segmentBytes(0, k), tag, piece));
    return recvs;
  };

  if (r < 2 * extra && r % 2 == 0) {
    std::vector<std::vector<RequestPtr>> result = receiveAll(r + 1, kTagPostStep);
    encodeAll(0, r + 1, kTagPreStep, false);
    for (std::size_t k = 0; k < segments; ++k) {
      steps.waitPieces(result[k], layout.segmentBytes(0, k), piece);
      steps.decode(theirs.data() + layout.segmentByteOffset(0, k), layout.segmentBytes(0, k),
                   buf + layout.segmentOffset(0, k), layout.segmentCount(0, k));
    }
    steps.waitAll(sends);
    return;
  }

  const int core = r < 2 * extra ? r / 2 : r - extra;
  auto coreToRank = [&](int c) { return c < extra ? 2 * c + 1 : c + extra; };
  if (r < 2 * extra) {
    std::vector<std::vector<RequestPtr>> pre = receiveAll(r - 1, kTagPreStep);
    for (std::size_t k = 0; k < segments; ++k) {
      steps.waitPieces(pre[k], layout.segmentBytes(0, k), piece);
      steps.decodeAdd(theirs.data() + layout.segmentByteOffset(0, k), layout.segmentBytes(0, k),
                      buf + layout.segmentOffset(0, k), layout.segmentCount(0, k));
    }
  }

  int round = 0;
  for (int d = 1; d < q; d *= 2) {
    ++round;
    const int partner = coreToRank(core ^ d);
    std::vector<std::vector<RequestPtr>> recvs = receiveAll(partner, kTagExchange);
    // The previous round's sends read `mine`: they must finish before it is overwritten.
    steps.waitAll(sends);
    encodeAll(static_cast<std::size_t>(round), partner, kTagExchange, true);
    for (std::size_t k = 0; k < segments; ++k) {
      steps.waitPieces(recvs[k], layout.segmentBytes(0, k), piece);
      steps.decodeAdd(theirs.data() + layout.segmentByteOffset(0, k), layout.segmentBytes(0, k),
                      buf + layout.segmentOffset(0, k), layout.segmentCount(0, k));
    }
  }

  steps.device().canonicalizeNans(buf, count);  // where buf lives: host, or the device's stream

  if (extra > 0) {
    steps.waitAll(sends);
    const bool sendsDown = r < 2 * extra;
    encodeAll(static_cast<std::size_t>(rounds + 1), sendsDown ? r - 1 : -1, kTagPostStep, true);
  }
  steps.waitAll(sends);
}

}  // namespace adaprec::detail
