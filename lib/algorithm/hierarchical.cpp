// hierarchical: fast links inside a node, slow ones between nodes (ChainerMN / NCCL's tree-of-rings
// shape, without a leader bottleneck). L = ranks on the smallest node ("lanes"), N = nodes.
//   1. reduce-scatter inside the node in fp32: the buffer is cut into L balanced shares (Layout);
//      every rank of the node sends share l to local rank l, which adds them onto its own values in
//      local-rank order (fp32; for a lossy format with saturatingAdd, like its decodeAdd, so finite
//      inputs never become Inf: docs/formats.md). Local rank l now holds the node's sum of share l.
//   2. on every local rank l < L at once, the compressed allreduce of share l among the N ranks with
//      local rank l (one per node, Hierarchy::peers; ctx.innerAlgorithm: twoshot up to 8 nodes), with
//      error feedback on that share: each node link carries L flows of 1/L of the data in parallel.
//   3. allgather inside the node in fp32: local rank l sends its reduced share to the others.
// Uneven nodes: local ranks >= L of a fuller node send their shares in step 1 and receive the result
// in step 3 but own no share (with L = 1 this is the classic leader scheme). Shares of a count < L
// are partly empty; an empty share sends nothing.
// The inner algorithm leaves its N ranks bit-identical and step 3 copies bits, so all ranks agree.
// Bytes sent per rank (local rank l < L, s = count/L): fp32 (localSize-1) * s * 4 inside the node in
// each of steps 1 and 3, plus the inner algorithm's bytes for s elements among N ranks (twoshot:
// 2 (N-1)/N * encodedBytes(s)) between nodes. Quantizations per value: those of the inner algorithm
// with N ranks (twoshot: 2).
#include <algorithm>
#include <span>
#include <vector>

#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/layout.hpp"
#include "algorithm/steps.hpp"

namespace adaprec::detail {

void hierarchicalAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count) {
  ADAPREC_CHECK(ctx.hierarchy != nullptr && ctx.hierarchy->intra && ctx.hierarchy->peers,
                ErrorCode::kInternal, "hierarchical allreduce without a node layout");
  if (ctx.transport.size() == 1 || count == 0) return;
  Hierarchy& h = *ctx.hierarchy;
  Transport& intra = *h.intra;
  const int local = intra.rank();
  const int localSize = intra.size();
  const int lanes = h.lanes;
  ADAPREC_CHECK(lanes >= 1 && lanes <= localSize, ErrorCode::kInternal,
                "hierarchical: " << lanes << " lanes on a node of " << localSize << " ranks");
  const bool owner = local < lanes;
  // Shares and their fp32 segments (only the element offsets of the layout are used).
  const Layout shares(Format::kFp32, count, lanes, ctx.segmentCount);
  // Intra-node traffic is plain fp32 and has no error feedback.
  AlgorithmContext intraCtx{intra, ctx.format, nullptr, ctx.stats, ctx.segmentCount, ctx.workspace};
  intraCtx.timeline = ctx.timeline;
  Steps steps(intraCtx);
  const std::size_t mine = owner ? shares.chunkCount(local) : 0;
  const std::size_t mineSegments = owner ? shares.segments(local) : 0;
  std::vector<RequestPtr> sends;

  if (localSize > 1) {
    // 1. Reduce-scatter: peer q's contribution to my share lands in incoming[slot(q)].
    const std::span<float> incoming =
        ctx.workspace.floats(3, owner ? mine * static_cast<std::size_t>(localSize - 1) : 0);
    auto slot = [&](int q) { return static_cast<std::size_t>(q < local ? q : q - 1) * mine; };
    std::vector<std::vector<RequestPtr>> recvs(static_cast<std::size_t>(localSize));
    if (owner) {
      for (int q = 0; q < localSize; ++q) {
        if (q == local) continue;
        for (std::size_t k = 0; k < mineSegments; ++k)
          recvs[q].push_back(steps.recv(q, incoming.data() + slot(q) + k * ctx.segmentCount,
                                        shares.segmentCount(local, k) * sizeof(float), kTagIntraReduce));
      }
    }
    std::size_t most = 0;
    for (int o = 0; o < lanes; ++o) most = std::max(most, shares.segments(o));
    for (std::size_t k = 0; k < most; ++k) {  // segment k of every other share, owners interleaved
      for (int d = 1; d < lanes + (owner ? 0 : 1); ++d) {
        const int o = owner ? (local + d) % lanes : d - 1;
        if (k >= shares.segments(o)) continue;
        sends.push_back(steps.sendFloats(o, buf + shares.segmentOffset(o, k), shares.segmentCount(o, k),
                                         kTagIntraReduce));
      }
    }
    const bool lossless = isLossless(ctx.format);
    for (std::size_t k = 0; k < mineSegments; ++k) {
      const std::size_t n = shares.segmentCount(local, k);
      float* acc = buf + shares.segmentOffset(local, k);
      for (int q = 0; q < localSize; ++q) {
        if (q == local) continue;
        steps.waitRecv(*recvs[q][k], n * sizeof(float));
        const float* in = incoming.data() + slot(q) + k * ctx.segmentCount;
        if (lossless) {
          for (std::size_t i = 0; i < n; ++i) acc[i] += in[i];
        } else {
          for (std::size_t i = 0; i < n; ++i) acc[i] = saturatingAdd(acc[i], in[i]);
        }
      }
    }
    // My shares for the others have left buf before step 3 overwrites them.
    steps.waitAll(sends);
  }

  // 3 (posted now, so shared-memory copies proceed during step 2): the other owners' shares.
  std::vector<RequestPtr> gathers;
  for (int o = 0; o < lanes && localSize > 1; ++o) {
    if (o == local) continue;
    for (std::size_t k = 0; k < shares.segments(o); ++k)
      gathers.push_back(steps.recv(o, buf + shares.segmentOffset(o, k),
                                   shares.segmentCount(o, k) * sizeof(float), kTagIntraBcast));
  }

  // 2. My share across nodes, every owner in parallel.
  if (owner && mine > 0 && h.peers->size() > 1) {
    AlgorithmContext peerCtx{*h.peers, ctx.format, ctx.residuals, ctx.stats, ctx.segmentCount,
                             ctx.workspace};
    peerCtx.timeline = ctx.timeline;
    runAlgorithmUnconfirmed(ctx.innerAlgorithm, peerCtx, buf + shares.chunkOffset(local), mine);
  }

  // 3. Allgather: my reduced share to every other rank of the node.
  if (owner) {
    for (std::size_t k = 0; k < mineSegments; ++k)
      for (int d = 1; d < localSize; ++d)
        sends.push_back(steps.sendFloats((local + d) % localSize, buf + shares.segmentOffset(local, k),
                                         shares.segmentCount(local, k), kTagIntraBcast));
  }
  std::size_t g = 0;
  for (int o = 0; o < lanes && localSize > 1; ++o) {
    if (o == local) continue;
    for (std::size_t k = 0; k < shares.segments(o); ++k)
      steps.waitRecv(*gathers[g++], shares.segmentCount(o, k) * sizeof(float));
  }
  steps.waitAll(sends);
}

}  // namespace adaprec::detail
