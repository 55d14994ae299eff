// Curves drawn from the model's own prior: for the model's self-consistency checks (tests, benchmark
// "prior" set). Not a source of realistic curves: the benchmark's SGD set is that.
#pragma once

#include <array>
#include <random>
#include <vector>

#include "adaprec/predictor.hpp"

namespace adaprec::predictor::detail {

struct PriorDraw {
  std::vector<Curve> curves;  // values at every step given, no sample counts
  Family family = Family::kPow3;
  std::array<double, 2> theta{};
  double noiseSd = 0;
  double sharedSd = 0;  // tau: the sd of the term every curve shares at one step
  std::vector<double> start, gain;  // a_c, b_c
};

// Draws (family, theta, sigma, tau) once, (a_c, b_c) per curve and the shared term s_t per step, then values at `steps` with x = step /
// stepScale. Under the headroom gain prior the draw matches the fit's prior exactly when steps[0] is 0
// (the first values, which set the gain's scale, are drawn before the gains). Draws whose values leave [0, 1] are rejected and redrawn, i.e. the prior is conditioned on
// valid accuracies (the predictive's truncation to [0, 1] mirrors that).
PriorDraw samplePrior(const ModelOptions& model, int curveCount, const std::vector<double>& steps,
                      double stepScale, std::mt19937_64& rng);

}  // namespace adaprec::predictor::detail
