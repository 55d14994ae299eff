// Timing against a baseline on a shared machine: operations take turns round by round (memcpy,
// encode, decode, ..., memcpy, ...), because memory bandwidth drifts by tens of percent within
// seconds, and a baseline timed at another moment than the code under test would move every ratio.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace adaprec::bench {

// Median seconds of each operation over `reps` interleaved rounds, after one untimed warm-up call
// of each (page faults, caches).
inline std::vector<double> interleavedMedians(int reps, const std::vector<std::function<void()>>& ops) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> t(ops.size());
  for (const auto& op : ops) op();
  for (int r = 0; r < reps; ++r) {
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const auto start = Clock::now();
      ops[k]();
      t[k].push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

}  // namespace adaprec::bench
