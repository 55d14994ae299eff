// hierarchical: fast links inside a node, slow ones between nodes (the 2D shape of Horovod's
// hierarchical allreduce, without a leader bottleneck). L = ranks on the smallest node ("lanes"), N = nodes.
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
// Pipelined in blocks of kSegmentsPerBlock segments: step 1 is posted whole up front, and block b goes
// through step 2 while the intra-node copies of later blocks and step 3 of earlier ones proceed.
// The inner algorithm leaves its N ranks bit-identical and step 3 copies bits, so all ranks agree.
// Out of place (AlgorithmContext::input) step 1 sends from the caller's send buffer and an owner copies
// only its own share into buf, segment by segment just before adding to it; step 3 fills the rest.
// A buffer on a device (ctx.device): the fp32 messages of steps 1 and 3 go from and to a host copy of
// the buffer; step 1's sums and step 2 run on the device (one synchronization per added segment).
// Bytes sent per rank (local rank l < L, s = count/L): fp32 (L-1) * s * 4 inside the node in step 1
// and (localSize-1) * s * 4 in step 3 (a rank >= L: L * s * 4 in step 1, nothing in step 3), plus the inner algorithm's bytes for s elements among N ranks (twoshot:
// 2 (N-1)/N * encodedBytes(s)) between nodes. Quantizations per value: those of the inner algorithm
// with N ranks (twoshot: 2).
#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/device_codec.hpp"
#include "algorithm/layout.hpp"
#include "algorithm/steps.hpp"

