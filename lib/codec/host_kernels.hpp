// The hot loops of the host codecs, compiled once per ISA (lib/codec/meson.build): x86-64-v4
// (AVX-512), x86-64-v3 (AVX2, F16C, BMI2) and the baseline. hostKernels() picks the best one this CPU
// runs. All variants compute the same IEEE operations element by element, so their output is
// bit-identical (tested); only speed differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace adaprec::codec {

// Chunk payloads and parameters are byte pointers with no alignment guarantee (chunks are packed back
// to back in transfer buffers); the loops read and write them with memcpy, which compiles to plain
// (unaligned) loads and stores. Float arrays (src/dst/acc) are ordinary aligned float arrays.
struct HostKernels {
  const char* isa;

  void (*decodeAddF32)(const std::uint8_t* src, std::size_t n, float* acc);

  void (*encodeF16)(const float* src, std::size_t n, std::uint8_t* dst);
  void (*decodeF16)(const std::uint8_t* src, std::size_t n, float* dst);
  void (*decodeAddF16)(const std::uint8_t* src, std::size_t n, float* acc);
  void (*encodeBf16)(const float* src, std::size_t n, std::uint8_t* dst);
  void (*decodeBf16)(const std::uint8_t* src, std::size_t n, float* dst);
  void (*decodeAddBf16)(const std::uint8_t* src, std::size_t n, float* acc);

  // 8-bit floats. `scaled` formats take one int16 exponent per kScaleBlock elements (written by the
  // encoder, read by the decoder); the unscaled fp8 passes nullptr.
  void (*encodeFp8)(const float* src, std::size_t n, std::uint8_t* exps, std::uint8_t* dst);
  void (*encodeE4m3)(const float* src, std::size_t n, std::uint8_t* exps, std::uint8_t* dst);
  void (*decodeFp8)(const std::uint8_t* src, std::size_t n, const std::uint8_t* exps, float* dst);
  void (*decodeE4m3)(const std::uint8_t* src, std::size_t n, const std::uint8_t* exps, float* dst);
  void (*decodeAddFp8)(const std::uint8_t* src, std::size_t n, const std::uint8_t* exps, float* acc);
  void (*decodeAddE4m3)(const std::uint8_t* src, std::size_t n, const std::uint8_t* exps, float* acc);

  // Table-N: codes of `bits` bits against the K-1 midpoints; returns whether any element was NaN/Inf.
  bool (*encodeTable)(const float* src, std::size_t n, unsigned bits, const float* mids, std::uint8_t* dst);
  // signedTable[code] is the value of code (sign bit on top of the index): 2K values, the second K
  // the negations of the first (the AVX-512 decoder looks magnitudes up and flips the sign bit), and
  // at least 16 readable entries (the vector decoders load whole registers of it).
  void (*decodeTable)(const std::uint8_t* src, std::size_t n, unsigned bits, const float* signedTable,
                      float* dst);
  void (*decodeAddTable)(const std::uint8_t* src, std::size_t n, unsigned bits, const float* signedTable,
                         float* acc);
};

// The fastest variant this CPU supports, unless ADAPREC_CPU_ISA=generic|avx2|avx512 picks one.
const HostKernels& hostKernels();
const HostKernels& genericHostKernels();
// The variant ADAPREC_CPU_ISA=want selects ("" = the widest); Error(kUnsupported) when this CPU or
// build lacks it. want must be one of generic, avx2, avx512 or empty.
const HostKernels& kernelsForIsa(std::string_view want);
// nullptr when this CPU (or build) lacks x86-64-v3 / x86-64-v4.
const HostKernels* avx2HostKernels();
const HostKernels* avx512HostKernels();

}  // namespace adaprec::codec
