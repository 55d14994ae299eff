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

EvidencePrior evidencePrior(const ModelOptions& model) {
  EvidencePrior p;
  p.precA = 1.0 / (model.startSd * model.startSd);
  p.precB = 1.0 / (model.gainSd * model.gainSd);
  p.meanA = model.startMean;
  p.meanB = model.gainMean;
  p.constant = -0.5 * (p.precA * p.meanA * p.meanA + p.precB * p.meanB * p.meanB - std::log(p.precA * p.precB)) -
               logNormalCdf(model.gainMean / model.gainSd);
  return p;
}

CurveFit curveEvidence(const Sums& s, const EvidencePrior& prior) {
  const double a00 = prior.precA + s.w, a01 = s.wg, a11 = prior.precB + s.wgg;
  const double h0 = prior.precA * prior.meanA + s.wy;
  const double h1 = prior.precB * prior.meanB + s.wyg;
  const double det = a00 * a11 - a01 * a01;
  const double inv = 1.0 / det;
  CurveFit fit;
  fit.covAA = a11 * inv;
  fit.covAB = -a01 * inv;
  fit.covBB = a00 * inv;
  fit.meanA = fit.covAA * h0 + fit.covAB * h1;
  fit.meanB = fit.covAB * h0 + fit.covBB * h1;
  // y'D^-1 y - h'A^-1 h (the prior's m0'V0^-1 m0 is in prior.constant); >= -m0'V0^-1 m0 mathematically.
  const double quad = s.wyy - (h0 * fit.meanA + h1 * fit.meanB);
  fit.logEvidence = prior.constant - 0.5 * (quad + s.logVariance + std::log(det) + s.count * kLog2Pi);
  fit.logEvidence += logNormalCdf(fit.meanB / std::sqrt(fit.covBB));
  return fit;
}

}  // namespace adaprec::predictor::detail
