// The closed-form marginal likelihood of one curve given (family, theta, sigma).
//
// y = X beta + e, X = [1, g], e ~ N(0, D), beta = (a, b) ~ N(m0, V0) with V0 diagonal. With
// A = V0^-1 + X'D^-1 X and h = V0^-1 m0 + X'D^-1 y the posterior is N(A^-1 h, A^-1) and
//   log p(y) = -1/2 [ y'D^-1 y + m0'V0^-1 m0 - h'A^-1 h + log|D| + log|V0| + log|A| + n log 2pi ].
// Restricting the prior to b >= 0 multiplies the evidence by P(b >= 0 | y) / P(b >= 0), both normal
// CDFs, and truncates the posterior of b (its moments are taken in coefFromGaussian()).
// This runs once per (grid node, curve), so the 2x2 algebra is written out.
#include <cmath>

#include "model.hpp"

namespace adaprec::predictor::detail {

CurveFit curveEvidence(const Sums& s, const ModelOptions& model) {
  const double precA = 1.0 / (model.startSd * model.startSd);
  const double precB = 1.0 / (model.gainSd * model.gainSd);
  const double a00 = precA + s.w, a01 = s.wg, a11 = precB + s.wgg;
  const double h0 = precA * model.startMean + s.wy;
  const double h1 = precB * model.gainMean + s.wyg;
  const double det = a00 * a11 - a01 * a01;
  const double inv = 1.0 / det;
  CurveFit fit;
  fit.covAA = a11 * inv;
  fit.covAB = -a01 * inv;
  fit.covBB = a00 * inv;
  fit.meanA = fit.covAA * h0 + fit.covAB * h1;
  fit.meanB = fit.covAB * h0 + fit.covBB * h1;
  const double quad = s.wyy + precA * model.startMean * model.startMean +
                      precB * model.gainMean * model.gainMean - (h0 * fit.meanA + h1 * fit.meanB);
  const double logDetV0 = -std::log(precA * precB);
  fit.logEvidence =
      -0.5 * (std::max(quad, 0.0) + s.logVariance + logDetV0 + std::log(det) + s.count * kLog2Pi);
  fit.logEvidence += logNormalCdf(fit.meanB / std::sqrt(fit.covBB)) - logNormalCdf(model.gainMean / model.gainSd);
  return fit;
}

void basisAt(const Data& data, Family family, const std::array<double, 2>& theta, std::vector<std::vector<double>>& g) {
  g.resize(data.curves.size());
  for (std::size_t c = 0; c < data.curves.size(); ++c) {
    const CurveData& d = data.curves[c];
    g[c].resize(d.x.size());
    for (std::size_t i = 0; i < d.x.size(); ++i) g[c][i] = basis(family, theta, d.x[i]);
  }
}

double evidenceAt(const Data& data, const ModelOptions& model, const std::vector<std::vector<double>>& g, double sigma,
                  double binomialScale, std::vector<CurveFit>* fits) {
  const double s2 = sigma * sigma;
  double total = 0;
  if (fits) fits->clear();
  for (std::size_t c = 0; c < data.curves.size(); ++c) {
    const CurveData& d = data.curves[c];
    Sums sums;
    for (std::size_t i = 0; i < d.x.size(); ++i) {
      const double v = s2 + binomialScale * d.tau[i];
      const double w = 1.0 / v;
      const double gi = g[c][i];
      sums.w += w;
      sums.wg += w * gi;
      sums.wgg += w * gi * gi;
      sums.wy += w * d.y[i];
      sums.wyg += w * gi * d.y[i];
      sums.wyy += w * d.y[i] * d.y[i];
      if (d.hasCounts) sums.logVariance += std::log(v);
    }
    if (!d.hasCounts) sums.logVariance = static_cast<double>(d.x.size()) * std::log(s2);
    sums.count = static_cast<double>(d.x.size());
    const CurveFit fit = curveEvidence(sums, model);
    total += fit.logEvidence;
    if (fits) fits->push_back(fit);
  }
  return total;
}

}  // namespace adaprec::predictor::detail
