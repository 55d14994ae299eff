// Helpers shared by the predictor tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"

namespace adaprec::predictor::test {

// A parsed learning-rate schedule, as ModelOptions::lrSchedule holds it.
inline std::shared_ptr<const LrSchedule> schedule(const std::string& spec) {
  return std::make_shared<const LrSchedule>(LrSchedule::parse(spec));
}
// Eight points of a run that is still rising (steps 10..80, 1000-image evaluations): the schedule tests'
// curve, seen before its annealing.
inline const Curve kEarly{{10, 20, 30, 40, 50, 60, 70, 80}, {0.40, 0.52, 0.58, 0.62, 0.645, 0.66, 0.67, 0.675},
                          std::vector<double>(8, 1000)};

// The error code f raises (kOk when none), and its message in *message.
inline ErrorCode codeOf(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  return ErrorCode::kOk;
}

// The first `count` points of every curve (with their sample counts).
inline std::vector<Curve> firstPoints(const std::vector<Curve>& curves, std::size_t count) {
  std::vector<Curve> out;
  for (const Curve& c : curves) {
    Curve o;
    o.steps.assign(c.steps.begin(), c.steps.begin() + count);
    o.values.assign(c.values.begin(), c.values.begin() + count);
    if (!c.sampleCounts.empty()) o.sampleCounts.assign(c.sampleCounts.begin(), c.sampleCounts.begin() + count);
    out.push_back(std::move(o));
  }
  return out;
}

// How often held-out values fall inside the central 50% and 90% intervals of their predictives.
struct Coverage {
  int in50 = 0, in90 = 0, total = 0;
  void add(const Predictive& p, double y) {
    in50 += y >= p.quantile(0.25) && y <= p.quantile(0.75);
    in90 += y >= p.quantile(0.05) && y <= p.quantile(0.95);
    ++total;
  }
  double c50() const { return static_cast<double>(in50) / total; }
  double c90() const { return static_cast<double>(in90) / total; }
};

// The MCMC settings the agreement tests compare against (long enough for their allowances).
inline McmcOptions referenceMcmc(McmcMethod method, std::uint64_t seed) {
  McmcOptions options;
  options.method = method;
  options.seed = seed;
  options.iterations = method == McmcMethod::kEnsemble ? 6000 : 4000;
  options.burnIn = method == McmcMethod::kEnsemble ? 2000 : 1000;
  options.thin = 4;
  options.maxSamples = 4000;
  return options;
}

}  // namespace adaprec::predictor::test
