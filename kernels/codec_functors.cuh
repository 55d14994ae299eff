// The element-wise and block-scaled codec kernels (fp32, bf16, fp16, fp8, fp8s, e4m3) as host/device
// functors (kernels/execution_context.cuh). They produce exactly the bytes of the host codec
// (lib/codec, the reference) through the same scalar math (include/adaprec/detail/scalar_convert.hpp);
// the layout is docs/formats.md. Encoders write whole aligned words of the payload; decoders write one
// float per element; decodeAdd adds like the host codec (fp32: IEEE addition; lossy formats:
// detail::saturatingAdd). Nothing allocates; every argument is a plain pointer or value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adaprec/codec.hpp"  // kChunkHeaderBytes, kScaleBlock
#include "adaprec/detail/scalar_convert.hpp"
#include "execution_context.cuh"
#include "word_io.cuh"

namespace adaprec::kernels {

// Per-element codes: kBytes wide, encode/decode, and the addition of decodeAdd.
struct F32Code {
  static constexpr unsigned kBytes = 4;
  static ADAPREC_HD std::uint32_t encode(float x) { return detail::floatBits(x); }
  static ADAPREC_HD float decode(std::uint32_t code) { return detail::bitsFloat(code); }
  // fp32 is lossless: plain IEEE addition, an overflowing sum is Inf (as MPI_SUM).
  static ADAPREC_HD float add(float acc, float v) { return detail::addRn(acc, v); }
};

template <class Math>
struct SmallFloatCode {
  static constexpr unsigned kBytes = Math::kBits / 8;
  static ADAPREC_HD std::uint32_t encode(float x) { return Math::encode(x); }
  static ADAPREC_HD float decode(std::uint32_t code) { return Math::decode(code); }
  static ADAPREC_HD float add(float acc, float v) { return detail::saturatingAdd(acc, v); }
};

// The 16-byte header and the zeroed padding of the parameter section [usedParams, paramsBytes),
// written by thread 0 of block 0 (a few bytes per chunk: byte stores).
ADAPREC_HD void writeHeaderAndPadding(std::uint8_t* chunk, std::uint8_t formatId, std::uint64_t count,
                                      std::size_t usedParams, std::size_t paramsBytes) {
  chunk[0] = 0x41;  // magic 'A' 'P', version 1 (lib/codec/chunk_header.hpp)
  chunk[1] = 0x50;
  chunk[2] = 1;
  chunk[3] = formatId;
  for (int i = 4; i < 8; ++i) chunk[i] = 0;  // flags: none for these formats
  for (int i = 0; i < 8; ++i) chunk[8 + i] = static_cast<std::uint8_t>(count >> (8 * i));
  for (std::size_t i = usedParams; i < paramsBytes; ++i) chunk[kChunkHeaderBytes + i] = 0;
}

template <class Ctx>
ADAPREC_HD bool isFirstThread(const Ctx& ctx) {
  return ctx.blockIndex() == 0 && ctx.threadIndex() == 0;
}

template <class Ctx>
ADAPREC_HD std::size_t globalThread(const Ctx& ctx) {
  return static_cast<std::size_t>(ctx.blockIndex()) * ctx.threadsPerBlock() + ctx.threadIndex();
}

template <class Ctx>
ADAPREC_HD std::size_t globalThreads(const Ctx& ctx) {
  return static_cast<std::size_t>(ctx.gridSize()) * ctx.threadsPerBlock();
}

// `scaled` (x times the block's scale factors), or x itself when x is NaN. The host's x86 multiply
// returns a NaN operand unchanged (quieted), so this changes nothing there; a GPU multiply returns the
// canonical NaN 0x7fffffff, which would lose the sign the format keeps (docs/formats.md).
ADAPREC_HD float keepNan(float x, float scaled) {
  const std::uint32_t u = detail::floatBits(x);
  return detail::bitsFloat(detail::select((u & detail::kF32AbsMask) > detail::kF32InfBits, u, detail::floatBits(scaled)));
}

struct NoShared {
  unsigned char unused;
};

// fp32, bf16, fp16, fp8: one thread per aligned output word (grid-stride), header by thread 0.
template <class Code>
struct EncodeElementwise {
  using Shared = NoShared;
  const float* src;
  std::size_t count;
  std::uint8_t* chunk;
  std::size_t paramsBytes;
  std::uint8_t formatId;

  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    if (isFirstThread(ctx)) writeHeaderAndPadding(chunk, formatId, count, 0, paramsBytes);
    std::uint8_t* payload = chunk + kChunkHeaderBytes + paramsBytes;
    const unsigned m = misalignment(payload);
    const std::size_t bytes = count * Code::kBytes;
    const float* in = src;
    const auto codeOf = [in](std::size_t i) { return Code::encode(in[i]); };
    const std::size_t end = endStreamWord(bytes, m);
    for (std::size_t w = globalThread(ctx); w < end; w += globalThreads(ctx)) {
      writeStreamWord<Code::kBytes>(payload, m, w, 0, bytes, codeOf);
    }
  }
};

// One thread per output float (grid-stride); the codes come from aligned word loads.
template <class Code, bool kAdd>
struct DecodeElementwise {
  using Shared = NoShared;
  const std::uint8_t* chunk;
  std::size_t count;
  std::size_t paramsBytes;
  float* out;

  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    const std::uint8_t* payload = chunk + kChunkHeaderBytes + paramsBytes;
    const std::uint8_t* end = payload + count * Code::kBytes;
    const std::size_t byWords = wordLoadableElements(count * Code::kBytes, Code::kBytes);
    std::size_t i = globalThread(ctx);
    for (; i < byWords; i += globalThreads(ctx)) {
      const float v = Code::decode(loadUnalignedWords<Code::kBytes>(payload + i * Code::kBytes));
      out[i] = kAdd ? Code::add(out[i], v) : v;
    }
    for (; i < count; i += globalThreads(ctx)) {  // the chunk's last kLoadSlack bytes
      const float v = Code::decode(loadUnaligned<Code::kBytes>(payload + i * Code::kBytes, end));
      out[i] = kAdd ? Code::add(out[i], v) : v;
    }
  }
};

