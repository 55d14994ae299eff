#include "algorithm/steps.hpp"

#include <algorithm>
#include <cstring>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "communicator/fast_clock.hpp"
#include "communicator/timeline.hpp"

namespace adaprec::detail {
namespace {

using Kind = Timeline::Kind;

// Adds the seconds from start to now to `seconds` and, with a timeline, records the span: the one
// pair of clock reads serves both.
void account(AlgorithmContext& ctx, double& seconds, Kind kind, std::uint64_t start) {
  const std::uint64_t end = fastClockTicks();
  seconds += fastClockSeconds(start, end);
  if (ctx.timeline != nullptr) ctx.timeline->span(kind, start, end);
}

}  // namespace

Steps::~Steps() {
  if (pending_.empty()) return;
  try {
    codec_.synchronize();
  } catch (...) {  // unwinding from another error already: that one is reported
  }
}

void Steps::deferred(const void* host, std::size_t bytes, bool deviceWrites) {
  const auto* b = static_cast<const std::byte*>(host);
  pending_.push_back(Pending{b, b + bytes, deviceWrites, codec_.mark()});
}

void Steps::settle(const void* p, std::size_t bytes, bool hostWrites) {
  if (pending_.empty() || bytes == 0) return;
  const auto* b = static_cast<const std::byte*>(p);
  // The latest queued copy that conflicts; the stream runs in order, so waiting for it covers the
  // earlier ones, which are dropped with it.
  std::size_t last = pending_.size();
  for (std::size_t i = pending_.size(); i-- > 0;) {
    const Pending& q = pending_[i];
    if (q.begin < b + bytes && b < q.end && (hostWrites || q.deviceWrites)) {
      last = i;
      break;
    }
  }
  if (last == pending_.size()) return;
  const std::uint64_t start = fastClockTicks();
  codec_.waitFor(pending_[last].ticket);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(last) + 1);
  account(ctx_, ctx_.stats.transferSeconds, Kind::kWait, start);
}

void Steps::encodeTo(const float* src, std::size_t n, std::byte* chunk, std::size_t bytes, std::size_t slot,
                     std::size_t position, std::size_t total) {
  // A lossless format has no quantization error, so its residual stays zero and is skipped.
  if (ctx_.residuals == nullptr || isLossless(ctx_.format)) {
    codec_.encode(ctx_.format, src, n, chunk, bytes);
    return;
  }
  const std::size_t residualTotal = ctx_.residualTotal != 0 ? ctx_.residualTotal : total;
  float* residual = ctx_.residuals->slot(slot, residualTotal) + ctx_.residualOffset + position;
  codec_.encodeWithResidual(ctx_.format, src, residual, n, chunk, bytes);
}

void Steps::encode(const float* src, std::size_t n, std::byte* dst, std::size_t bytes,
                   std::size_t slot, std::size_t position, std::size_t total) {
  const std::uint64_t start = fastClockTicks();
  if (staged()) {
    auto* chunk = static_cast<std::byte*>(chunk_.get(bytes));
    encodeTo(src, n, chunk, bytes, slot, position, total);
    codec_.copyToHost(dst, chunk, bytes);
    deferred(dst, bytes, true);  // sending dst waits for it
  } else {
    encodeTo(src, n, dst, bytes, slot, position, total);
    if (direct_) codec_.synchronize();  // dst (device memory) is sent next
  }
  account(ctx_, ctx_.stats.encodeSeconds, Kind::kEncode, start);
}

