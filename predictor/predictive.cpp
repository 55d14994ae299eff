// Predictive: a mixture of Gaussians truncated to [0, 1].
//
// Truncation is how the [0, 1] bound enters predictions: the mass a component puts outside [0, 1] is
// removed and the rest renormalised (equivalently, the future observation is conditioned on being a
// valid accuracy). Moments use the closed forms of the truncated normal; quantiles bisect the CDF.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor {

using detail::normalCdf;
using detail::normalPdf;

namespace {
constexpr double kMinSd = 1e-9;
constexpr double kMinLogDensity = -690.0;  // log of the smallest density reported (about 1e-300)
constexpr double kFarZ = 8.5;             // 1 - Phi(8.5) ~ 1e-17, phi(8.5) ~ 2e-16

// Standard normal quantile to about 5e-4 (Abramowitz & Stegun 26.2.23): a starting point for Newton.
double approxNormalQuantile(double p) {
  const double q = p < 0.5 ? p : 1.0 - p;
  const double t = std::sqrt(-2.0 * std::log(q));
  const double z = t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308)));
  return p < 0.5 ? -z : z;
}

// Simpson panels (two cells) of a CDF F on [lo, hi], refined where F is steep: recalibrated()'s map can
// put nearly all the mass into one of 40 cells over the components' span (a Beta that sharpens, a span
// widened by a far component of little weight) while heavy tails keep a share of the variance far out,
// so no single uniform grid resolves both. A panel whose cells rise by more than kSteepRise is split
// into kSubCells cells per cell, recursively up to kMaxDepth (40 * 8^4 cells across the span): each
// refinement costs kSubCells - 1 evaluations of F per cell, and the rises above kSteepRise sum to at
// most 1, so a level refines at most 2 / kSteepRise cells.
struct CdfPanel {
  double y0, h;            // first node and cell width
  std::array<double, 3> F;  // F at y0, y0 + h, y0 + 2h
};
constexpr double kSteepRise = 0.1;
constexpr int kSubCells = 8;
constexpr int kMaxDepth = 4;

// fill(y0, h, out) writes F at y0 + i h into out.
template <class Fill>
void collectCdfPanels(double lo, double h, std::span<const double> F, int depth, const Fill& fill,
                      std::vector<CdfPanel>& out) {
  for (std::size_t i = 0; i + 2 < F.size(); i += 2) {
    const bool steep = std::max(F[i + 1] - F[i], F[i + 2] - F[i + 1]) > kSteepRise;
    if (!steep || depth == kMaxDepth) {
      out.push_back({lo + static_cast<double>(i) * h, h, {F[i], F[i + 1], F[i + 2]}});
      continue;
    }
    for (std::size_t c = i; c < i + 2; ++c) {
      std::array<double, kSubCells + 1> sub{};
      const double y0 = lo + static_cast<double>(c) * h, subH = h / kSubCells;
      fill(y0, subH, std::span<double>(sub));
      sub.front() = F[c];  // the parent's nodes: the panels meet exactly
      sub.back() = F[c + 1];
      collectCdfPanels(y0, subH, std::span<const double>(sub), depth + 1, fill, out);
    }
  }
}

// Mean and sd of a distribution on [lo, hi] from its CDF's panels: E[Y] = lo + int (1 - F), and the
// variance as int 2 (m - y) F over y < m plus int 2 (y - m) (1 - F) over y > m (no cancellation of
// E[Y^2] against E[Y]^2, which lost the sd of a narrow distribution far from 0). Simpson per panel is
// the exact integral of F's quadratic through the panel's nodes times a line; the panel holding m,
// where the variance's integrand has a kink, integrates that same quadratic on each side of m exactly
// (two Gauss-Legendre nodes per side).
std::array<double, 2> momentsFromCdfPanels(double lo, const std::vector<CdfPanel>& panels) {
  double mean = lo;
  for (const CdfPanel& p : panels) mean += p.h / 3.0 * ((1 - p.F[0]) + 4 * (1 - p.F[1]) + (1 - p.F[2]));
  const auto varianceTerm = [mean](double y, double F) {
    return y < mean ? 2 * (mean - y) * F : 2 * (y - mean) * (1 - F);
  };
  double variance = 0;
  for (const CdfPanel& p : panels) {
    const double y2 = p.y0 + 2 * p.h;
    if (p.y0 < mean && mean < y2) {
      const auto quadratic = [&p](double y) {  // Lagrange through (y0, F0), (y0 + h, F1), (y0 + 2h, F2)
        const double t = (y - p.y0) / p.h;
        return p.F[0] * (t - 1) * (t - 2) / 2 - p.F[1] * t * (t - 2) + p.F[2] * t * (t - 1) / 2;
      };
      const double node = 0.5 / std::sqrt(3.0);
      for (const auto& [from, to] : {std::pair{p.y0, mean}, std::pair{mean, y2}}) {
        const double mid = 0.5 * (from + to), width = to - from;
        for (double y : {mid - node * width, mid + node * width}) variance += 0.5 * width * varianceTerm(y, quadratic(y));
      }
      continue;
    }
    double sum = 0;
    for (int j = 0; j < 3; ++j) sum += (j == 1 ? 4.0 : 1.0) * varianceTerm(p.y0 + j * p.h, p.F[j]);
    variance += p.h / 3.0 * sum;
  }
  return {mean, std::sqrt(std::max(variance, 0.0))};
}

