// Shared by the loopback and MPI suites: test inputs, the fp64 reference and the check of a result
// against the documented error bound. The bound and each algorithm's number of quantizations are the
// library's one declaration (lib/algorithm/error_model.hpp), which the docs' tables state.
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
#include "algorithm/error_model.hpp"

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

// Per-element statistics of the inputs the bound is expressed in (detail::ElementMagnitudes).
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
    const double documented =
        detail::allreduceErrorBound(wire, quantizationSteps, p, {s.absSum[i], s.maxAbsSum, s.sumOfMax});
    const double bound = documented * (average ? 1.0 + 1e-6 : 1.0) +
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
