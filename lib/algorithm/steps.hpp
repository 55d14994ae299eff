// The timed building blocks every compressed algorithm is made of: encode (with error feedback),
// decode, decodeAdd, send, receive and wait. They fill AllreduceStats so the split between codec time
// and transfer time is measured the same way for every algorithm.
// The float buffers live where ctx.device says (device_codec.hpp). Encoded bytes (the workspace's
// buffers the transport sends and receives) live in host memory, unless the transport accepts the
// device's memory (Transport::acceptsDeviceMemory: CUDA-aware MPI, NCCL), when they are device memory
// too and go to the transport directly ("direct"). Staged, encode runs on the device into a device
// chunk that is copied to the (pinned) host buffer, and decode copies the received bytes up and decodes
// there, all queued without waiting: a mark() after each is kept with the host range it touches, and
// the host waits for it only when that range goes to the transport next (a send waits for the copy
// that fills it; a receive into a buffer a queued upload still reads waits for the upload). So the
// device's copies and decodes run while the host posts and waits for the next transfers. Direct,
// encode writes and decode reads the workspace buffer itself, with no copy, and each step synchronizes
// the stream before it returns: nothing is queued on the device when device memory goes to the
// transport. Device time is counted where the host waits: staged, a deferred decode's device time
// shows up in the wait of whichever step waits for it.
#pragma once

#include <cstddef>
#include <vector>

#include "adaprec/codec.hpp"
#include "algorithm/algorithm.hpp"
#include "algorithm/device_codec.hpp"

namespace adaprec::detail {

class Steps {
 public:
  // The codec runs on ctx.device (the host codec when null).
  explicit Steps(AlgorithmContext& ctx)
      : ctx_(ctx),
        codec_(ctx.device != nullptr ? *ctx.device : host_),
        direct_(deviceDirect(ctx.transport, &codec_)) {}
  // Staged work still queued finishes before the buffers it uses may go (the normal path has waited
  // already: the Communicator synchronizes at the end of every call).
  ~Steps();
  Steps(const Steps&) = delete;
  Steps& operator=(const Steps&) = delete;

  // Encodes src[0..n) into dst (exactly `bytes` = encodedBytes(format, n)). With error feedback the
  // residual of slot `slot` at element positions [position, position + n) of a `total`-element tensor
  // is added first and replaced by the new quantization error.
  void encode(const float* src, std::size_t n, std::byte* dst, std::size_t bytes, std::size_t slot,
              std::size_t position, std::size_t total);
  // encode(), then data[0..n) = decode(dst): the sender keeps exactly what every receiver gets.
  void encodeKeepDecoded(float* data, std::size_t n, std::byte* dst, std::size_t bytes,
                         std::size_t slot, std::size_t position, std::size_t total);
  void decode(const std::byte* src, std::size_t bytes, float* dst, std::size_t n);
  void decodeAdd(const std::byte* src, std::size_t bytes, float* acc, std::size_t n);

  // Posts a send of `bytes` encoding n elements (counted as wire bytes and as 4n fp32 bytes).
  RequestPtr send(int peer, const std::byte* data, std::size_t bytes, std::size_t n, int tag);
  // Same, for data that is plain fp32 on the wire.
  RequestPtr sendFloats(int peer, const float* data, std::size_t n, int tag);
  RequestPtr recv(int peer, void* data, std::size_t bytes, int tag);
  // A byte range of several encoded segments, sent as pieces of at most kMaxMessageBytes (transport
  // message sizes are int-limited under MPI); the receiver cuts the same range the same way.
  void sendRange(int peer, const std::byte* data, std::size_t bytes, std::size_t n, int tag,
                 std::vector<RequestPtr>& into);
  std::vector<RequestPtr> recvRange(int peer, std::byte* data, std::size_t bytes, int tag);
  void waitRange(std::vector<RequestPtr>& pieces, std::size_t bytes);
  // The same with pieces of at most `piece` bytes (0: one message), for AlgorithmContext::messageBytes.
  void sendPieces(int peer, const std::byte* data, std::size_t bytes, std::size_t n, int tag,
                  std::size_t piece, std::vector<RequestPtr>& into);
  std::vector<RequestPtr> recvPieces(int peer, std::byte* data, std::size_t bytes, int tag, std::size_t piece);
  void waitPieces(std::vector<RequestPtr>& pieces, std::size_t bytes, std::size_t piece);
  // Whether every piece of a receive has arrived (progresses the transport, never blocks).
  static bool arrived(const std::vector<RequestPtr>& pieces);
  static constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 26;

  // Waits for a receive and checks that exactly `expectedBytes` arrived (else Error(kMismatch)).
  void waitRecv(Request& request, std::size_t expectedBytes);
  void waitAll(std::vector<RequestPtr>& requests);

  Format format() const { return ctx_.format; }
  // The device the float buffers live on; staged(): not host memory, so floats that travel must be
  // copied to and from host memory (hierarchical's fp32 messages, native).
  DeviceCodec& device() { return codec_; }
  bool staged() const { return !codec_.hostMemory() && !direct_; }
  // The floats are device memory that the transport takes as it is (no staging).
  bool direct() const { return direct_; }

 private:
  AlgorithmContext& ctx_;
  HostDeviceCodec host_;  // declared before codec_, which may refer to it
  DeviceCodec& codec_;
  const bool direct_;
  DeviceScratch chunk_{codec_};  // staged: the device copy of the chunk being encoded or decoded
  std::byte header_[kChunkHeaderBytes];  // direct: the host copy of a received chunk's header

  // encode() into `chunk` (host or device memory, as the floats), without timing.
  void encodeTo(const float* src, std::size_t n, std::byte* chunk, std::size_t bytes, std::size_t slot,
                std::size_t position, std::size_t total);
  // staged: uploads a received chunk (after checking its header names this format and count).
  std::byte* upload(const std::byte* src, std::size_t bytes, std::size_t n);
  // The check of a received chunk's header: this format and count (else Error(kMismatch)).
  void checkHeader(const std::byte* header, std::size_t bytes, std::size_t n) const;
  // direct: decode or decodeAdd a received chunk in device memory, its header copied down and checked.
  void decodeDirect(const std::byte* src, std::size_t bytes, float* out, std::size_t n, bool add);

  // Staged copies queued and not yet waited for: the host range, whether the device writes it (a copy
  // down) or only reads it (an upload), and the mark after it.
  struct Pending {
    const std::byte* begin;
    const std::byte* end;
    bool deviceWrites;
    std::uint64_t ticket;
  };
  std::vector<Pending> pending_;
  void deferred(const void* host, std::size_t bytes, bool deviceWrites);
  // Before the transport reads [p, p + bytes) (hostWrites false) or writes it: waits for the queued
  // copies that write it, or that touch it at all.
  void settle(const void* p, std::size_t bytes, bool hostWrites);
};

}  // namespace adaprec::detail
