// adaprec-crc32c-bench: CRC32C throughput (the checksum transport's per-message cost) against memcpy
// of the same buffer, measured in the same run with the operations taking turns, for the hardware
// (SSE4.2, three streams) and the portable (slicing-by-8) implementation.
//   usage: adaprec-crc32c-bench [bytes...]   (default: 4 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB)
// Throughput counts bytes read: crc reads n; memcpy reads n and writes n, reported as n per second too
// (the "x memcpy" ratio compares the time to process one buffer each way).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "../support/interleaved_timing.hpp"
#include "transport/crc32c.hpp"

namespace {

using adaprec::bench::interleavedMedians;

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {4096, 65536, 1u << 20, 16u << 20, 256u << 20};
  std::printf("crc32c dispatch: %s\n", adaprec::detail::crc32cImplementation());
  std::printf("%12s %10s %12s %10s %12s %10s\n", "bytes", "memcpy", "crc32c-hw", "x memcpy",
              "crc32c-table", "x memcpy");
  for (std::size_t n : sizes) {
    std::vector<unsigned char> src(n), dst(n);
    std::mt19937 gen(1);
    for (auto& b : src) b = static_cast<unsigned char>(gen());
    volatile std::uint32_t sink = 0;
    const int inner = static_cast<int>(std::max<std::size_t>(1, (64u << 20) / n));  // ~64 MiB per timing
    const bool hw = adaprec::detail::crc32cHasHardware();
    const std::vector<double> t = interleavedMedians(
        n >= (64u << 20) ? 5 : 15,
        {[&] {
           for (int i = 0; i < inner; ++i) std::memcpy(dst.data(), src.data(), n);
           sink = sink + dst[n / 2];
         },
         [&] {
           for (int i = 0; i < inner; ++i)
             sink = sink + (hw ? adaprec::detail::crc32cHardwareExtend(0, src.data(), n) : 0u);
         },
         [&] {
           for (int i = 0; i < inner; ++i) sink = sink + adaprec::detail::crc32cPortableExtend(0, src.data(), n);
         }});
    const double bytes = static_cast<double>(n) * inner;
    const double copy = bytes / t[0] / 1e9;
    const double hwRate = hw ? bytes / t[1] / 1e9 : 0.0;
    const double table = bytes / t[2] / 1e9;
    std::printf("%12zu %7.2f GB/s %7.2f GB/s %9.2fx %9.2f GB/s %9.2fx\n", n, copy, hwRate,
                hw ? t[0] / t[1] : 0.0, table, t[0] / t[2]);
  }
  return 0;
}
