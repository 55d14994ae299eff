// Table-N (table1..table8, table3z..table8z) kernels as host/device functors (execution_context.cuh),
// byte-identical to the host codec (lib/codec/table_build.*, codec.cpp; docs/formats.md "Table-N"):
//   TableBuild   one block: the specification's deterministic sample of up to kTableSampleCount
//                magnitudes gathered into shared memory, sorted there (bitonic network), the
//                percentile entries taken, and header + table + padding written. No host round trip.
//   TableEncode  one thread per aligned 32-bit word of the packed payload (grid-stride): midpoints in
//                shared memory, each code = sign << (N-1) | #{k : |x| > mid[k]} by a binary search,
//                codes packed LSB-first; the block ORs its non-finite flag and sets the header flag.
//   TableDecode  one thread per element: the table in shared memory, code from one or two bytes.
// The encode of a chunk is TableBuild then TableEncode on the same stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/codec.hpp"  // kChunkHeaderBytes, kTableSampleCount
#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/detail/table_spec.hpp"
#include "codec_functors.cuh"  // writeHeaderAndPadding, globalThread(s)
#include "execution_context.cuh"
#include "word_io.cuh"

namespace adaprec::kernels {

inline constexpr unsigned kMaxTableEntries = 128;  // table8
inline constexpr std::uint32_t kNotRanked = 0xffffffffu;  // sorts after every finite magnitude
static_assert((kTableSampleCount & (kTableSampleCount - 1)) == 0, "the bitonic sort needs a power of two");

// Whether a magnitude (fp32 bits, sign cleared) enters the percentiles: finite, and for tableNz
// non-zero (lib/codec/table_build.cpp).
ADAPREC_HD bool ranksInTable(std::uint32_t a, bool zeroCode) {
  return a < detail::kF32InfBits && (!zeroCode || a != 0);
}

ADAPREC_HD void storeBytes4(std::uint8_t* p, std::uint32_t v) {
  for (int b = 0; b < 4; ++b) p[b] = static_cast<std::uint8_t>(v >> (8 * b));
}

struct TableBuild {
  struct Shared {
    std::uint32_t keys[kTableSampleCount];
    std::uint32_t ranked;  // how many keys are magnitudes (the rest are kNotRanked)
  };
  const float* src;
  std::size_t count;
  std::uint8_t* chunk;
  std::size_t paramsBytes;
  std::uint8_t formatId;
  unsigned bits;
  bool zeroCode;

  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    if (ctx.blockIndex() != 0) return;  // one block does it all (a whole block returns: no sync skipped)
    const unsigned t = ctx.threadIndex();
    const unsigned threads = ctx.threadsPerBlock();
    const std::size_t tableSize = std::size_t{1} << (bits - 1);
    if (t == 0) writeHeaderAndPadding(chunk, formatId, count, 4 * tableSize, paramsBytes);
    std::uint32_t* keys = ctx.shared().keys;
    const std::uint64_t size = detail::tableSampleSize(count, kTableSampleCount);
    for (std::size_t j = t; j < kTableSampleCount; j += threads) {
      std::uint32_t key = kNotRanked;
      if (j < size) {
        const std::uint32_t a =
            detail::floatBits(src[detail::tableSamplePosition(j, count, kTableSampleCount)]) & detail::kF32AbsMask;
        if (ranksInTable(a, zeroCode)) key = a;
      }
      keys[j] = key;
    }
    ctx.sync();
    // Bitonic sort, ascending: log2(S) * (log2(S) + 1) / 2 compare-exchange rounds.
    for (std::size_t k = 2; k <= kTableSampleCount; k *= 2) {
      for (std::size_t j = k / 2; j > 0; j /= 2) {
        for (std::size_t i = t; i < kTableSampleCount; i += threads) {
          const std::size_t l = i ^ j;
          if (l > i) {
            const std::uint32_t a = keys[i], b = keys[l];
            if ((a > b) == ((i & k) == 0)) {
              keys[i] = b;
              keys[l] = a;
            }
          }
        }
        ctx.sync();
      }
    }
    for (std::size_t i = t; i < kTableSampleCount; i += threads) {  // exactly one thread finds the end
      const bool lastRanked = keys[i] != kNotRanked && (i + 1 == kTableSampleCount || keys[i + 1] == kNotRanked);
      if (lastRanked) ctx.shared().ranked = static_cast<std::uint32_t>(i + 1);
      if (i == 0 && keys[0] == kNotRanked) ctx.shared().ranked = 0;
    }
    ctx.sync();
    const std::uint64_t m = ctx.shared().ranked;
    std::uint8_t* table = chunk + kChunkHeaderBytes;
    const std::size_t first = zeroCode ? 1 : 0;
    const std::size_t rankedEntries = tableSize - first;
    if (zeroCode && t == 0) storeBytes4(table, 0);
    for (std::size_t k = 1 + t; k <= rankedEntries; k += threads) {
      const std::uint32_t v = m == 0 ? 0u : keys[detail::tablePercentileRank(k, rankedEntries, m)];
      storeBytes4(table + 4 * (first + k - 1), v);
    }
  }
};

