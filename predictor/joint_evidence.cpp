// The evidence of all curves of a fit with the per-step shared noise integrated out.
//
// Model: y_ct = a_c + b_c g_t + s_t + e_ct, s_t ~ N(0, tau^2) shared by the curves observed at step t,
// e_ct ~ N(0, v_ct), beta_c = (a_c, b_c) ~ N(m0, V0) independently. The covariance of the observations at
// one step is D_t + tau^2 11', whose inverse (Sherman-Morrison) is D_t^-1 - D_t^-1 1 1' D_t^-1 / k_t with
// k_t = 1/tau^2 + sum_c w_ct: the coefficients of all curves form one 2C-dimensional Gaussian regression
// whose precision is the block diagonal of the independent model minus one rank-one term per step.
// The b_c >= 0 truncation contributes prod_c P(b_c >= 0 | y) / P(b_c >= 0) with the posterior marginals
// of the b_c (docs/predictor.md: exact for tau = 0; the ensemble MCMC, which samples the truncated b_c
// exactly, measures the approximation otherwise).
//
// jointEvidence() handles any layout with dense algebra (C <= a few dozen curves). symmetricEvidence()
// is the closed form of the common case, every curve at the same steps with the same variances: an
// orthonormal rotation of each step's C observations into sqrt(C) * their mean and C - 1 contrasts gives
// C independent 2-parameter regressions; the contrasts share one design (one 2x2 precision A) and do not
// see s_t, the mean has per-step variance v_t + C tau^2 and prior mean sqrt(C) m0. Curve c's posterior is
// then mean(beta) + A^-1 (r_c - rbar) with covariance cov(mean beta) + (1 - 1/C) A^-1, r_c = X'D^-1 y_c.
#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <cmath>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor::detail {

double jointEvidence(const Data& data, const EvidencePrior& prior, const std::vector<double>& g, double sigma,
                     double binomialScale, double sharedSd, std::vector<CurveFit>* marginals) {
  const Eigen::Index curveCount = static_cast<Eigen::Index>(data.curves.size());
  const Eigen::Index n = 2 * curveCount;
  Eigen::MatrixXd precision = Eigen::MatrixXd::Zero(n, n);
  Eigen::VectorXd h(n);
  for (Eigen::Index c = 0; c < curveCount; ++c) {
    precision(2 * c, 2 * c) = prior.precA;
    precision(2 * c + 1, 2 * c + 1) = prior.precB;
    h(2 * c) = prior.precA * prior.meanA;
    h(2 * c + 1) = prior.precB * prior.meanB;
  }
  const double s2 = sigma * sigma, t2 = sharedSd * sharedSd;
  double yy = 0, logDetNoise = 0, count = 0;
  std::vector<double> w;
  for (std::size_t t = 0; t < data.pointsAt.size(); ++t) {
    const auto& at = data.pointsAt[t];
    const double gt = g[t];
    double wSum = 0, wySum = 0;
    w.clear();
    for (const auto& [c, i] : at) {
      const CurveData& d = data.curves[static_cast<std::size_t>(c)];
      const double v = s2 + binomialScale * d.tau[static_cast<std::size_t>(i)];
      const double wi = 1.0 / v, y = d.y[static_cast<std::size_t>(i)];
      w.push_back(wi);
      precision(2 * c, 2 * c) += wi;
      precision(2 * c, 2 * c + 1) += wi * gt;
      precision(2 * c + 1, 2 * c) += wi * gt;
      precision(2 * c + 1, 2 * c + 1) += wi * gt * gt;
      h(2 * c) += wi * y;
      h(2 * c + 1) += wi * y * gt;
      yy += wi * y * y;
      logDetNoise += std::log(v);
      wSum += wi;
      wySum += wi * y;
      count += 1;
    }
    if (t2 <= 0 || at.empty()) continue;
    const double k = 1.0 / t2 + wSum;
    logDetNoise += std::log1p(t2 * wSum);
    yy -= wySum * wySum / k;
    for (std::size_t p = 0; p < at.size(); ++p) {
      const Eigen::Index c = at[p].first;
      h(2 * c) -= w[p] * wySum / k;
      h(2 * c + 1) -= w[p] * wySum * gt / k;
      for (std::size_t q = 0; q < at.size(); ++q) {
        const Eigen::Index e = at[q].first;
        const double f = w[p] * w[q] / k;
        precision(2 * c, 2 * e) -= f;
        precision(2 * c, 2 * e + 1) -= f * gt;
        precision(2 * c + 1, 2 * e) -= f * gt;
        precision(2 * c + 1, 2 * e + 1) -= f * gt * gt;
      }
    }
  }
  const Eigen::LLT<Eigen::MatrixXd> llt(precision);
  ADAPREC_CHECK(llt.info() == Eigen::Success, ErrorCode::kInternal, "joint posterior precision not positive definite");
  const Eigen::VectorXd mean = llt.solve(h);
  const Eigen::MatrixXd cov = llt.solve(Eigen::MatrixXd::Identity(n, n));
  double logDetPrecision = 0;
  for (Eigen::Index i = 0; i < n; ++i) logDetPrecision += 2.0 * std::log(llt.matrixL()(i, i));
  const double quad = yy - h.dot(mean);
  double logEvidence = static_cast<double>(curveCount) * prior.constant -
                       0.5 * (quad + logDetNoise + logDetPrecision + count * kLog2Pi);
  if (marginals) marginals->resize(static_cast<std::size_t>(curveCount));
  for (Eigen::Index c = 0; c < curveCount; ++c) {
    logEvidence += logNormalCdf(mean(2 * c + 1) / std::sqrt(cov(2 * c + 1, 2 * c + 1)));
    if (!marginals) continue;
    CurveFit& f = (*marginals)[static_cast<std::size_t>(c)];
    f.meanA = mean(2 * c);
    f.meanB = mean(2 * c + 1);
    f.covAA = cov(2 * c, 2 * c);
    f.covAB = cov(2 * c, 2 * c + 1);
    f.covBB = cov(2 * c + 1, 2 * c + 1);
    f.logEvidence = 0;
  }
  return logEvidence;
}

