// Whole-word access to chunk bytes that have no alignment guarantee (chunks are packed back to back in
// transfer buffers, so a payload may start at any byte). Kernels write aligned 32-bit words (one store
// per thread, coalesced across a warp) and fall back to byte stores only for the partial words at the
// two ends of the range they own. Reads use aligned words too, but never reach past the chunk's last
// byte: loadUnaligned takes the chunk's end and reads the value's own bytes one by one where a whole
// word would cross it. (Before, a kernel read the rest of the aligned word at the end of a chunk:
// harmless on the hardware, inside cudaMalloc's 256-byte granule, but compute-sanitizer's memcheck on
// an H100 reported it as an out-of-bounds read in the bf16 decoder, as it would in a user's program
// run under memcheck.) Nothing below a chunk's start is read: the first byte any kernel reads is the
// header's flags at offset 4, whose aligned word starts at offset 1 or later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "adaprec/detail/scalar_convert.hpp"  // ADAPREC_HD

namespace adaprec::kernels {

ADAPREC_HD std::uint32_t loadAlignedWord(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const std::uint32_t*>(p);
#else
  std::uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
#endif
}

ADAPREC_HD void storeAlignedWord(std::uint8_t* p, std::uint32_t w) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<std::uint32_t*>(p) = w;
#else
  std::memcpy(p, &w, sizeof w);
#endif
}

ADAPREC_HD unsigned misalignment(const void* p) {
  return static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(p) & 3u);
}

// The little-endian kBytes-byte value at p (1, 2 or 4 bytes, any alignment) from one or two aligned word
// loads, which touch bytes up to p + 8 (exclusive): only where p + kLoadSlack <= the chunk's end.
inline constexpr std::size_t kLoadSlack = 8;
template <unsigned kBytes>
ADAPREC_HD std::uint32_t loadUnalignedWords(const std::uint8_t* p) {
  static_assert(kBytes == 1 || kBytes == 2 || kBytes == 4, "1, 2 or 4 bytes");
  const unsigned s = misalignment(p);
  const std::uint8_t* base = p - s;
  std::uint64_t v = loadAlignedWord(base);
  if (s + kBytes > 4) v |= static_cast<std::uint64_t>(loadAlignedWord(base + 4)) << 32;
  v >>= 8 * s;
  return kBytes == 4 ? static_cast<std::uint32_t>(v) : static_cast<std::uint32_t>(v) & ((1u << (8 * kBytes)) - 1);
}

// The same value anywhere in a chunk (p + kBytes <= end, `end` one past the chunk's last byte): by
// words where they stay before `end`, else from the value's own bytes. The kernels' loops read their
// last few values (the chunk's last kLoadSlack bytes) with this and the rest with loadUnalignedWords,
// which keeps the per-element check out of the hot loop (it cost decodeAdd 15 % on an H100).
template <unsigned kBytes>
ADAPREC_HD std::uint32_t loadUnaligned(const std::uint8_t* p, const std::uint8_t* end) {
  const unsigned s = misalignment(p);
  if (static_cast<std::size_t>(end - (p - s)) < (s + kBytes > 4 ? 8u : 4u)) {  // the chunk's last word
    std::uint32_t v = 0;
    for (unsigned k = 0; k < kBytes; ++k) v |= static_cast<std::uint32_t>(p[k]) << (8 * k);
    return v;
  }
  return loadUnalignedWords<kBytes>(p);
}

// How many leading elements of kBytes each, of a stream of `bytes` bytes, loadUnalignedWords may read.
ADAPREC_HD std::size_t wordLoadableElements(std::size_t bytes, std::size_t elementBytes) {
  return bytes >= kLoadSlack ? (bytes - kLoadSlack) / elementBytes + 1 : 0;
}

// Writes the bytes of aligned word `word` of a byte stream that lie in [lo, hi). The stream starts at
// `stream` (misalignment m = misalignment(stream)); its aligned word w covers stream offsets
// [4w - m, 4w - m + 4). Byte o of the stream is byte (o % kElemBytes) of codeOf(o / kElemBytes),
// little-endian. A word entirely inside [lo, hi) is one aligned store; the others (at most one at each
// end of the range) are byte stores of only the bytes inside.
template <unsigned kElemBytes, class CodeOf>
ADAPREC_HD void writeStreamWord(std::uint8_t* stream, unsigned m, std::size_t word, std::size_t lo,
                                std::size_t hi, const CodeOf& codeOf) {
  static_assert(kElemBytes == 1 || kElemBytes == 2 || kElemBytes == 4, "1, 2 or 4 bytes per element");
  const std::int64_t wordBegin = 4 * static_cast<std::int64_t>(word) - static_cast<std::int64_t>(m);
  const std::int64_t begin = wordBegin > static_cast<std::int64_t>(lo) ? wordBegin : static_cast<std::int64_t>(lo);
  const std::int64_t end = wordBegin + 4 < static_cast<std::int64_t>(hi) ? wordBegin + 4 : static_cast<std::int64_t>(hi);
  if (begin >= end) return;
  const std::size_t first = static_cast<std::size_t>(begin) / kElemBytes;
  const std::size_t last = static_cast<std::size_t>(end - 1) / kElemBytes;
  std::uint64_t window = 0;  // the codes of elements first..last, little-endian (at most 8 bytes)
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
  for (std::size_t e = first; e <= last; ++e) {
    window |= static_cast<std::uint64_t>(codeOf(e)) << (8 * kElemBytes * (e - first));
  }
  const std::uint64_t bytes = window >> (8 * (static_cast<std::size_t>(begin) - first * kElemBytes));
  if (begin == wordBegin && end == wordBegin + 4) {
    storeAlignedWord(stream + begin, static_cast<std::uint32_t>(bytes));
  } else {
    for (std::int64_t o = begin; o < end; ++o) {
      stream[o] = static_cast<std::uint8_t>(bytes >> (8 * (o - begin)));
    }
  }
}

// Aligned words of a stream with misalignment m that hold bytes of [lo, hi): [first, end).
ADAPREC_HD std::size_t firstStreamWord(std::size_t lo, unsigned m) { return (lo + m) / 4; }
ADAPREC_HD std::size_t endStreamWord(std::size_t hi, unsigned m) { return (hi + m + 3) / 4; }

}  // namespace adaprec::kernels