// fp8s/e4m3: one block per scale block of kScaleBlock elements (grid-stride over scale blocks). The
// block reduces its finite amax in shared memory (a tree over the threads' partial maxima), thread 0
// writes the int16 scale exponent, then every thread encodes whole words of the block's payload range.
// With a payload that is not 4-byte aligned, the word straddling two scale blocks gets its bytes from
// both blocks' byte stores.
template <class Math>
struct EncodeScaled {
  struct Shared {
    std::uint32_t amax[kMaxThreadsPerBlock];  // fp32 bits of |x|, which order like the values
  };
  const float* src;
  std::size_t count;
  std::uint8_t* chunk;
  std::size_t paramsBytes;
  std::uint8_t formatId;

  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    const std::size_t blocks = (count + kScaleBlock - 1) / kScaleBlock;
    if (isFirstThread(ctx)) writeHeaderAndPadding(chunk, formatId, count, 2 * blocks, paramsBytes);
    std::uint8_t* exps = chunk + kChunkHeaderBytes;
    std::uint8_t* payload = exps + paramsBytes;
    const unsigned m = misalignment(payload);
    const unsigned t = ctx.threadIndex();
    const unsigned threads = ctx.threadsPerBlock();
    std::uint32_t* amax = ctx.shared().amax;
    for (std::size_t b = ctx.blockIndex(); b < blocks; b += ctx.gridSize()) {
      const std::size_t lo = b * kScaleBlock;
      const std::size_t hi = lo + kScaleBlock < count ? lo + kScaleBlock : count;
      std::uint32_t local = 0;  // NaN and Inf do not choose the scale
      for (std::size_t i = lo + t; i < hi; i += threads) {
        const std::uint32_t a = detail::floatBits(src[i]) & detail::kF32AbsMask;
        const std::uint32_t finite = a < detail::kF32InfBits ? a : 0u;
        local = finite > local ? finite : local;
      }
      amax[t] = local;
      ctx.sync();
      unsigned span = 1;  // the smallest power of two >= threads
      while (span < threads) span *= 2;
      for (unsigned half = span / 2; half > 0; half /= 2) {
        if (t < half && t + half < threads) amax[t] = amax[t + half] > amax[t] ? amax[t + half] : amax[t];
        ctx.sync();
      }
      const int e = Math::scaleExponent(detail::bitsFloat(amax[0]));
      if (t == 0) {
        exps[2 * b] = static_cast<std::uint8_t>(e & 0xff);
        exps[2 * b + 1] = static_cast<std::uint8_t>((e >> 8) & 0xff);
      }
      const detail::ScaleFactors f = detail::encodeFactors(e);
      // Below the format's largest finite code when amax is near FLT_MAX (docs/formats.md).
      const std::uint32_t maxMagnitude = Math::maxMagnitudeForScale(e);
      const float* in = src;
      const auto codeOf = [in, f, maxMagnitude](std::size_t i) {
        return Math::encode(keepNan(in[i], detail::mulRn(detail::mulRn(in[i], f.first), f.second)), maxMagnitude);
      };
      const std::size_t end = endStreamWord(hi, m);
      for (std::size_t w = firstStreamWord(lo, m) + t; w < end; w += threads) {
        writeStreamWord<1>(payload, m, w, lo, hi, codeOf);
      }
      ctx.sync();  // everyone has read amax[0] before the next scale block overwrites it
    }
  }
};

// fp8s/e4m3 decode: one block per scale block (grid-stride); every thread reads the block's exponent.
template <class Math, bool kAdd>
struct DecodeScaled {
  using Shared = NoShared;
  const std::uint8_t* chunk;
  std::size_t count;
  std::size_t paramsBytes;
  float* out;

  template <class Ctx>
  ADAPREC_HD void operator()(Ctx& ctx) const {
    const std::size_t blocks = (count + kScaleBlock - 1) / kScaleBlock;
    const std::uint8_t* exps = chunk + kChunkHeaderBytes;
    const std::uint8_t* payload = exps + paramsBytes;
    const std::uint8_t* end = payload + count;
    const std::size_t allByWords = wordLoadableElements(count, 1);
    for (std::size_t b = ctx.blockIndex(); b < blocks; b += ctx.gridSize()) {
      const auto e = static_cast<std::int16_t>(loadUnaligned<2>(exps + 2 * b, end));
      const detail::ScaleFactors g = detail::decodeFactors(e);
      const std::size_t lo = b * kScaleBlock;
      const std::size_t hi = lo + kScaleBlock < count ? lo + kScaleBlock : count;
      const auto decodeAt = [&](std::size_t i, std::uint32_t code) {
        const float d = Math::decode(code);
        const float v = keepNan(d, detail::mulRn(detail::mulRn(d, g.first), g.second));
        out[i] = kAdd ? detail::saturatingAdd(out[i], v) : v;
      };
      const std::size_t byWords = hi < allByWords ? hi : allByWords;
      std::size_t i = lo + ctx.threadIndex();
      for (; i < byWords; i += ctx.threadsPerBlock()) decodeAt(i, loadUnalignedWords<1>(payload + i));
      for (; i < hi; i += ctx.threadsPerBlock()) decodeAt(i, loadUnaligned<1>(payload + i, end));
    }
  }
};

}  // namespace adaprec::kernels
