// hierarchical: the ChainerMN / Reedbush shape (few GPUs per node, slow links between nodes).
//   1. inside each node, every rank sends its fp32 vector to the node leader (local rank 0), which
//      sums them in local-rank order: exact transfer, fp32 summation only (for a lossy format with
//      saturatingAdd, like its decodeAdd, so finite inputs never become Inf: docs/formats.md);
//   2. the leaders run a compressed allreduce among themselves (ctx.innerAlgorithm: auto's choice for
//      the leader count), so only the compressed encoding crosses node boundaries;
//   3. each leader sends the result, in fp32, to the ranks of its node.
// Every leader ends bit-identical (inner algorithm) and the broadcast copies bits, so all ranks agree.
// Bytes sent per rank: non-leaders count*4 (intra-node); leaders (local ranks - 1) * count*4 intra-node
// + the inner algorithm's bytes among N nodes. Quantizations per value: those of the inner algorithm
// with N ranks (twoshot: 2); error feedback lives on the leaders.
#include <span>
#include <vector>

#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/steps.hpp"

namespace adaprec::detail {

void hierarchicalAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count) {
  ADAPREC_CHECK(ctx.hierarchy != nullptr && ctx.hierarchy->intra, ErrorCode::kInternal,
                "hierarchical allreduce without a node layout");
  if (ctx.transport.size() == 1 || count == 0) return;
  Transport& intra = *ctx.hierarchy->intra;
  const int local = intra.rank();
  const int localSize = intra.size();
  // Intra-node traffic is plain fp32 and has no error feedback.
  AlgorithmContext intraCtx{intra, ctx.format, nullptr, ctx.stats, ctx.segmentCount, ctx.workspace};
  intraCtx.timeline = ctx.timeline;
  Steps steps(intraCtx);

  if (local != 0) {
    // buf is sent, then overwritten by the result: the send must finish before the receive starts.
    std::vector<RequestPtr> sends;
    sends.push_back(steps.sendFloats(0, buf, count, kTagIntraReduce));
    steps.waitAll(sends);
    RequestPtr result = steps.recv(0, buf, count * sizeof(float), kTagIntraBcast);
    steps.waitRecv(*result, count * sizeof(float));
    return;
  }
  const std::span<float> incoming = ctx.workspace.floats(3, count);
  for (int peer = 1; peer < localSize; ++peer) {
    RequestPtr recv = steps.recv(peer, incoming.data(), count * sizeof(float), kTagIntraReduce);
    steps.waitRecv(*recv, count * sizeof(float));
    if (isLossless(ctx.format)) {
      for (std::size_t i = 0; i < count; ++i) buf[i] += incoming[i];
    } else {
      for (std::size_t i = 0; i < count; ++i) buf[i] = saturatingAdd(buf[i], incoming[i]);
    }
  }
  if (ctx.hierarchy->leaders && ctx.hierarchy->leaders->size() > 1) {
    AlgorithmContext leaderCtx{*ctx.hierarchy->leaders, ctx.format, ctx.residuals, ctx.stats,
                               ctx.segmentCount, ctx.workspace};
    leaderCtx.timeline = ctx.timeline;
    runAlgorithmUnconfirmed(ctx.innerAlgorithm, leaderCtx, buf, count);
  }
  std::vector<RequestPtr> sends;
  for (int peer = 1; peer < localSize; ++peer)
    sends.push_back(steps.sendFloats(peer, buf, count, kTagIntraBcast));
  steps.waitAll(sends);
}

}  // namespace adaprec::detail