void Steps::encodeKeepDecoded(float* data, std::size_t n, std::byte* dst, std::size_t bytes,
                              std::size_t slot, std::size_t position, std::size_t total) {
  if (staged() || direct_) {
    // Decoded from the device chunk (before it is copied down when staged): one synchronization.
    const std::uint64_t start = fastClockTicks();
    auto* chunk = direct_ ? dst : static_cast<std::byte*>(chunk_.get(bytes));
    encodeTo(data, n, chunk, bytes, slot, position, total);
    if (!isLossless(ctx_.format)) codec_.decode(ctx_.format, chunk, bytes, data, n);
    if (direct_) {
      codec_.synchronize();
    } else {
      codec_.copyToHost(dst, chunk, bytes);
      deferred(dst, bytes, true);
    }
    account(ctx_, ctx_.stats.encodeSeconds, Kind::kEncode, start);
    return;
  }
  encode(data, n, dst, bytes, slot, position, total);
  if (isLossless(ctx_.format)) return;  // decode(encode(x)) == x
  const std::uint64_t start = fastClockTicks();
  codec_.decode(ctx_.format, dst, bytes, data, n);
  account(ctx_, ctx_.stats.decodeSeconds, Kind::kDecode, start);
}

void Steps::checkHeader(const std::byte* header, std::size_t bytes, std::size_t n) const {
  // The device kernels trust their input: the header is checked on the host, as the host codec checks
  // it (ranks that disagree on format or count get kMismatch, not garbage). inspectChunk reads the
  // header only (its 16 bytes), checking `bytes` against what it describes.
  const ChunkInfo info = inspectChunk(header, bytes);
  ADAPREC_CHECK(info.format == ctx_.format && info.count == n, ErrorCode::kMismatch,
                "chunk holds " << info.count << " " << formatName(info.format) << " elements but " << n << " "
                               << formatName(ctx_.format) << " were expected (do all ranks agree?)");
}

std::byte* Steps::upload(const std::byte* src, std::size_t bytes, std::size_t n) {
  settle(src, bytes, false);  // the host reads the header
  checkHeader(src, bytes, n);
  auto* chunk = static_cast<std::byte*>(chunk_.get(bytes));
  codec_.copyToDevice(chunk, src, bytes);
  return chunk;
}

void Steps::decodeDirect(const std::byte* src, std::size_t bytes, float* out, std::size_t n, bool add) {
  // The header comes down with the decode, one synchronization for both: on a mismatch the call
  // throws after `out` was written from a chunk of the wrong shape (the kernels stay inside `bytes`).
  ADAPREC_CHECK(bytes >= sizeof header_, ErrorCode::kMismatch,
                "received a chunk of " << bytes << " bytes, shorter than its header");
  codec_.copyToHost(header_, src, sizeof header_);
  if (add) {
    codec_.decodeAdd(ctx_.format, src, bytes, out, n);
  } else {
    codec_.decode(ctx_.format, src, bytes, out, n);
  }
  codec_.synchronize();  // src (a receive buffer) may be reused once this returns
  checkHeader(header_, bytes, n);
}

void Steps::decode(const std::byte* src, std::size_t bytes, float* dst, std::size_t n) {
  const std::uint64_t start = fastClockTicks();
  if (direct_) {
    decodeDirect(src, bytes, dst, n, false);
  } else if (!staged()) {
    codec_.decode(ctx_.format, src, bytes, dst, n);
  } else {
    codec_.decode(ctx_.format, upload(src, bytes, n), bytes, dst, n);
    deferred(src, bytes, false);  // a receive into src waits for the upload
  }
  account(ctx_, ctx_.stats.decodeSeconds, Kind::kDecode, start);
}

void Steps::decodeAdd(const std::byte* src, std::size_t bytes, float* acc, std::size_t n) {
  const std::uint64_t start = fastClockTicks();
  if (direct_) {
    decodeDirect(src, bytes, acc, n, true);
  } else if (!staged()) {
    codec_.decodeAdd(ctx_.format, src, bytes, acc, n);
  } else {
    codec_.decodeAdd(ctx_.format, upload(src, bytes, n), bytes, acc, n);
    deferred(src, bytes, false);
  }
  account(ctx_, ctx_.stats.decodeSeconds, Kind::kDecodeAdd, start);
}

RequestPtr Steps::send(int peer, const std::byte* data, std::size_t bytes, std::size_t n, int tag) {
  settle(data, bytes, false);
  ctx_.stats.wireBytes += bytes;
  ctx_.stats.fp32Bytes += n * sizeof(float);
  return ctx_.transport.isend(peer, data, bytes, tag);
}

