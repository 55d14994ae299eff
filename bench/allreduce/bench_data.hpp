// The benchmark's input data: gradient-like values that any rank can regenerate for any (rank, index)
// without communication, so each rank computes the fp64 reference sum of its own check slice locally.
//
// Value i of rank r: scale(segment of i) * z, z ~ approximately standard normal (Irwin-Hall sum of four
// uniforms, bounded at +-3.46), scale drawn log-uniformly from [1e-5, 1e-2] per block of 65536
// elements, the same on every rank (like the layers of a model: ranks see similar magnitudes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace adaprec::bench {

class BenchData {
 public:
  static constexpr std::size_t kSegmentCount = 65536;

  explicit BenchData(std::uint64_t seed) : seed_(seed) {}

  float value(int rank, std::size_t index) const {
    return static_cast<float>(segmentScale(index / kSegmentCount) * normalish(rank, index));
  }

  // out[0 .. end-begin) = values begin..end-1 of `rank`.
  void fill(int rank, float* out, std::size_t begin, std::size_t end) const {
    std::size_t i = begin;
    while (i < end) {
      const std::size_t segment = i / kSegmentCount;
      const std::size_t stop = std::min(end, (segment + 1) * kSegmentCount);
      const double scale = segmentScale(segment);
      for (; i < stop; ++i) out[i - begin] = static_cast<float>(scale * normalish(rank, i));
    }
  }

  // Shared by all ranks: the magnitude of block `segment`.
  double segmentScale(std::size_t segment) const {
    const double u = static_cast<double>(mix(seed_ ^ mix(0x5eed0000ull + segment)) >> 11) * 0x1p-53;
    return std::pow(10.0, -5.0 + 3.0 * u);
  }

  // The unscaled value of (rank, index).
  double normalish(int rank, std::size_t index) const {
    const std::uint64_t key = mix(seed_ + 0x1000003ull * static_cast<std::uint64_t>(rank + 1)) ^ index;
    const std::uint64_t a = mix(key);
    const std::uint64_t b = mix(a ^ 0xa5a5a5a5a5a5a5a5ull);
    const double sum = static_cast<double>(a >> 32) + static_cast<double>(a & 0xffffffffull) +
                       static_cast<double>(b >> 32) + static_cast<double>(b & 0xffffffffull);
    // Four uniforms on [0, 1): mean 2, variance 1/3.
    return (sum * 0x1p-32 - 2.0) * std::sqrt(3.0);
  }

 private:
  static std::uint64_t mix(std::uint64_t x) {  // splitmix64 finalizer
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  std::uint64_t seed_;
};

}  // namespace adaprec::bench