// P(lo <= Z <= hi) computed on the side of the distribution where it does not cancel.
double intervalProbability(double lo, double hi) {
  if (lo > 0) return normalCdf(-lo) - normalCdf(-hi);
  return normalCdf(hi) - normalCdf(lo);
}

// Phi on [-kFarZ, kFarZ] by cubic Hermite interpolation between nodes 1/64 apart (Phi and its
// derivative phi at each): |error| <= h^4/384 * max|phi'''| < 2e-10, for a few arithmetic operations
// where erfc costs ~15 ns. Used only by the map's moments (recalibrated()), which evaluate the CDF of
// every component at 41 points: with a schedule a posterior has tens of thousands of components, and
// with erfc these moments cost more than the fit itself (the controller fits up to five times a phase).
class TabulatedPhi {
 public:
  TabulatedPhi() {
    for (int i = 0; i <= kNodes; ++i) {
      const double z = -kFarZ + i * kStep;
      phi_[i] = normalCdf(z);
      slope_[i] = normalPdf(z) * kStep;
    }
  }
  double operator()(double z) const {
    if (!(z > -kFarZ)) return 0.0;
    if (!(z < kFarZ)) return 1.0;
    const double t = (z + kFarZ) * kPerUnit;
    const int i = std::min(static_cast<int>(t), kNodes - 1);
    const double u = t - i, v = 1.0 - u;
    return (1.0 + 2.0 * u) * v * v * phi_[i] + u * v * v * slope_[i] + u * u * (3.0 - 2.0 * u) * phi_[i + 1] -
           u * u * v * slope_[i + 1];
  }

 private:
  static constexpr double kPerUnit = 64.0;
  static constexpr double kStep = 1.0 / kPerUnit;
  static constexpr int kNodes = static_cast<int>(2 * kFarZ * kPerUnit);  // 1088: kFarZ * 64 is whole
  std::array<double, kNodes + 1> phi_{}, slope_{};
};

const TabulatedPhi& tabulatedPhi() {
  static const TabulatedPhi table;
  return table;
}
}  // namespace

Predictive::Predictive(std::vector<double> weights, std::vector<double> means, std::vector<double> sds)
    : weights_(std::move(weights)), means_(std::move(means)), sds_(std::move(sds)) {
  ADAPREC_CHECK_ARG(!weights_.empty() && weights_.size() == means_.size() && weights_.size() == sds_.size(),
                    "Predictive: need equally many weights, means and sds (>0), got "
                        << weights_.size() << ", " << means_.size() << ", " << sds_.size());
  double m1 = 0, m2 = 0, untruncatedMean = 0, weightSum = 0;
  for (std::size_t k = 0; k < weights_.size(); ++k) {
    ADAPREC_CHECK_ARG(std::isfinite(weights_[k]) && weights_[k] >= 0 && std::isfinite(means_[k]) &&
                          std::isfinite(sds_[k]) && sds_[k] >= 0,
                      "Predictive: component " << k << " is not finite or has negative weight/sd");
    sds_[k] = std::max(sds_[k], kMinSd);
    const double mu = means_[k];
    const double s = sds_[k];
    const double alpha = -mu / s;
    const double beta = (1.0 - mu) / s;
    const double lower = normalCdf(alpha);
    lower_.push_back(alpha > 0 ? -normalCdf(-alpha) : lower);  // componentCdf's sides
    // P(alpha <= Z <= beta) on the side where it does not cancel (the usual side reuses Phi(alpha)).
    const double z = alpha > 0 ? intervalProbability(alpha, beta) : normalCdf(beta) - lower;
    const double pa = normalPdf(alpha), pb = normalPdf(beta);
    const double w = weights_[k];
    mass_ += w * z;
    m1 += w * (mu * z + s * (pa - pb));
    m2 += w * (mu * mu * z + 2.0 * mu * s * (pa - pb) + s * s * (z + alpha * pa - beta * pb));
    untruncatedMean += w * mu;
    weightSum += w;
  }
  ADAPREC_CHECK_ARG(weightSum > 0, "Predictive: weights sum to zero");
  untruncatedMean_ = std::clamp(untruncatedMean / weightSum, 0.0, 1.0);
  if (!(mass_ > 1e-300 * weightSum)) {
    degenerate_ = true;
    mean_ = untruncatedMean_;
    sd_ = 0;
    return;
  }
  mean_ = std::clamp(m1 / mass_, 0.0, 1.0);
  sd_ = std::sqrt(std::max(m2 / mass_ - mean_ * mean_, 0.0));
}

