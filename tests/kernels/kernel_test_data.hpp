// Inputs for the kernel tests: random and adversarial float arrays, padded byte buffers with guard
// bytes and chosen misalignment, and the chunk layout arithmetic (so the header-only threaded test
// needs no libadaprec).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/detail/scalar_convert.hpp"
#include "adaprec/format.hpp"

namespace kernel_test {

using adaprec::Format;

inline const Format kFormats[] = {Format::kFp32,   Format::kBf16,   Format::kFp16,   Format::kFp8,
                                  Format::kFp8s,   Format::kE4m3,   Format::kTable1, Format::kTable2,
                                  Format::kTable3, Format::kTable4, Format::kTable5, Format::kTable6,
                                  Format::kTable7, Format::kTable8, Format::kTable3z, Format::kTable4z,
                                  Format::kTable5z, Format::kTable6z, Format::kTable7z, Format::kTable8z};

inline unsigned tableBitsOf(Format f) {
  const auto id = static_cast<unsigned>(f);
  return id >= 11 && id <= 18 ? id - 10 : id >= 23 && id <= 28 ? id - 20 : 0;
}

inline std::string name(Format f) {
  if (const unsigned bits = tableBitsOf(f); bits != 0) {
    return "table" + std::to_string(bits) + (static_cast<unsigned>(f) >= 23 ? "z" : "");
  }
  switch (f) {
    case Format::kFp32: return "fp32";
    case Format::kBf16: return "bf16";
    case Format::kFp16: return "fp16";
    case Format::kFp8: return "fp8";
    case Format::kFp8s: return "fp8s";
    case Format::kE4m3: return "e4m3";
    default: return "?";
  }
}

// docs/formats.md "Chunk layout" for the element-wise and block-scaled formats (checked against
// adaprec::encodedBytes by the host-reference test).
inline std::size_t elementBytes(Format f) {
  return f == Format::kFp32 ? 4 : (f == Format::kBf16 || f == Format::kFp16) ? 2 : 1;
}
inline std::size_t paramsBytes(Format f, std::size_t n) {
  if (const unsigned bits = tableBitsOf(f); bits != 0) return (4 * (std::size_t{1} << (bits - 1)) + 7) / 8 * 8;
  if (f != Format::kFp8s && f != Format::kE4m3) return 0;
  return (2 * ((n + adaprec::kScaleBlock - 1) / adaprec::kScaleBlock) + 7) / 8 * 8;
}
inline std::size_t chunkBytes(Format f, std::size_t n) {
  const unsigned bits = tableBitsOf(f);
  return adaprec::kChunkHeaderBytes + paramsBytes(f, n) + (bits != 0 ? (n * bits + 7) / 8 : n * elementBytes(f));
}

enum class Kind { kNormal, kRandomBits, kSpecials, kTies, kAllEqual, kAllZero, kNearMax, kFewValues };
inline const Kind kKinds[] = {Kind::kNormal,   Kind::kRandomBits, Kind::kSpecials, Kind::kTies,
                              Kind::kAllEqual, Kind::kAllZero,    Kind::kNearMax,  Kind::kFewValues};
inline const char* name(Kind k) {
  switch (k) {
    case Kind::kNormal: return "normal";
    case Kind::kRandomBits: return "random-bits";
    case Kind::kSpecials: return "specials";
    case Kind::kTies: return "midpoint-ties";
    case Kind::kAllEqual: return "all-equal";
    case Kind::kAllZero: return "all-zero";
    case Kind::kNearMax: return "near-FLT_MAX";
    case Kind::kFewValues: return "few-values";
  }
  return "?";
}

inline float fromBits(std::uint32_t u) { return adaprec::detail::bitsFloat(u); }

inline std::vector<float> makeData(Kind kind, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  switch (kind) {
    case Kind::kNormal: {
      // Gradients: normal values with a magnitude that changes from block to block.
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (std::size_t i = 0; i < n; ++i) x[i] = std::ldexp(normal(rng), -10 - static_cast<int>((i / 3000) % 40));
      break;
    }
    case Kind::kRandomBits:  // every bit pattern: NaN payloads, Inf, subnormals, huge and tiny values
      for (float& v : x) v = fromBits(static_cast<std::uint32_t>(rng()));
      break;
    case Kind::kSpecials: {
      const std::uint32_t specials[] = {
          0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u,  // NaNs (quiet, signalling, payloads)
          0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u,  // ±Inf, ±0
          0x00000001u, 0x807fffffu, 0x00400000u, 0x00012345u,  // subnormals
          0x7f7fffffu, 0xff7fffffu, 0x00800000u, 0x80800000u,  // ±FLT_MAX, ±FLT_MIN
          0x477fe000u, 0x477ff000u, 0x47800000u, 0xc7600000u,  // 65504, 65520, 65536, -57344
          0x43e00000u, 0x43e80000u, 0x33800000u, 0x33000000u,  // 448, 464, 2^-24, 2^-25
          0x37800000u, 0x37000000u, 0x3b000000u, 0x3a800000u,  // fp8/e4m3 subnormal edges
      };
      std::uniform_int_distribution<std::size_t> pick(0, std::size(specials) - 1);
      std::normal_distribution<float> normal(0.0f, 1e-3f);
      for (std::size_t i = 0; i < n; ++i) x[i] = i % 3 == 0 ? normal(rng) : fromBits(specials[pick(rng)]);
      break;
    }
    case Kind::kTies: {
      // Exactly halfway between two codes of one of the formats (ties to even both ways), normal and
      // subnormal targets: the low (23 - mantissa bits) bits of the fp32 value are 100...0.
      const int manBits[] = {7, 10, 2, 3};
      for (std::size_t i = 0; i < n; ++i) {
        const int shift = 23 - manBits[rng() % 4];
        const std::uint32_t exp = 80 + rng() % 80;  // 2^-47 .. 2^32: subnormal and normal targets
        const std::uint32_t top = (static_cast<std::uint32_t>(rng()) << shift) & 0x007fffffu;
        x[i] = fromBits((rng() & 1u) << 31 | exp << 23 | top | (1u << (shift - 1)));
      }
      break;
    }
    case Kind::kAllEqual:
      for (float& v : x) v = -3.0517578e-05f;
      break;
    case Kind::kAllZero:
      break;
    case Kind::kNearMax:
      // Scale blocks whose amax is in the top fp32 binades (the scale exponents where fp8s/e4m3
      // saturate below their largest finite code), values down to half of amax, both signs.
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t b = i / adaprec::kScaleBlock;
        const float amax = b % 3 == 0 ? std::numeric_limits<float>::max()
                                      : std::ldexp(1.0f + static_cast<float>(b % 64) / 64.0f, 126 + static_cast<int>(b % 2));
        const float v = amax * (1.0f - static_cast<float>(rng() % 4096) / 8192.0f);
        x[i] = (i % 2) == 0 ? v : -v;
      }
      break;
    case Kind::kFewValues: {
      // Few distinct magnitudes and their exact midpoints (1, 1.5, 2, 2.5, 3, 0): Table-N entries land
      // on these values, so elements tie exactly with a decision threshold.
      const float values[] = {0.0f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f};
      for (float& v : x) v = (rng() & 1 ? -1.0f : 1.0f) * values[rng() % 6];
      break;
    }
  }
  return x;
}

