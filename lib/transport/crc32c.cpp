// CRC32C. The register update R(c, data) (no inversions) is linear over GF(2):
//   R(c, A|B) = R(R(c, A), B) = Z_|B|(R(c, A)) ^ R(0, B),   Z_n(x) = R(x, n zero bytes).
// The hardware path uses that to run three streams of kBlock bytes at once (the crc32 instruction has
// a latency of 3 cycles and a throughput of 1 per cycle) and joins them with Z_kBlock, a linear map on
// 32 bits applied through four 256-entry tables built once from the portable implementation.
#include "transport/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define ADAPREC_CRC32C_X86 1
#endif

namespace adaprec::detail {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli polynomial

struct SliceTables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  constexpr SliceTables() {
    for (std::uint32_t b = 0; b < 256; ++b) {
      std::uint32_t c = b;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
      t[0][b] = c;
    }
    for (std::uint32_t b = 0; b < 256; ++b)
      for (int s = 1; s < 8; ++s) t[s][b] = (t[s - 1][b] >> 8) ^ t[0][t[s - 1][b] & 0xffu];
  }
};
constexpr SliceTables kSlice;

std::uint64_t load64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86, arm64 as configured here)
}

// Register update without inversions, portable: slicing-by-8.
std::uint32_t updatePortable(std::uint32_t c, const unsigned char* p, std::size_t n) {
  const auto& t = kSlice.t;
  for (; n >= 8; n -= 8, p += 8) {
    const std::uint64_t v = load64(p) ^ c;
    c = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
        t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xffu];
  return c;
}

#ifdef ADAPREC_CRC32C_X86
constexpr std::size_t kBlock = 4096;  // bytes per stream in the three-way loop

// Z_kBlock as four byte tables: shift(x) = s[0][x & 0xff] ^ s[1][(x >> 8) & 0xff] ^ ...
struct ShiftTables {
  std::array<std::array<std::uint32_t, 256>, 4> s{};
  ShiftTables() {
    static const unsigned char zeros[kBlock] = {};
    std::array<std::uint32_t, 32> basis{};
    for (int bit = 0; bit < 32; ++bit) basis[bit] = updatePortable(1u << bit, zeros, kBlock);
    for (int k = 0; k < 4; ++k)
      for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t v = 0;
        for (int i = 0; i < 8; ++i)
          if (b & (1u << i)) v ^= basis[8 * k + i];
        s[k][b] = v;
      }
  }
  std::uint32_t shift(std::uint32_t x) const {
    return s[0][x & 0xff] ^ s[1][(x >> 8) & 0xff] ^ s[2][(x >> 16) & 0xff] ^ s[3][x >> 24];
  }
};

const ShiftTables& shiftTables() {
  static const ShiftTables tables;
  return tables;
}

__attribute__((target("sse4.2"))) std::uint32_t updateHardware(std::uint32_t c,
                                                                 const unsigned char* p,
                                                                 std::size_t n) {
  if (n >= 3 * kBlock) {
    const ShiftTables& z = shiftTables();
    std::uint64_t c0 = c;
    do {
      std::uint64_t c1 = 0;
      std::uint64_t c2 = 0;
      const unsigned char* p1 = p + kBlock;
      const unsigned char* p2 = p + 2 * kBlock;
      for (std::size_t i = 0; i < kBlock; i += 8) {
        c0 = _mm_crc32_u64(c0, load64(p + i));
        c1 = _mm_crc32_u64(c1, load64(p1 + i));
        c2 = _mm_crc32_u64(c2, load64(p2 + i));
      }
      const std::uint32_t joined = z.shift(z.shift(static_cast<std::uint32_t>(c0)) ^
                                           static_cast<std::uint32_t>(c1)) ^
                                   static_cast<std::uint32_t>(c2);
      c0 = joined;
      p += 3 * kBlock;
      n -= 3 * kBlock;
    } while (n >= 3 * kBlock);
    c = static_cast<std::uint32_t>(c0);
  }
  std::uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) c64 = _mm_crc32_u64(c64, load64(p));
  c = static_cast<std::uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}

bool detectHardware() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

bool crc32cHasHardware() {
#ifdef ADAPREC_CRC32C_X86
  static const bool has = detectHardware();
  return has;
#else
  return false;
#endif
}

const char* crc32cImplementation() { return crc32cHasHardware() ? "sse4.2" : "table"; }

std::uint32_t crc32cPortableExtend(std::uint32_t crc, const void* data, std::size_t bytes) {
  return ~updatePortable(~crc, static_cast<const unsigned char*>(data), bytes);
}

std::uint32_t crc32cHardwareExtend(std::uint32_t crc, const void* data, std::size_t bytes) {
#ifdef ADAPREC_CRC32C_X86
  return ~updateHardware(~crc, static_cast<const unsigned char*>(data), bytes);
#else
  return crc32cPortableExtend(crc, data, bytes);
#endif
}

std::uint32_t crc32cExtend(std::uint32_t crc, const void* data, std::size_t bytes) {
  return crc32cHasHardware() ? crc32cHardwareExtend(crc, data, bytes)
                             : crc32cPortableExtend(crc, data, bytes);
}

}  // namespace adaprec::detail