double Predictive::componentCdf(std::size_t k, double z) const {
  const double lower = lower_[k];
  // A mean below 0: P(X > 0) - P(X > y) in the upper tail (Phi(z) - Phi(alpha) would be 1 - 1 there:
  // a component far below 0 then had no CDF inside [0, 1] but a mass, and the quantiles ran to 1).
  // Beyond |z| = kFarZ, Phi(z) is 0 or 1 to double precision: skip erfc.
  if (std::signbit(lower)) return z > kFarZ ? -lower : -lower - normalCdf(-z);
  if (z > kFarZ) return 1.0 - lower;
  if (z < -kFarZ) return -lower;
  return normalCdf(z) - lower;
}

void Predictive::evaluate(double y, double& cdf, double& density) const {
  double sumCdf = 0, sumDensity = 0;
  for (std::size_t k = 0; k < weights_.size(); ++k) {
    const double z = (y - means_[k]) / sds_[k];
    sumCdf += weights_[k] * componentCdf(k, z);
    // phi(z) < 1e-16 beyond kFarZ: skip exp.
    if (std::abs(z) <= kFarZ) sumDensity += weights_[k] * normalPdf(z) / sds_[k];
  }
  cdf = std::clamp(sumCdf / mass_, 0.0, 1.0);
  density = sumDensity / mass_;
}

double Predictive::cdf(double y) const {
  const double f = mixtureCdf(y);
  return mapped() ? detail::betaCdf(f, mapA_, mapB_) : f;
}

double Predictive::mixtureCdf(double y) const {
  if (degenerate_) return y >= mean_ ? 1.0 : 0.0;
  if (y <= 0) return 0.0;
  if (y >= 1) return 1.0;
  double sum = 0;
  for (std::size_t k = 0; k < weights_.size(); ++k) {
    sum += weights_[k] * componentCdf(k, (y - means_[k]) / sds_[k]);
  }
  return std::clamp(sum / mass_, 0.0, 1.0);
}

void Predictive::mixtureCdfGrid(double lo, double h, std::span<double> out) const {
  // mixtureCdf at lo + i h, component by component, Phi tabulated (above): the same sides as
  // componentCdf, |difference| < 2e-10 from it.
  const TabulatedPhi& phi = tabulatedPhi();
  std::fill(out.begin(), out.end(), 0.0);
  for (std::size_t k = 0; k < weights_.size(); ++k) {
    const double w = weights_[k];
    if (!(w > 0)) continue;
    const double lower = lower_[k];
    const double z0 = (lo - means_[k]) / sds_[k], dz = h / sds_[k];
    const bool upperTail = std::signbit(lower);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double z = z0 + static_cast<double>(i) * dz;
      out[i] += w * (upperTail ? -lower - phi(-z) : phi(z) - lower);
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double y = lo + static_cast<double>(i) * h;
    out[i] = y <= 0 ? 0.0 : y >= 1 ? 1.0 : std::clamp(out[i] / mass_, 0.0, 1.0);
  }
}

double Predictive::quantile(double p) const {
  ADAPREC_CHECK_ARG(p > 0 && p < 1, "quantile: p must be in (0, 1), got " << p);
  if (!mapped()) return mixtureQuantile(p);
  // B^-1(p) can round to 0 or 1 for an extreme p: keep it inside (0, 1), where the mixture's is defined.
  return mixtureQuantile(std::clamp(detail::betaQuantile(p, mapA_, mapB_), 1e-15, 1.0 - 1e-15));
}

double Predictive::mixtureQuantile(double p) const {
  if (degenerate_) return mean_;
  // Newton on the CDF from the normal approximation's quantile, kept inside a shrinking bisection
  // bracket: a few CDF evaluations where plain bisection needs about 35.
  double lo = 0, hi = 1;
  double y = std::clamp(mean_ + sd_ * approxNormalQuantile(p), 1e-9, 1.0 - 1e-9);
  for (int i = 0; i < 100; ++i) {
    double f = 0, density = 0;
    evaluate(y, f, density);
    if (std::abs(f - p) < 1e-9) break;
    (f < p ? lo : hi) = y;
    if (hi - lo < 1e-10) break;
    const double next = y - (f - p) / density;
    y = (density > 0 && next > lo && next < hi) ? next : 0.5 * (lo + hi);
  }
  return std::clamp(y, 0.0, 1.0);
}

