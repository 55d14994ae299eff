// How `count` elements are cut into `parts` balanced chunks (the first count % parts chunks get one
// more element) and each chunk into segments of at most segmentCount elements, each segment encoded as
// its own self-describing codec chunk. Every rank computes the same layout from the same arguments, so
// message sizes agree without being exchanged. Encoded bytes of all chunks laid end to end form the
// staging buffers the algorithms send from and receive into.
#pragma once

#include <cstddef>
#include <vector>

#include "adaprec/format.hpp"

namespace adaprec::detail {

class Layout {
 public:
  Layout(Format format, std::size_t count, int parts, std::size_t segmentCount);

  int parts() const { return parts_; }
  std::size_t chunkOffset(int chunk) const { return chunkOffset_[chunk]; }
  std::size_t chunkCount(int chunk) const { return chunkOffset_[chunk + 1] - chunkOffset_[chunk]; }
  std::size_t segments(int chunk) const;
  // Element offset (into the whole buffer) and size of segment k of `chunk`.
  std::size_t segmentOffset(int chunk, std::size_t k) const;
  std::size_t segmentCount(int chunk, std::size_t k) const;
  // Byte offset of segment k of `chunk` in the staging buffer, and its encoded size.
  std::size_t segmentByteOffset(int chunk, std::size_t k) const;
  std::size_t segmentBytes(int chunk, std::size_t k) const;
  // Byte range of chunks [first, last) in the staging buffer (contiguous).
  std::size_t chunkByteOffset(int chunk) const { return byteOffset_[chunk]; }
  std::size_t chunksBytes(int first, int last) const { return byteOffset_[last] - byteOffset_[first]; }
  std::size_t totalBytes() const { return byteOffset_[parts_]; }

 private:
  Format format_;
  int parts_;
  std::size_t segment_;
  std::vector<std::size_t> chunkOffset_;  // parts + 1 entries
  std::vector<std::size_t> byteOffset_;   // parts + 1 entries
};

}  // namespace adaprec::detail
