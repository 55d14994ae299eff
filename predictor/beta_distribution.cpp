// The Beta distribution on [0, 1] as the recalibration map of predictive CDFs (Recalibration): its
// CDF (the regularized incomplete beta function), quantile, log density and a maximum-likelihood fit.
#include <algorithm>
#include <cmath>
#include <limits>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor::detail {

namespace {
double logBetaFunction(double a, double b) { return std::lgamma(a) + std::lgamma(b) - std::lgamma(a + b); }

// Continued fraction of I_x(a, b) (modified Lentz), converging fast for x < (a + 1) / (a + b + 2).
double incompleteBetaFraction(double x, double a, double b) {
  constexpr double kTiny = 1e-300;
  double f = 1, c = 1, d = 0;
  for (int i = 0; i <= 600; ++i) {
    const int m = i / 2;
    double numerator;
    if (i == 0) {
      numerator = 1;
    } else if (i % 2 == 0) {
      numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
    } else {
      numerator = -((a + m) * (a + b + m) * x) / ((a + 2 * m) * (a + 2 * m + 1));
    }
    d = 1 + numerator * d;
    d = 1 / (std::abs(d) < kTiny ? kTiny : d);
    c = 1 + numerator / c;
    if (std::abs(c) < kTiny) c = kTiny;
    const double cd = c * d;
    f *= cd;
    if (std::abs(1 - cd) < 1e-15) break;
  }
  return f - 1;
}

// Digamma and trigamma: recurrence up to x >= 8, then their asymptotic series (error < 1e-12 there).
double digamma(double x) {
  double shift = 0;
  for (; x < 8; x += 1) shift -= 1 / x;
  const double r = 1 / (x * x);
  return shift + std::log(x) - 0.5 / x - r * (1.0 / 12 - r * (1.0 / 120 - r * (1.0 / 252 - r / 240)));
}

double trigamma(double x) {
  double shift = 0;
  for (; x < 8; x += 1) shift += 1 / (x * x);
  const double r = 1 / (x * x);
  return shift + 1 / x + 0.5 * r + r / x * (1.0 / 6 - r * (1.0 / 30 - r * (1.0 / 42 - r / 30)));
}
}  // namespace

double betaCdf(double x, double a, double b) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(a * std::log(x) + b * std::log1p(-x) - logBetaFunction(a, b));
  if (x < (a + 1) / (a + b + 2)) return std::clamp(front * incompleteBetaFraction(x, a, b) / a, 0.0, 1.0);
  return std::clamp(1 - front * incompleteBetaFraction(1 - x, b, a) / b, 0.0, 1.0);
}

double betaLogPdf(double x, double a, double b) {
  if (x <= 0 || x >= 1) return -std::numeric_limits<double>::infinity();
  return (a - 1) * std::log(x) + (b - 1) * std::log1p(-x) - logBetaFunction(a, b);
}

double betaQuantile(double p, double a, double b) {
  if (p <= 0) return 0;
  if (p >= 1) return 1;
  // Newton inside a shrinking bisection bracket (the CDF is increasing).
  double lo = 0, hi = 1, x = std::clamp(a / (a + b), 1e-6, 1 - 1e-6);
  for (int i = 0; i < 200; ++i) {
    const double f = betaCdf(x, a, b) - p;
    if (std::abs(f) < 1e-13) break;
    (f < 0 ? lo : hi) = x;
    if (hi - lo < 1e-15) break;
    const double density = std::exp(betaLogPdf(x, a, b));
    const double next = x - f / density;
    x = (density > 0 && next > lo && next < hi) ? next : 0.5 * (lo + hi);
  }
  return x;
}

std::array<double, 2> fitBeta(const std::vector<double>& values) {
  ADAPREC_CHECK_ARG(values.size() >= 2, "fitBeta: need at least 2 values, got " << values.size());
  double s1 = 0, s2 = 0, mean = 0, var = 0;
  const double n = static_cast<double>(values.size());
  for (double v : values) {
    ADAPREC_CHECK_ARG(v > 0 && v < 1, "fitBeta: values must lie in (0, 1), got " << v);
    s1 += std::log(v);
    s2 += std::log1p(-v);
    mean += v / n;
  }
  for (double v : values) var += (v - mean) * (v - mean) / n;
  // Method of moments to start (a + b = mean (1 - mean) / var - 1), then Newton on the log-likelihood,
  // which is concave in (a, b); steps halved to keep a, b > 0 and the likelihood rising.
  const double common = var > 0 ? std::max(mean * (1 - mean) / var - 1, 0.1) : 100.0;
  double a = mean * common, b = (1 - mean) * common;
  auto logLikelihood = [&](double a1, double b1) { return (a1 - 1) * s1 + (b1 - 1) * s2 - n * logBetaFunction(a1, b1); };
  for (int iteration = 0; iteration < 100; ++iteration) {
    const double ga = s1 - n * (digamma(a) - digamma(a + b));
    const double gb = s2 - n * (digamma(b) - digamma(a + b));
    const double tab = trigamma(a + b);
    const double haa = -n * (trigamma(a) - tab), hbb = -n * (trigamma(b) - tab), hab = n * tab;
    const double det = haa * hbb - hab * hab;
    double da = -(hbb * ga - hab * gb) / det, db = -(haa * gb - hab * ga) / det;
    const double before = logLikelihood(a, b);
    double t = 1;
    while (t > 1e-10 && (a + t * da <= 0 || b + t * db <= 0 || logLikelihood(a + t * da, b + t * db) < before)) t *= 0.5;
    if (t <= 1e-10) break;
    a += t * da;
    b += t * db;
    if (std::abs(t * da) < 1e-10 * a && std::abs(t * db) < 1e-10 * b) break;
  }
  return {a, b};
}

}  // namespace adaprec::predictor::detail