namespace {
SymmetricInverse inverse2x2(double a00, double a01, double a11) {
  const double det = a00 * a11 - a01 * a01;
  return {a11 / det, -a01 / det, a00 / det, std::log(det)};
}
}  // namespace

SymmetricInverse contrastInverse(const SymmetricSums& s, const EvidencePrior& prior) {
  // Contrasts: precision A = V0^-1 + X'D^-1 X, shared by all C - 1 of them, prior mean 0.
  return inverse2x2(prior.precA + s.w, s.wg, prior.precB + s.wgg);
}

SymmetricInverse meanInverse(const SymmetricSums& s, const EvidencePrior& prior) {
  return inverse2x2(prior.precA + s.mw, s.mwg, prior.precB + s.mwgg);
}

SymmetricContrasts symmetricContrasts(const SymmetricSums& s, const SymmetricInverse& inverse) {
  const std::size_t curveCount = s.wy.size();
  const double count = static_cast<double>(curveCount);
  SymmetricContrasts out;
  out.i00 = inverse.i00;
  out.i01 = inverse.i01;
  out.i11 = inverse.i11;
  double quadContrast = 0;
  for (std::size_t c = 0; c < curveCount; ++c) {
    out.rBar0 += s.wy[c];
    out.rBar1 += s.wyg[c];
    quadContrast += out.i00 * s.wy[c] * s.wy[c] + 2.0 * out.i01 * s.wy[c] * s.wyg[c] + out.i11 * s.wyg[c] * s.wyg[c];
  }
  out.rBar0 /= count;
  out.rBar1 /= count;
  // sum over contrasts of h_j' A^-1 h_j = sum_c r_c' A^-1 r_c - C rbar' A^-1 rbar.
  quadContrast -= count * (out.i00 * out.rBar0 * out.rBar0 + 2.0 * out.i01 * out.rBar0 * out.rBar1 +
                           out.i11 * out.rBar1 * out.rBar1);
  out.logEvidence = -0.5 * ((s.wyy - count * s.wyMeanSq) - quadContrast +
                            (count - 1.0) * (s.logVariance + inverse.logDet + s.count * kLog2Pi));
  return out;
}

double symmetricEvidence(const SymmetricSums& s, const EvidencePrior& prior, std::vector<CurveFit>* marginals,
                         double floor) {
  return symmetricEvidence(s, s, prior, symmetricContrasts(s, contrastInverse(s, prior)), meanInverse(s, prior),
                           marginals, floor);
}

