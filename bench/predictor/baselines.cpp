#include "baselines.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace adaprec::bench {

namespace {
constexpr double kMinSd = 0.005;
}

PointForecast lastValueForecast(const predictor::Curve& observed, double /*step*/) {
  const auto& y = observed.values;
  double ss = 0;
  for (std::size_t i = 1; i < y.size(); ++i) ss += (y[i] - y[i - 1]) * (y[i] - y[i - 1]);
  const double sd = y.size() > 1 ? std::sqrt(ss / (y.size() - 1)) : 0.0;
  return {y.back(), std::max(sd, kMinSd)};
}

Pow3LeastSquares::Pow3LeastSquares(const predictor::Curve& observed) {
  const auto& t = observed.steps;
  const auto& y = observed.values;
  const std::size_t n = y.size();
  scale_ = t.back() > 0 ? t.back() : 1.0;
  if (n < 3) {
    // Two points pin (c, a) for any shape: no information about the shape, so stay at the last value.
    c_ = y.back();
    a_ = 0;
    sd_ = lastValueForecast(observed, 0).sd;
    return;
  }
  double best = std::numeric_limits<double>::infinity();
  std::vector<double> h(n);
  for (int i = 0; i < 60; ++i) {
    const double kappa = std::pow(10.0, -3.0 + 5.0 * i / 59.0);
    for (int j = 0; j < 40; ++j) {
      const double alpha = 0.05 + 3.0 * j / 39.0;
      // y = c + a' h with h = -(1 + x/kappa)^-alpha: ordinary 2-parameter least squares.
      double sh = 0, shh = 0, sy = 0, shy = 0;
      for (std::size_t k = 0; k < n; ++k) {
        h[k] = -std::pow(1.0 + t[k] / scale_ / kappa, -alpha);
        sh += h[k];
        shh += h[k] * h[k];
        sy += y[k];
        shy += h[k] * y[k];
      }
      const double det = n * shh - sh * sh;
      if (!(std::abs(det) > 1e-14)) continue;
      const double a = (n * shy - sh * sy) / det;
      const double c = (sy - a * sh) / n;
      double sse = 0;
      for (std::size_t k = 0; k < n; ++k) sse += (y[k] - c - a * h[k]) * (y[k] - c - a * h[k]);
      if (sse < best) {
        best = sse;
        kappa_ = kappa;
        alpha_ = alpha;
        c_ = c;
        a_ = a;
      }
    }
  }
  // Four fitted parameters: use n - 4 degrees of freedom where there are any.
  sd_ = std::max(std::sqrt(best / std::max<double>(1.0, static_cast<double>(n) - 4.0)), kMinSd);
}

PointForecast Pow3LeastSquares::forecast(double step) const {
  const double value = c_ - a_ * std::pow(1.0 + step / scale_ / kappa_, -alpha_);
  return {std::clamp(std::isfinite(value) ? value : c_, 0.0, 1.0), sd_};
}

}  // namespace adaprec::bench
