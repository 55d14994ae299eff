// Point-prediction baselines for the predictor benchmark. Each also gets a Gaussian band from its own
// in-sample residuals so that log density and coverage can be compared; MSE is their fair metric.
#pragma once

#include "adaprec/predictor.hpp"

namespace adaprec::bench {

struct PointForecast {
  double mean = 0, sd = 0;
};

// Last observed value; sd = RMS of successive differences (floor 0.005).
PointForecast lastValueForecast(const predictor::Curve& observed, double step);

// Least-squares pow3 y = c - a (1 + x/kappa)^-alpha, x = step / last observed step: a 60 x 40 grid over
// (log kappa, alpha) with (c, a) solved exactly at each node; sd = RMS residual (floor 0.005). Needs at
// least 3 points (2 give the last value).
class Pow3LeastSquares {
 public:
  explicit Pow3LeastSquares(const predictor::Curve& observed);
  PointForecast forecast(double step) const;

 private:
  double scale_ = 1, kappa_ = 1, alpha_ = 1, c_ = 0, a_ = 0, sd_ = 0.005;
};

}  // namespace adaprec::bench