double symmetricEvidence(const SymmetricSums& s, const SymmetricSums& curves, const EvidencePrior& prior,
                         const SymmetricContrasts& contrasts, const SymmetricInverse& mean,
                         std::vector<CurveFit>* marginals, double floor) {
  const std::size_t curveCount = curves.wy.size();
  const double count = static_cast<double>(curveCount);
  const double rootCount = std::sqrt(count);
  const double i00 = contrasts.i00, i01 = contrasts.i01, i11 = contrasts.i11;
  const double rBar0 = contrasts.rBar0, rBar1 = contrasts.rBar1;
  double logEvidence = contrasts.logEvidence;
  // The mean direction: data sqrt(C) ybar_t with variance v_t + C tau^2, prior N(sqrt(C) m0, V0).
  const double j00 = mean.i00, j01 = mean.i01, j11 = mean.i11;
  const double h0 = rootCount * (prior.precA * prior.meanA + s.mwy);
  const double h1 = rootCount * (prior.precB * prior.meanB + s.mwyg);
  const double mu0 = j00 * h0 + j01 * h1, mu1 = j01 * h0 + j11 * h1;
  logEvidence -= 0.5 * (count * s.mwyy - (h0 * mu0 + h1 * mu1) + s.mLogVariance + mean.logDet +
                        s.count * kLog2Pi);
  logEvidence += count * prior.constant;
  if (logEvidence < floor) return logEvidence;
  // Curve c: the posterior of the mean coefficients (mu / sqrt(C), cov B^-1 / C) plus its contrast part.
  const double share = 1.0 - 1.0 / count;
  const double covAA = j00 / count + share * i00, covAB = j01 / count + share * i01;
  const double covBB = j11 / count + share * i11;
  const double sdB = std::sqrt(covBB);
  if (marginals) marginals->resize(curveCount);
  for (std::size_t c = 0; c < curveCount; ++c) {
    const double d0 = curves.wy[c] - rBar0, d1 = curves.wyg[c] - rBar1;
    const double meanA = mu0 / rootCount + i00 * d0 + i01 * d1;
    const double meanB = mu1 / rootCount + i01 * d0 + i11 * d1;
    logEvidence += logNormalCdf(meanB / sdB);
    if (!marginals) continue;
    CurveFit& f = (*marginals)[c];
    f.meanA = meanA;
    f.meanB = meanB;
    f.covAA = covAA;
    f.covAB = covAB;
    f.covBB = covBB;
    f.logEvidence = 0;
  }
  return logEvidence;
}

SymmetricSums symmetricSums(const Data& data, const std::vector<double>& g, double sigma, double binomialScale,
                            double sharedSd) {
  ADAPREC_CHECK(data.symmetric, ErrorCode::kInternal, "symmetricSums on curves with different steps or counts");
  const CurveData& first = data.curves.front();
  const std::size_t curveCount = data.curves.size();
  const double count = static_cast<double>(curveCount);
  SymmetricSums s;
  s.wy.assign(curveCount, 0.0);
  s.wyg.assign(curveCount, 0.0);
  for (std::size_t i = 0; i < first.x.size(); ++i) {
    const double gi = g[static_cast<std::size_t>(first.xIndex[i])];
    const double v = sigma * sigma + binomialScale * first.tau[i];
    const double w = 1.0 / v, wm = 1.0 / (v + count * sharedSd * sharedSd);
    double yBar = 0;
    for (std::size_t c = 0; c < curveCount; ++c) {
      const double y = data.curves[c].y[i];
      yBar += y / count;
      s.wy[c] += w * y;
      s.wyg[c] += w * gi * y;
      s.wyy += w * y * y;
    }
    s.count += 1;
    s.w += w;
    s.wg += w * gi;
    s.wgg += w * gi * gi;
    s.logVariance += std::log(v);
    s.wyMeanSq += w * yBar * yBar;
    s.mw += wm;
    s.mwg += wm * gi;
    s.mwgg += wm * gi * gi;
    s.mwy += wm * yBar;
    s.mwyg += wm * gi * yBar;
    s.mwyy += wm * yBar * yBar;
    s.mLogVariance += std::log(v + count * sharedSd * sharedSd);
  }
  return s;
}

}  // namespace adaprec::predictor::detail
