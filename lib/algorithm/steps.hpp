// The timed building blocks every compressed algorithm is made of: encode (with error feedback),
// decode, decodeAdd, send, receive and wait. They fill AllreduceStats so the split between codec time
// and transfer time is measured the same way for every algorithm.
// The float buffers live where ctx.device says (device_codec.hpp); encoded bytes always live in host
// memory (the workspace's staging buffers the transport sends and receives). On a device, encode runs
// there into a device chunk that is copied to the host staging buffer, and decode copies the received
// bytes up and decodes there; each step synchronizes the stream before it returns (correctness first:
// docs/gpu.md says where copies could overlap transfers instead). Device time is counted where the
// stream is synchronized: encodeKeepDecoded's decode counts as encode time there.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithm/algorithm.hpp"
#include "algorithm/device_codec.hpp"

namespace adaprec::detail {

class Steps {
 public:
  // The codec runs on ctx.device (the host codec when null).
  explicit Steps(AlgorithmContext& ctx) : ctx_(ctx), codec_(ctx.device != nullptr ? *ctx.device : host_) {}

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
  static constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 26;

  // Waits for a receive and checks that exactly `expectedBytes` arrived (else Error(kMismatch)).
  void waitRecv(Request& request, std::size_t expectedBytes);
  void waitAll(std::vector<RequestPtr>& requests);

  Format format() const { return ctx_.format; }
  // The device the float buffers live on; staged(): not host memory, so floats that travel must be
  // copied to and from host memory (hierarchical's fp32 messages, native).
  DeviceCodec& device() { return codec_; }
  bool staged() const { return !codec_.hostMemory(); }

 private:
  AlgorithmContext& ctx_;
  HostDeviceCodec host_;  // declared before codec_, which may refer to it
  DeviceCodec& codec_;
  DeviceScratch chunk_{codec_};  // staged: the device copy of the chunk being encoded or decoded

  // encode() into `chunk` (host or device memory, as the floats), without timing.
  void encodeTo(const float* src, std::size_t n, std::byte* chunk, std::size_t bytes, std::size_t slot,
                std::size_t position, std::size_t total);
  // staged: uploads a received chunk (after checking its header names this format and count).
  std::byte* upload(const std::byte* src, std::size_t bytes, std::size_t n);
};

}  // namespace adaprec::detail
