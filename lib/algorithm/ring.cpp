// ring: ring reduce-scatter followed by ring allgather (Open MPI: allreduce_intra_ring_segmented).
//
// p ranks, the buffer cut into p chunks (Layout). Rank r sends to r+1 and receives from r-1.
//   reduce-scatter, steps s = 0 .. p-2: send chunk (r-s) mod p encoded; receive chunk (r-s-1) mod p
//     and decodeAdd it into the local fp32 values; the next step re-encodes that partial sum.
//     After p-1 steps rank r holds the full sum of chunk (r+1) mod p (its "owned" chunk).
//   The owner encodes its chunk once more and keeps the decoded value (bit-identical results).
//   allgather, steps s = 0 .. p-2: send chunk (r+1-s) mod p, receive chunk (r-s) mod p, decode it and
//     forward the received bytes unchanged at the next step.
// Every chunk is cut into segments (one codec chunk each); segment k of a step is re-encoded and sent
// as soon as it is decoded, so codec work overlaps the transfer of neighbouring segments. Between
// nodes a segment travels as messages of at most ctx.messageBytes (sent eagerly, as twoshot's).
// Bytes sent per rank: 2 (p-1)/p * encodedBytes(count). Messages: 2 (p-1) per segment index.
// Out of place (AlgorithmContext::input) no copy of the whole buffer comes first: see the reduce-scatter.
// Quantizations per value: p (p-1 re-encodes of partial sums in the reduce-scatter + 1 by the owner);
// each rank encodes each element position once per call (one error-feedback slot).
#include <span>
#include <vector>

#include "algorithm/algorithm.hpp"
#include "algorithm/layout.hpp"
#include "algorithm/steps.hpp"

namespace adaprec::detail {

void ringAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count) {
  const int p = ctx.transport.size();
  const int r = ctx.transport.rank();
  const float* in = callInput(ctx, buf);  // the send buffer of an out-of-place call, else buf
  if (count == 0) return;
  if (p == 1) return bringInput(in, buf, 0, count);
  const Layout layout(ctx.format, count, p, ctx.segmentCount);
  Steps steps(ctx);
  const int right = (r + 1) % p;
  const int left = (r - 1 + p) % p;
  auto mod = [p](int x) { return ((x % p) + p) % p; };

  const std::span<std::byte> sendStage = ctx.workspace.bytes(0, layout.totalBytes());
  const std::span<std::byte> recvStage = ctx.workspace.bytes(1, layout.totalBytes());
  std::vector<RequestPtr> sends;
  // Receives of one step, indexed by segment; those of step s+1 are posted before step s is consumed.
  std::vector<std::vector<std::vector<RequestPtr>>> recvs(p);  // [step][segment]: its pieces
  const std::size_t piece = ctx.messageBytes;

  auto postRecvs = [&](int chunk, int tag, std::vector<std::vector<RequestPtr>>& into) {
    for (std::size_t k = 0; k < layout.segments(chunk); ++k)
      into.push_back(steps.recvPieces(left, recvStage.data() + layout.segmentByteOffset(chunk, k),
                                      layout.segmentBytes(chunk, k), tag, piece));
  };
  // Encodes segment k of `chunk` from `values` (the input for the first step, else buf) and sends it.
  auto encodeAndSend = [&](int chunk, std::size_t k, int tag, bool keepDecoded, const float* values) {
    std::byte* dst = sendStage.data() + layout.segmentByteOffset(chunk, k);
    const std::size_t offset = layout.segmentOffset(chunk, k);
    const std::size_t n = layout.segmentCount(chunk, k);
    const std::size_t bytes = layout.segmentBytes(chunk, k);
    if (keepDecoded) {
      steps.encodeKeepDecoded(buf + offset, n, dst, bytes, 0, offset, count);
    } else {
      steps.encode(values + offset, n, dst, bytes, 0, offset, count);
    }
    steps.sendPieces(right, dst, bytes, n, tag, piece, sends);
  };

  // Reduce-scatter. Out of place, chunk r is encoded straight from the input, and each other chunk's
  // own values come over into buf segment by segment just before the first partial sum is added (each
  // is added to once); the allgather overwrites chunk r.
  postRecvs(mod(r - 1), kTagReduceScatter, recvs[0]);
  for (std::size_t k = 0; k < layout.segments(r); ++k) encodeAndSend(r, k, kTagReduceScatter, false, in);
  for (int s = 0; s <= p - 2; ++s) {
    if (s + 1 <= p - 2) postRecvs(mod(r - s - 2), kTagReduceScatter, recvs[s + 1]);
    const int chunk = mod(r - s - 1);
    const bool last = s == p - 2;  // chunk is then the owned one, (r+1) mod p
    for (std::size_t k = 0; k < layout.segments(chunk); ++k) {
      const std::size_t offset = layout.segmentOffset(chunk, k);
      bringInput(in, buf, offset, layout.segmentCount(chunk, k));
      steps.waitPieces(recvs[s][k], layout.segmentBytes(chunk, k), piece);
      steps.decodeAdd(recvStage.data() + layout.segmentByteOffset(chunk, k),
                      layout.segmentBytes(chunk, k), buf + offset, layout.segmentCount(chunk, k));
      encodeAndSend(chunk, k, last ? kTagAllgather : kTagReduceScatter, last, buf);
    }
    recvs[s].clear();
  }

  // Allgather: every reduce-scatter receive has completed, so recvStage is free again.
  for (int s = 0; s <= p - 2; ++s) postRecvs(mod(r - s), kTagAllgather, recvs[s]);
  for (int s = 0; s <= p - 2; ++s) {
    const int chunk = mod(r - s);
    for (std::size_t k = 0; k < layout.segments(chunk); ++k) {
      const std::size_t bytes = layout.segmentBytes(chunk, k);
      const std::byte* src = recvStage.data() + layout.segmentByteOffset(chunk, k);
      steps.waitPieces(recvs[s][k], bytes, piece);
      if (s < p - 2) steps.sendPieces(right, src, bytes, layout.segmentCount(chunk, k), kTagAllgather, piece, sends);
      steps.decode(src, bytes, buf + layout.segmentOffset(chunk, k), layout.segmentCount(chunk, k));
    }
  }
  steps.waitAll(sends);
}

}  // namespace adaprec::detail