RequestPtr Steps::sendFloats(int peer, const float* data, std::size_t n, int tag) {
  settle(data, n * sizeof(float), false);
  ctx_.stats.wireBytes += n * sizeof(float);
  ctx_.stats.fp32Bytes += n * sizeof(float);
  return ctx_.transport.isend(peer, data, n * sizeof(float), tag);
}

RequestPtr Steps::recv(int peer, void* data, std::size_t bytes, int tag) {
  settle(data, bytes, true);
  return ctx_.transport.irecv(peer, data, bytes, tag);
}

void Steps::sendRange(int peer, const std::byte* data, std::size_t bytes, std::size_t n, int tag,
                      std::vector<RequestPtr>& into) {
  sendPieces(peer, data, bytes, n, tag, kMaxMessageBytes, into);
}

std::vector<RequestPtr> Steps::recvRange(int peer, std::byte* data, std::size_t bytes, int tag) {
  return recvPieces(peer, data, bytes, tag, kMaxMessageBytes);
}

void Steps::waitRange(std::vector<RequestPtr>& pieces, std::size_t bytes) {
  waitPieces(pieces, bytes, kMaxMessageBytes);
}

void Steps::sendPieces(int peer, const std::byte* data, std::size_t bytes, std::size_t n, int tag,
                       std::size_t piece, std::vector<RequestPtr>& into) {
  piece = piece == 0 ? kMaxMessageBytes : std::min(piece, kMaxMessageBytes);
  settle(data, bytes, false);
  ctx_.stats.fp32Bytes += n * sizeof(float);
  for (std::size_t offset = 0; offset < bytes; offset += piece) {  // an empty range: no message
    const std::size_t size = std::min(piece, bytes - offset);
    ctx_.stats.wireBytes += size;
    into.push_back(ctx_.transport.isend(peer, data + offset, size, tag));
  }
}

std::vector<RequestPtr> Steps::recvPieces(int peer, std::byte* data, std::size_t bytes, int tag,
                                          std::size_t piece) {
  piece = piece == 0 ? kMaxMessageBytes : std::min(piece, kMaxMessageBytes);
  settle(data, bytes, true);
  std::vector<RequestPtr> pieces;
  for (std::size_t offset = 0; offset < bytes; offset += piece)
    pieces.push_back(ctx_.transport.irecv(peer, data + offset, std::min(piece, bytes - offset), tag));
  return pieces;
}

void Steps::waitPieces(std::vector<RequestPtr>& pieces, std::size_t bytes, std::size_t piece) {
  piece = piece == 0 ? kMaxMessageBytes : std::min(piece, kMaxMessageBytes);
  std::size_t offset = 0;
  for (RequestPtr& request : pieces) {
    const std::size_t size = std::min(piece, bytes - offset);
    waitRecv(*request, size);
    offset += size;
  }
  pieces.clear();
}

bool Steps::arrived(const std::vector<RequestPtr>& pieces) {
  for (const RequestPtr& request : pieces)
    if (!request->done()) return false;
  return true;
}

void Steps::waitRecv(Request& request, std::size_t expectedBytes) {
  const std::uint64_t start = fastClockTicks();
  const std::size_t got = request.wait();
  account(ctx_, ctx_.stats.transferSeconds, Kind::kWait, start);
  ADAPREC_CHECK(got == expectedBytes, ErrorCode::kMismatch,
                "received " << got << " bytes where " << expectedBytes
                            << " were expected: ranks disagree on count or format");
}

void Steps::waitAll(std::vector<RequestPtr>& requests) {
  const std::uint64_t start = fastClockTicks();
  for (RequestPtr& r : requests) {
    if (r) r->wait();
  }
  requests.clear();
  account(ctx_, ctx_.stats.transferSeconds, Kind::kWait, start);
}

}  // namespace adaprec::detail
