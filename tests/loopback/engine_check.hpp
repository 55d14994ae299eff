// Shared by the loopback and MPI suites: test inputs, the fp64 reference and the documented error
// bound (docs/algorithms.md) of every format x algorithm, as a function of the number of
// quantizations a value goes through.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"

namespace adaprec::test {

inline constexpr std::uint32_t kSeed = 20261121;

// Lossless formats get small integers (every summation order is then exact); lossy ones get uniform
// values in [-1, 1], scaled per rank so ranks differ in magnitude.
inline std::vector<float> makeInput(int rank, std::size_t count, bool integers, std::uint32_t seed = kSeed) {
  std::vector<float> v(count);
  std::mt19937 gen(seed * 1000003u + static_cast<std::uint32_t>(rank));
  if (integers) {
    std::uniform_int_distribution<int> dist(-20, 20);
    for (float& x : v) x = static_cast<float>(dist(gen));
  } else {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const float scale = 1.0f + 0.25f * static_cast<float>(rank % 4);
    for (float& x : v) x = dist(gen) * scale;
  }
  return v;
}

inline int floorLog2(int p) {
  int k = 0;
  while ((2 << k) <= p) ++k;
  return k;
}

// How many times a value is quantized (encoded to a lossy format) on its way to the result.
inline int quantizations(Algorithm algorithm, Format wire, int ranks, int nodes) {
  if (ranks <= 1) return 0;
  const int q = 1 << floorLog2(ranks);
  const bool extra = q != ranks;
  switch (algorithm) {
    case Algorithm::kNative: return wire == Format::kFp32 ? 0 : ranks;
    case Algorithm::kRing: return ranks;
    case Algorithm::kTwoShot: return 2;
    case Algorithm::kRabenseifner: return floorLog2(ranks) + 1 + (extra ? 1 : 0);
    case Algorithm::kRecursiveDoubling: return floorLog2(ranks) + (extra ? 2 : 0);
    case Algorithm::kHierarchical:
      if (nodes <= 1) return 0;
      return nodes <= 8 ? 2 : floorLog2(nodes) + 1 + ((1 << floorLog2(nodes)) != nodes ? 1 : 0);
    case Algorithm::kAuto: break;
  }
  return 1 << 20;
}

// Per-element statistics of the inputs the bound is expressed in.
struct InputStats {
  std::vector<double> exact;    // fp64 sum per element
  std::vector<double> absSum;   // S_i = sum over ranks of |x_r[i]|
  double maxAbsSum = 0;         // max_i S_i
  double sumOfMax = 0;          // M = sum over ranks of max_i |x_r[i]|
};

inline InputStats inputStats(const std::vector<std::vector<float>>& inputs) {
  InputStats s;
  const std::size_t n = inputs.empty() ? 0 : inputs[0].size();
  s.exact.assign(n, 0.0);
  s.absSum.assign(n, 0.0);
  for (const std::vector<float>& in : inputs) {
    double mx = 0;
    for (std::size_t i = 0; i < n; ++i) {
      s.exact[i] += in[i];
      s.absSum[i] += std::fabs(in[i]);
      mx = std::max(mx, static_cast<double>(std::fabs(in[i])));
    }
    s.sumOfMax += mx;
  }
  for (double a : s.absSum) s.maxAbsSum = std::max(s.maxAbsSum, a);
  return s;
}

// The documented bound on |result_i - exact_i| (docs/algorithms.md, "Error bounds"), Q quantizations.
inline double errorBound(Format wire, int q, int ranks, const InputStats& s, std::size_t i) {
  const double fp32Slack = s.absSum[i] * ranks * std::ldexp(1.0, -23);  // fp32 additions
  auto growth = [&](double u) { return std::pow(1.0 + u, q) - 1.0; };
  switch (wire) {
    case Format::kFp32: return fp32Slack;
    case Format::kBf16: return growth(std::ldexp(1.0, -8)) * s.absSum[i] + fp32Slack;
    case Format::kFp16:
      return growth(std::ldexp(1.0, -11)) * s.absSum[i] + q * std::ldexp(1.0, -24) + fp32Slack;
    case Format::kFp8:
      return growth(std::ldexp(1.0, -3)) * s.absSum[i] + q * std::ldexp(1.0, -16) + fp32Slack;
    case Format::kFp8s:
    case Format::kE4m3: return growth(std::ldexp(1.0, -3)) * s.maxAbsSum + fp32Slack;
    default: return q * s.sumOfMax + fp32Slack;  // Table-N: each quantization moves a value by at
                                                 // most its chunk's largest magnitude (<= M)
  }
}

// Empty when ok; else a description of the first violation. Checks bit-identical results across
// ranks, exactness (lossless + integer inputs) or the error bound.
inline std::string checkResults(const std::vector<std::vector<float>>& inputs,
                                const std::vector<std::vector<float>>& outputs, Format wire,
                                int quantizationSteps, bool exact, bool average) {
  const int p = static_cast<int>(inputs.size());
  const InputStats s = inputStats(inputs);
  std::ostringstream os;
  for (int r = 1; r < p; ++r) {
    if (outputs[r].size() != outputs[0].size() ||
        (!outputs[0].empty() &&
         std::memcmp(outputs[r].data(), outputs[0].data(), outputs[0].size() * sizeof(float)) != 0)) {
      for (std::size_t i = 0; i < outputs[0].size(); ++i) {
        if (std::memcmp(&outputs[r][i], &outputs[0][i], sizeof(float)) != 0) {
          os << "rank " << r << " differs from rank 0 at element " << i << ": " << outputs[r][i]
             << " vs " << outputs[0][i];
          return os.str();
        }
      }
      return "rank " + std::to_string(r) + " has a different size";
    }
  }
  const double divisor = average ? p : 1;
  for (std::size_t i = 0; i < s.exact.size(); ++i) {
    const double got = outputs[0][i] * divisor;
    if (exact) {
      const float want = average ? static_cast<float>(s.exact[i]) / static_cast<float>(p)
                                 : static_cast<float>(s.exact[i]);
      if (std::memcmp(&outputs[0][i], &want, sizeof(float)) != 0) {
        os << "element " << i << ": got " << outputs[0][i] << ", exact " << want;
        return os.str();
      }
      continue;
    }
    const double bound = errorBound(wire, quantizationSteps, p, s, i) * (average ? 1.0 + 1e-6 : 1.0) +
                         (average ? std::fabs(s.exact[i]) * 1e-6 : 0.0);
    if (!(std::fabs(got - s.exact[i]) <= bound)) {
      os << "element " << i << ": got " << got << ", exact " << s.exact[i] << ", error "
         << std::fabs(got - s.exact[i]) << " > bound " << bound << " (Q=" << quantizationSteps << ")";
      return os.str();
    }
  }
  return {};
}

}  // namespace adaprec::test