double Predictive::logDensity(double y) const {
  const double log = mixtureLogDensity(y);
  if (degenerate_ || !mapped() || log <= kMinLogDensity) return log;
  const double u = std::clamp(mixtureCdf(y), 1e-300, 1.0 - 1e-16);
  return std::max(log + detail::betaLogPdf(u, mapA_, mapB_), kMinLogDensity);
}

double Predictive::mixtureLogDensity(double y) const {
  if (degenerate_ || !(y >= 0 && y <= 1)) return degenerate_ && y == mean_ ? 0.0 : kMinLogDensity;
  // log-sum-exp over components: narrow components far from y must not underflow the sum to zero.
  double maxTerm = -std::numeric_limits<double>::infinity();
  std::vector<double> terms(weights_.size());
  for (std::size_t k = 0; k < weights_.size(); ++k) {
    const double z = (y - means_[k]) / sds_[k];
    terms[k] = weights_[k] > 0 ? std::log(weights_[k]) - 0.5 * z * z - std::log(sds_[k])
                               : -std::numeric_limits<double>::infinity();
    maxTerm = std::max(maxTerm, terms[k]);
  }
  double sum = 0;
  for (double t : terms) sum += std::exp(t - maxTerm);
  const double value = maxTerm + std::log(sum) - 0.5 * detail::kLog2Pi - std::log(mass_);
  return std::isfinite(value) ? std::max(value, kMinLogDensity) : kMinLogDensity;
}

Predictive Predictive::recalibrated(double a, double b) const {
  ADAPREC_CHECK_ARG(std::isfinite(a) && std::isfinite(b) && a > 0 && b > 0,
                    "recalibrated: Beta parameters must be finite and > 0, got " << a << ", " << b);
  Predictive out = *this;
  out.mapA_ = a;
  out.mapB_ = b;
  if (degenerate_ || !out.mapped()) return out;
  // Moments from the mapped CDF B(G) over [lo, hi], every component's mean +- kFarZ sd clipped to
  // [0, 1] (beyond it each Phi is 0 or 1 to double precision, so G is too): Simpson on 40 cells, 41
  // evaluations of the mixture's CDF, with steep panels refined (collectCdfPanels: 40 cells over the
  // span gave an sd of 0.0038 where it was 0.0088, or 0, in a hostile pass). (Finding [lo, hi] as the
  // mapped 1e-9 and 1 - 1e-9 quantiles instead, each a Newton search with bisection in the mixture,
  // cost more than the integral.)
  double lo = 1, hi = 0;
  for (std::size_t k = 0; k < weights_.size(); ++k) {
    if (!(weights_[k] > 0)) continue;
    lo = std::min(lo, means_[k] - kFarZ * sds_[k]);
    hi = std::max(hi, means_[k] + kFarZ * sds_[k]);
  }
  lo = std::clamp(lo, 0.0, 1.0);
  hi = std::clamp(hi, lo, 1.0);
  const auto mappedCdfGrid = [&](double y0, double h, std::span<double> values) {
    mixtureCdfGrid(y0, h, values);
    for (double& v : values) v = detail::betaCdf(v, a, b);
  };
  constexpr int kCells = 40;
  std::array<double, kCells + 1> grid{};
  mappedCdfGrid(lo, (hi - lo) / kCells, grid);
  std::vector<CdfPanel> panels;
  collectCdfPanels(lo, (hi - lo) / kCells, std::span<const double>(grid), 0, mappedCdfGrid, panels);
  const auto [m1, sd] = momentsFromCdfPanels(lo, panels);
  out.mean_ = std::clamp(m1, 0.0, 1.0);
  out.sd_ = sd;
  return out;
}

double Predictive::crps(double y) const {
  // CRPS = int_0^1 (F(t) - 1{t >= y})^2 dt, midpoint rule with the cell holding y split at y.
  const double yc = std::clamp(y, 0.0, 1.0);
  constexpr int kCells = 512;
  double sum = 0;
  for (int i = 0; i < kCells; ++i) {
    const double lo = static_cast<double>(i) / kCells;
    const double hi = static_cast<double>(i + 1) / kCells;
    if (yc > lo && yc < hi) {
      const double fl = cdf(0.5 * (lo + yc));
      const double fh = cdf(0.5 * (yc + hi));
      sum += fl * fl * (yc - lo) + (1 - fh) * (1 - fh) * (hi - yc);
    } else {
      const double f = cdf(0.5 * (lo + hi));
      const double d = (0.5 * (lo + hi) >= yc) ? 1.0 - f : f;
      sum += d * d * (hi - lo);
    }
  }
  return sum;
}

}  // namespace adaprec::predictor
