// twoshot: direct reduce-scatter + direct allgather ("two-shot" allreduce).
//
// p ranks, p chunks; rank r owns chunk r.
//   reduce-scatter: rank r encodes chunk j of its own data for every peer j != r and sends it there;
//     it receives every peer's encoding of chunk r and decodeAdds them, in the fixed order r+1, r+2, ...
//     (mod p), onto its own fp32 values (its own contribution is never quantized).
//   The owner encodes the fp32 sum once and keeps the decoded value (bit-identical results).
//   allgather: the owner sends that encoding to every peer; each rank decodes every chunk it receives.
// Schedule: every reduce-scatter send is posted at once, segment-major (segment k to every owner
// before segment k+1); each owner sums, encodes and sends a segment as soon as all its pieces are in.
// Between nodes (AlgorithmContext::messageBytes) every message is at most ctx.messageBytes, so
// the MPI transport sends it eagerly: a larger message waits for a rendezvous round trip through the
// links' queues, which cost twoshot 20-30 % against the ring on emulated 1 Gbit/s nodes
// (docs/algorithms.md, twoshot).
// Bytes sent per rank: 2 (p-1)/p * encodedBytes(count), in 2 (p-1) messages per segment index (between
// nodes, per piece of a segment).
// Out of place (AlgorithmContext::input), the encodes read the caller's send buffer and the owner copies
// its own chunk into buf segment by segment as it sums: no copy of the whole buffer comes first.
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
  const float* in = callInput(ctx, buf);  // the send buffer of an out-of-place call, else buf
  if (count == 0) return;
  if (p == 1) return bringInput(in, buf, 0, count);
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
  // Per peer and segment: the pieces (messages of at most ctx.messageBytes) of one receive.
  std::vector<std::vector<std::vector<RequestPtr>>> reduceRecvs(p);
  std::vector<std::vector<std::vector<RequestPtr>>> gatherRecvs(p);
  const std::size_t piece = ctx.messageBytes;

  auto reduceSlot = [&](int peer) {  // where peer's encoding of chunk r lands
    return reduceStage.data() + myBytes * static_cast<std::size_t>((peer - r - 1 + p) % p);
  };
  for (int d = 1; d < p; ++d) {
    const int peer = (r + d) % p;
    for (std::size_t k = 0; k < mine; ++k)
      reduceRecvs[peer].push_back(steps.recvPieces(
          peer, reduceSlot(peer) + layout.segmentByteOffset(r, k) - layout.chunkByteOffset(r),
          layout.segmentBytes(r, k), kTagReduceScatter, piece));
    for (std::size_t k = 0; k < layout.segments(peer); ++k)
      gatherRecvs[peer].push_back(steps.recvPieces(peer, gatherStage.data() + layout.segmentByteOffset(peer, k),
                                                   layout.segmentBytes(peer, k), kTagAllgather, piece));
  }

  // Reduce-scatter: every send is posted at once, segment k of every owner before segment k+1, so each
  // owner gets its early segments from all peers early and can start the allgather while later
  // segments still arrive. Posting later (a step ahead of the receives) cost 30-40 % of the rate on
  // emulated 1 Gbit/s nodes: the transfers then wait on round trips through the links' queues.
  const std::size_t most = layout.segments(0);  // chunk 0 is the largest
  for (std::size_t k = 0; k < most; ++k) {
    for (int d = 1; d < p; ++d) {
      const int owner = (r + d) % p;
      if (k >= layout.segments(owner)) continue;
      std::byte* dst = sendStage.data() + layout.segmentByteOffset(owner, k);
      const std::size_t n = layout.segmentCount(owner, k);
      const std::size_t bytes = layout.segmentBytes(owner, k);
      steps.encode(in + layout.segmentOffset(owner, k), n, dst, bytes, 0, layout.segmentOffset(owner, k),
                   count);
      steps.sendPieces(owner, dst, bytes, n, kTagReduceScatter, piece, sends);
    }
  }

  // Allgather segments decoded so far, per owner (in segment order). While this rank waits for its own
  // chunk's later segments, the other owners' segments that are already in are decoded (decodeArrived),
  // not all at the end: decoding (p-1)/p of the buffer after the last transfer was a tail the ring does
  // not have (it decodes each segment as it forwards it). Each value is decoded once, wherever it is
  // decoded, so the result does not depend on when the segments arrive.
  std::vector<std::size_t> decoded(p, 0);
  auto decodeSegment = [&](int owner) {
    const std::size_t k = decoded[owner]++;
    const std::size_t bytes = layout.segmentBytes(owner, k);
    steps.waitPieces(gatherRecvs[owner][k], bytes, piece);
    steps.decode(gatherStage.data() + layout.segmentByteOffset(owner, k), bytes, buf + layout.segmentOffset(owner, k),
                 layout.segmentCount(owner, k));
  };
  auto decodeArrived = [&] {
    for (int d = p - 1; d >= 1; --d) {
      const int owner = (r + d) % p;
      while (decoded[owner] < layout.segments(owner) && Steps::arrived(gatherRecvs[owner][decoded[owner]]))
        decodeSegment(owner);
    }
  };

  // Sum chunk r segment by segment in the fixed order r+1, r+2, ..., then encode it once and send it
  // to everyone.
  for (std::size_t k = 0; k < mine; ++k) {
    const std::size_t n = layout.segmentCount(r, k);
    const std::size_t bytes = layout.segmentBytes(r, k);
    float* acc = buf + layout.segmentOffset(r, k);
    // Out of place, this rank's own values of the segment come over now, while later segments arrive.
    bringInput(in, buf, layout.segmentOffset(r, k), n);
    for (int d = 1; d < p; ++d) {
      const int peer = (r + d) % p;
      steps.waitPieces(reduceRecvs[peer][k], bytes, piece);
      steps.decodeAdd(reduceSlot(peer) + layout.segmentByteOffset(r, k) - layout.chunkByteOffset(r),
                      bytes, acc, n);
    }
    std::byte* dst = sendStage.data() + layout.segmentByteOffset(r, k);
    steps.encodeKeepDecoded(acc, n, dst, bytes, 0, layout.segmentOffset(r, k), count);
    for (int d = 1; d < p; ++d) steps.sendPieces((r + d) % p, dst, bytes, n, kTagAllgather, piece, sends);
    decodeArrived();
  }

  // Allgather: decode the rest of every other owner's chunk, segment by segment.
  for (std::size_t k = 0; k < most; ++k) {
    for (int d = p - 1; d >= 1; --d) {
      const int owner = (r + d) % p;
      if (k < layout.segments(owner) && k >= decoded[owner]) decodeSegment(owner);
    }
  }
  steps.waitAll(sends);
}

}  // namespace adaprec::detail