struct TableEncode {
  struct Shared {
    float mids[kMaxTableEntries];
    std::uint32_t nonFinite[kMaxThreadsPerBlock];
  };
  const float* src;
  std::size_t count;
  std::uint8_t* chunk;
  std::size_t paramsBytes;
  unsigned bits;
  bool zeroCode;

  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    const unsigned t = ctx.threadIndex();
    const unsigned threads = ctx.threadsPerBlock();
    const std::uint32_t tableSize = 1u << (bits - 1);
    const std::uint8_t* table = chunk + kChunkHeaderBytes;
    // Reads stop at the table's end: the payload after it is what this kernel writes, not yet
    // initialized (compute-sanitizer's initcheck on an H100 flagged whole-word reads into it).
    const std::uint8_t* tableEnd = table + 4 * tableSize;
    float* mids = ctx.shared().mids;
    for (std::uint32_t k = t; k + 1 < tableSize; k += threads) {
      const float lower = detail::bitsFloat(loadUnaligned<4>(table + 4 * k, tableEnd));
      const float upper = detail::bitsFloat(loadUnaligned<4>(table + 4 * (k + 1), tableEnd));
      // tableNz: index 0 only for |x| = 0 (codec.cpp)
      mids[k] = zeroCode && k == 0 ? 0.0f : detail::tableMidpoint(lower, upper);
    }
    ctx.sync();
    std::uint8_t* payload = chunk + kChunkHeaderBytes + paramsBytes;
    const unsigned m = misalignment(payload);
    const std::size_t bytes = static_cast<std::size_t>(detail::tablePayloadBytes(count, bits));
    const float* in = src;
    std::uint32_t nonFinite = 0;
    const auto codeOf = [in, mids, tableSize, this, &nonFinite](std::size_t i) {
      const std::uint32_t u = detail::floatBits(in[i]);
      const std::uint32_t a = u & detail::kF32AbsMask;
      nonFinite |= static_cast<std::uint32_t>(a >= detail::kF32InfBits);
      // #{k : |x| > mids[k]} over the non-decreasing midpoints (NaN: 0, every comparison is false)
      const float x = detail::bitsFloat(a);
      std::uint32_t idx = 0;
      for (std::uint32_t step = tableSize / 2; step > 0; step /= 2) idx += x > mids[idx + step - 1] ? step : 0u;
      return ((u >> 31) << (bits - 1)) | idx;
    };
    const std::size_t end = endStreamWord(bytes, m);
    for (std::size_t w = globalThread(ctx); w < end; w += globalThreads(ctx)) {
      // The codes whose bits meet this word's bytes [begin, stop), packed LSB-first (<= 46 bits).
      const std::int64_t wordBegin = 4 * static_cast<std::int64_t>(w) - static_cast<std::int64_t>(m);
      const std::size_t begin = wordBegin > 0 ? static_cast<std::size_t>(wordBegin) : 0;
      const std::size_t stop = static_cast<std::size_t>(wordBegin + 4) < bytes ? static_cast<std::size_t>(wordBegin + 4) : bytes;
      if (begin >= stop) continue;
      const std::size_t firstCode = 8 * begin / bits;
      std::size_t lastCode = (8 * stop - 1) / bits;
      if (lastCode >= count) lastCode = count - 1;  // padding bits stay 0
      std::uint64_t window = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll 1  // rolled: fewer registers (docs/gpu.md, ptxas figures)
#endif
      for (std::size_t i = firstCode; i <= lastCode; ++i) {
        window |= static_cast<std::uint64_t>(codeOf(i)) << (bits * (i - firstCode));
      }
      const std::uint64_t value = window >> (8 * begin - bits * firstCode);
      if (static_cast<std::int64_t>(begin) == wordBegin && static_cast<std::int64_t>(stop) == wordBegin + 4) {
        storeAlignedWord(payload + begin, static_cast<std::uint32_t>(value));
      } else {
        for (std::size_t o = begin; o < stop; ++o) payload[o] = static_cast<std::uint8_t>(value >> (8 * (o - begin)));
      }
    }
    // The block's non-finite flag (an OR tree), then header flag bit 0 from thread 0 of each block
    // that saw NaN/Inf (every writer stores the same byte value).
    std::uint32_t* flags = ctx.shared().nonFinite;
    flags[t] = nonFinite;
    ctx.sync();
    unsigned span = 1;
    while (span < threads) span *= 2;
    for (unsigned half = span / 2; half > 0; half /= 2) {
      if (t < half && t + half < threads) flags[t] |= flags[t + half];
      ctx.sync();
    }
    if (t == 0 && flags[0] != 0) chunk[4] = 1;  // kFlagNonFinite, little-endian
  }
};

