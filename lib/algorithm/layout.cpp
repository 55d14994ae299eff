#include "algorithm/layout.hpp"

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"

namespace adaprec::detail {

Layout::Layout(Format format, std::size_t count, int parts, std::size_t segmentCount)
    : format_(format), parts_(parts), segment_(segmentCount) {
  ADAPREC_CHECK(parts >= 1 && segmentCount >= 1, ErrorCode::kInternal,
                "layout parts=" << parts << " segmentCount=" << segmentCount);
  chunkOffset_.resize(parts + 1);
  byteOffset_.resize(parts + 1);
  const std::size_t base = count / parts;
  const std::size_t extra = count % parts;
  chunkOffset_[0] = 0;
  byteOffset_[0] = 0;
  for (int c = 0; c < parts; ++c) {
    chunkOffset_[c + 1] = chunkOffset_[c] + base + (static_cast<std::size_t>(c) < extra ? 1 : 0);
    std::size_t bytes = 0;
    for (std::size_t k = 0; k < segments(c); ++k) bytes += segmentBytes(c, k);
    byteOffset_[c + 1] = byteOffset_[c] + bytes;
  }
}

std::size_t Layout::segments(int chunk) const {
  return (chunkCount(chunk) + segment_ - 1) / segment_;
}

std::size_t Layout::segmentOffset(int chunk, std::size_t k) const {
  return chunkOffset_[chunk] + k * segment_;
}

std::size_t Layout::segmentCount(int chunk, std::size_t k) const {
  const std::size_t n = chunkCount(chunk);
  const std::size_t start = k * segment_;
  return n - start < segment_ ? n - start : segment_;
}

std::size_t Layout::segmentByteOffset(int chunk, std::size_t k) const {
  // All segments but the last are full, so they have the same encoded size.
  return byteOffset_[chunk] + k * encodedBytes(format_, segment_);
}

std::size_t Layout::segmentBytes(int chunk, std::size_t k) const {
  return encodedBytes(format_, segmentCount(chunk, k));
}

}  // namespace adaprec::detail
