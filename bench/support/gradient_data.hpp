// Deterministic gradient-like test data shared by the benchmarks and the codec demo.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace adaprec::bench {

// Gaussian values whose standard deviation changes every `segment` elements (like the layers of a
// model), drawn log-uniformly from [1e-5, 1e-2]: a mix of tiny and ordinary gradient magnitudes.
inline std::vector<float> gradientLikeData(std::size_t count, std::uint64_t seed, std::size_t segment = 65536) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> logScale(-5.0, -2.0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> data(count);
  float scale = 1.0f;
  for (std::size_t i = 0; i < count; ++i) {
    if (i % segment == 0) scale = static_cast<float>(std::pow(10.0, logScale(rng)));
    data[i] = normal(rng) * scale;
  }
  return data;
}

}  // namespace adaprec::bench