// How many leading elements TableDecode reads by whole words: element i's bits lie in payload bytes
// bit/8 and bit/8 + 1 (bit = i * bits), which loadUnalignedWords may read while bit/8 + 1 + kLoadSlack
// <= the payload's bytes. Computed once by the launcher on the host: a 64-bit division by `bits` in
// every thread, or the test in every element, cost the decoders 10-30 % on an H100.
ADAPREC_HD std::size_t tableWordElements(std::size_t count, unsigned bits) {
  const auto payloadBytes = static_cast<std::size_t>(detail::tablePayloadBytes(count, bits));
  if (payloadBytes < kLoadSlack + 1) return 0;
  const std::size_t n = (payloadBytes - kLoadSlack - 1) * 8 / bits + 1;
  return n < count ? n : count;
}

template <bool kAdd>
struct TableDecode {
  struct Shared {
    float table[kMaxTableEntries];
  };
  const std::uint8_t* chunk;
  std::size_t count;
  std::size_t paramsBytes;
  float* out;
  unsigned bits;
  std::size_t wordElements;  // tableWordElements(count, bits)

  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    const std::uint32_t tableSize = 1u << (bits - 1);
    float* table = ctx.shared().table;
    const std::uint8_t* payload = chunk + kChunkHeaderBytes + paramsBytes;
    const std::uint8_t* end = payload + detail::tablePayloadBytes(count, bits);  // the chunk's
    const std::uint8_t* tableEnd = chunk + kChunkHeaderBytes + 4 * tableSize;
    for (std::uint32_t k = ctx.threadIndex(); k < tableSize; k += ctx.threadsPerBlock()) {
      table[k] = detail::bitsFloat(loadUnaligned<4>(chunk + kChunkHeaderBytes + 4 * k, tableEnd));
    }
    ctx.sync();
    const bool nonFinite = (loadUnaligned<1>(chunk + 4, end) & 1u) != 0;
    const std::uint32_t mask = (1u << bits) - 1;
    if (nonFinite) {
      // The chunk held NaN/Inf, which Table-N cannot carry: NaN everywhere (codec.cpp).
      const float v = detail::bitsFloat(detail::kF32QuietNanBits);
      for (std::size_t i = globalThread(ctx); i < count; i += globalThreads(ctx)) out[i] = kAdd ? detail::addRn(out[i], v) : v;
      return;
    }
    const auto decodeAt = [&](std::size_t i, std::uint32_t code) {
      code &= mask;
      const std::uint32_t magnitude = detail::floatBits(table[code & (tableSize - 1)]);
      const float v = detail::bitsFloat(magnitude ^ ((code >> (bits - 1)) << 31));
      out[i] = kAdd ? detail::saturatingAdd(out[i], v) : v;
    };
    std::size_t i = globalThread(ctx);
    for (; i < wordElements; i += globalThreads(ctx)) {
      const std::size_t bit = i * bits;
      const unsigned shift = static_cast<unsigned>(bit % 8);
      std::uint32_t code = loadUnalignedWords<1>(payload + bit / 8) >> shift;
      if (shift + bits > 8) code |= loadUnalignedWords<1>(payload + bit / 8 + 1) << (8 - shift);
      decodeAt(i, code);
    }
    for (; i < count; i += globalThreads(ctx)) {  // the chunk's last bytes
      const std::size_t bit = i * bits;
      const unsigned shift = static_cast<unsigned>(bit % 8);
      std::uint32_t code = loadUnaligned<1>(payload + bit / 8, end) >> shift;
      if (shift + bits > 8) code |= loadUnaligned<1>(payload + bit / 8 + 1, end) << (8 - shift);
      decodeAt(i, code);
    }
  }
};

}  // namespace adaprec::kernels