// The accumulator of decodeAdd: random bits (NaN, Inf, everything) and values near ±FLT_MAX, so sums
// overflow and the saturating addition is exercised.
inline std::vector<float> makeAccumulator(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (float& v : x) {
    const unsigned r = rng() % 4;
    v = r == 0 ? fromBits(static_cast<std::uint32_t>(rng()))
        : r == 1 ? std::numeric_limits<float>::max() * ((rng() & 1) ? -0.999f : 0.999f)
                 : std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), -10);
  }
  return x;
}

inline constexpr unsigned char kGuard = 0xcd;
inline constexpr std::size_t kGuardBytes = 12;

// A byte region `offset` bytes past a 4-byte boundary, with guard bytes on both sides, inside a
// word-aligned allocation whose ends are whole words (the kernels may read the rest of a word).
struct PaddedBytes {
  std::vector<std::uint32_t> storage;
  std::size_t offset, bytes;
  PaddedBytes(std::size_t bytes_, std::size_t offset_) : offset(offset_), bytes(bytes_) {
    storage.assign((kGuardBytes + offset + bytes + kGuardBytes + 3) / 4 + 1, 0);
    std::memset(storage.data(), kGuard, storage.size() * 4);
  }
  unsigned char* base() { return reinterpret_cast<unsigned char*>(storage.data()); }
  unsigned char* data() { return base() + kGuardBytes + offset; }
  std::vector<unsigned char> contents() { return {data(), data() + bytes}; }
  // Whether every byte outside [data, data + bytes) still holds the guard.
  bool guardsIntact() {
    const unsigned char* p = base();
    for (std::size_t i = 0; i < storage.size() * 4; ++i) {
      const bool inside = i >= kGuardBytes + offset && i < kGuardBytes + offset + bytes;
      if (!inside && p[i] != kGuard) return false;
    }
    return true;
  }
};

// Float array starting `offset` floats into its storage, with guard floats around it.
struct PaddedFloats {
  std::vector<float> storage;
  std::size_t offset, count;
  PaddedFloats(const std::vector<float>& values, std::size_t offset_) : offset(offset_), count(values.size()) {
    storage.assign(offset + count + 4, fromBits(0xcdcdcdcdu));
    std::copy(values.begin(), values.end(), storage.begin() + static_cast<std::ptrdiff_t>(offset));
  }
  float* data() { return storage.data() + offset; }
  std::vector<float> contents() const {
    return {storage.begin() + static_cast<std::ptrdiff_t>(offset),
            storage.begin() + static_cast<std::ptrdiff_t>(offset + count)};
  }
  bool guardsIntact() const {
    for (std::size_t i = 0; i < storage.size(); ++i) {
      if ((i < offset || i >= offset + count) && adaprec::detail::floatBits(storage[i]) != 0xcdcdcdcdu) return false;
    }
    return true;
  }
};

// Index of the first differing element (by bits), or -1.
template <class T>
long firstDifference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
  }
  return -1;
}

}  // namespace kernel_test
