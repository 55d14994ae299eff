// CRC32C (Castagnoli; iSCSI, ext4, SCTP): reflected polynomial 0x82F63B78, register initialised to
// ~0 and inverted at the end, so crc32c("123456789") == 0xE3069283. Used by the checksum transport.
// Two implementations with identical results: the SSE4.2 crc32 instruction (three interleaved streams,
// chosen at run time when the CPU has it) and a portable slicing-by-8 table.
#pragma once

#include <cstddef>
#include <cstdint>

namespace adaprec::detail {

// crc32cExtend(crc32c(a), b) == crc32c(a followed by b); crc32c(x) == crc32cExtend(0, x).
std::uint32_t crc32cExtend(std::uint32_t crc, const void* data, std::size_t bytes);
inline std::uint32_t crc32c(const void* data, std::size_t bytes) { return crc32cExtend(0, data, bytes); }

// The implementations behind crc32cExtend, for tests and benchmarks. crc32cHardwareExtend may only be
// called when crc32cHasHardware().
std::uint32_t crc32cPortableExtend(std::uint32_t crc, const void* data, std::size_t bytes);
std::uint32_t crc32cHardwareExtend(std::uint32_t crc, const void* data, std::size_t bytes);
bool crc32cHasHardware();
// "sse4.2" or "table": what crc32cExtend uses on this machine.
const char* crc32cImplementation();

}  // namespace adaprec::detail