namespace adaprec::detail {
namespace {

// Segments per pipelined block: large enough that the inner algorithm's per-call costs (a round of
// messages among the nodes) stay small, small enough that a 64 MiB buffer makes several blocks
// (measured on 2 emulated nodes x 2 ranks at 1 Gbit/s, 64 MiB: 1, 2, 4, 8 segments; 4 or 2 best,
// about 15 % faster than no pipelining; docs/benchmarks.md).
constexpr std::size_t kSegmentsPerBlock = 4;

}  // namespace

void hierarchicalAllreduce(AlgorithmContext& ctx, float* buf, std::size_t count) {
  ADAPREC_CHECK(ctx.hierarchy != nullptr && ctx.hierarchy->intra && ctx.hierarchy->peers,
                ErrorCode::kInternal, "hierarchical allreduce without a node layout");
  if (ctx.transport.size() == 1 || count == 0) return bringInput(callInput(ctx, buf), buf, 0, count);
  Hierarchy& h = *ctx.hierarchy;
  Transport& intra = *h.intra;
  const int local = intra.rank();
  const int localSize = intra.size();
  const int lanes = h.lanes;
  ADAPREC_CHECK(lanes >= 1 && lanes <= localSize, ErrorCode::kInternal,
                "hierarchical: " << lanes << " lanes on a node of " << localSize << " ranks");
  const bool owner = local < lanes;
  // Shares and their fp32 segments (only the element offsets of the layout are used); segment k of
  // every share belongs to block k / kSegmentsPerBlock.
  const Layout shares(Format::kFp32, count, lanes, ctx.segmentCount);
  const std::size_t blocks = (shares.segments(0) + kSegmentsPerBlock - 1) / kSegmentsPerBlock;
  auto blockSegments = [&](int share, std::size_t b) {  // [first, last) segments of block b
    const std::size_t first = std::min(shares.segments(share), b * kSegmentsPerBlock);
    return std::pair{first, std::min(shares.segments(share), first + kSegmentsPerBlock)};
  };
  // Intra-node traffic is plain fp32 and has no error feedback.
  AlgorithmContext intraCtx{intra, ctx.format, nullptr, ctx.stats, ctx.segmentCount, ctx.workspace};
  intraCtx.timeline = ctx.timeline;  // messageBytes 0: shared memory takes large messages best
  intraCtx.device = ctx.device;
  Steps steps(intraCtx);
  // What the fp32 messages read and write: buf itself (host memory, or device memory the transport
  // takes directly), or on a device staged through the host, its host copy.
  const bool staged = steps.staged();
  const bool direct = steps.direct();
  DeviceCodec& device = steps.device();
  float* wire = buf;
  if (staged) {  // the workspace is the device's (pinned) staging memory then
    wire = ctx.workspace.floats(Workspace::kHierarchicalHostSlot, count).data();
    device.copyToHost(wire, buf, count * sizeof(float));
    device.synchronize();
  }
  DeviceScratch incomingOnDevice(device);
  // Step 1's messages and my share's first values: an out-of-place call's send buffer (host memory
  // only, never staged), else what the fp32 messages read.
  const float* in = callInput(ctx, buf);
  const float* sendFrom = ctx.input != nullptr ? ctx.input : wire;
  const std::size_t mine = owner ? shares.chunkCount(local) : 0;
  const std::size_t mineSegments = owner ? shares.segments(local) : 0;
  const bool lossless = isLossless(ctx.format);

  // Everything of step 1 is posted up front: peer q's contribution to my share lands in
  // incoming[slot(q)]; my segments of the other shares go to their owners, block by block.
  const std::span<float> incoming =
      ctx.workspace.floats(3, owner ? mine * static_cast<std::size_t>(localSize - 1) : 0);
  auto slot = [&](int q) { return static_cast<std::size_t>(q < local ? q : q - 1) * mine; };
  std::vector<std::vector<RequestPtr>> reduceRecvs(static_cast<std::size_t>(localSize));
  for (int q = 0; q < localSize && owner; ++q) {
    if (q == local) continue;
    for (std::size_t k = 0; k < mineSegments; ++k)
      reduceRecvs[q].push_back(steps.recv(q, incoming.data() + slot(q) + k * ctx.segmentCount,
                                          shares.segmentCount(local, k) * sizeof(float), kTagIntraReduce));
  }
  std::vector<std::vector<RequestPtr>> reduceSends(blocks);
  for (std::size_t b = 0; b < blocks; ++b) {
    for (int d = 1; d < lanes + (owner ? 0 : 1); ++d) {
      const int o = owner ? (local + d) % lanes : d - 1;
      const auto [first, last] = blockSegments(o, b);
      for (std::size_t k = first; k < last; ++k)
        reduceSends[b].push_back(steps.sendFloats(o, sendFrom + shares.segmentOffset(o, k),
                                                  shares.segmentCount(o, k), kTagIntraReduce));
    }
  }

  std::vector<RequestPtr> gatherRecvs;
  std::vector<RequestPtr> gatherSends;
  for (std::size_t b = 0; b < blocks; ++b) {
    // 1. My share's block b: the node's sum, in local-rank order after my own values.
    const auto [first, last] = owner ? blockSegments(local, b) : std::pair<std::size_t, std::size_t>{0, 0};
    for (std::size_t k = first; k < last; ++k) {
      const std::size_t n = shares.segmentCount(local, k);
      bringInput(in, buf, shares.segmentOffset(local, k), n);
      float* acc = buf + shares.segmentOffset(local, k);
      for (int q = 0; q < localSize; ++q) {
        if (q == local) continue;
        steps.waitRecv(*reduceRecvs[q][k], n * sizeof(float));
        const float* in = incoming.data() + slot(q) + k * ctx.segmentCount;
        if (staged) {
          auto* onDevice = static_cast<float*>(incomingOnDevice.get(n * sizeof(float)));
          device.copyToDevice(onDevice, in, n * sizeof(float));
          device.add(acc, onDevice, n, !lossless);
          device.synchronize();  // onDevice is reused for the next peer
        } else if (direct) {
          device.add(acc, in, n, !lossless);  // `in` is device memory already
        } else if (lossless) {
          for (std::size_t i = 0; i < n; ++i) acc[i] += in[i];
        } else {
          for (std::size_t i = 0; i < n; ++i) acc[i] = saturatingAdd(acc[i], in[i]);
        }
      }
    }
    // Direct: nothing may be queued on the device when buffers go to the transport again below.
    if (direct && first != last) device.synchronize();
    // Block b of the other shares has left buf (the owners needed it to go on), so step 3 may now
    // receive into it.
    steps.waitAll(reduceSends[b]);
    for (int o = 0; o < lanes && localSize > 1; ++o) {
      if (o == local) continue;
      const auto [from, to] = blockSegments(o, b);
      for (std::size_t k = from; k < to; ++k)
        gatherRecvs.push_back(steps.recv(o, wire + shares.segmentOffset(o, k),
                                         shares.segmentCount(o, k) * sizeof(float), kTagIntraBcast));
    }
    if (first == last) continue;
    // 2. Block b of my share across nodes (the intra-node transfers of later blocks progress meanwhile).
    // Its error feedback sits at the block's own element positions of a count-long residual, as for
    // every other algorithm (saved state has one layout); only my shares' positions are ever used.
    const std::size_t offset = shares.segmentOffset(local, first);
    const std::size_t n = shares.segmentOffset(local, last - 1) + shares.segmentCount(local, last - 1) - offset;
    if (h.peers->size() > 1) {
      AlgorithmContext peerCtx{*h.peers, ctx.format, ctx.residuals, ctx.stats, ctx.segmentCount,
                               ctx.workspace};
      peerCtx.timeline = ctx.timeline;
      peerCtx.messageBytes = ctx.messageBytes;
      peerCtx.residualOffset = offset;
      peerCtx.residualTotal = count;
      peerCtx.device = ctx.device;
      runAlgorithmUnconfirmed(ctx.innerAlgorithm, peerCtx, buf + offset, n);
    }
    // 3. Block b of my share to every other rank of the node.
    if (staged) {
      device.copyToHost(wire + offset, buf + offset, n * sizeof(float));
      device.synchronize();
    }
    for (std::size_t k = first; k < last; ++k)
      for (int d = 1; d < localSize; ++d)
        gatherSends.push_back(steps.sendFloats((local + d) % localSize, wire + shares.segmentOffset(local, k),
                                               shares.segmentCount(local, k), kTagIntraBcast));
  }
  std::size_t g = 0;
  for (std::size_t b = 0; b < blocks; ++b) {
    for (int o = 0; o < lanes && localSize > 1; ++o) {
      if (o == local) continue;
      const auto [from, to] = blockSegments(o, b);
      for (std::size_t k = from; k < to; ++k)
        steps.waitRecv(*gatherRecvs[g++], shares.segmentCount(o, k) * sizeof(float));
    }
  }
  if (staged) {  // the other shares, received into the host copy, go up
    for (int o = 0; o < lanes && localSize > 1; ++o) {
      if (o == local) continue;
      const std::size_t at = shares.chunkOffset(o);
      device.copyToDevice(buf + at, wire + at, shares.chunkCount(o) * sizeof(float));
    }
    device.synchronize();
  }
  steps.waitAll(gatherSends);
}

}  // namespace adaprec::detail
