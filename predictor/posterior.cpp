// Posterior: predictions and summaries from the mixture both fit functions produce.
//
// Component k predicts the latent value of curve c at basis value g as c0 + (r + g) b + N(0, varCond)
// with b's (truncated) moments muB, varB; it is moment-matched to one Gaussian per component (exact for
// MCMC samples and for untruncated b; the skew of a truncated b is dropped) and the observation noise
// sigma_k^2 + lambda_k p(1-p)/n + tau_k^2 is added: a future evaluation brings its own shared term s_t,
// independent of the observed ones (a step that was already observed is treated as a new evaluation).
// The mixture is then truncated to [0, 1] by Predictive.
#include <algorithm>
#include <cmath>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor {

Posterior::Posterior(std::shared_ptr<const detail::PosteriorState> state) : state_(std::move(state)) {
  ADAPREC_CHECK(state_ && !state_->weight.empty(), ErrorCode::kInternal, "empty posterior");
}

std::size_t Posterior::curveCount() const { return state_->data.curves.size(); }

double Posterior::stepScale() const { return state_->data.stepScale; }

Predictive Posterior::predictive(std::size_t curve, double step, const PredictOptions& options) const {
  const detail::PosteriorState& s = *state_;
  const std::size_t curveCount = s.data.curves.size();
  ADAPREC_CHECK_ARG(curve < curveCount, "curve " << curve << " out of range (" << curveCount << " curves)");
  ADAPREC_CHECK_ARG(std::isfinite(step) && step >= 0, "step must be finite and >= 0, got " << step);
  ADAPREC_CHECK_ARG(std::isfinite(options.sampleCount), "sampleCount must be finite");
  const double x = step / s.data.stepScale;
  // The basis argument and the annealing regressor at this step (x and 0 without a schedule).
  const std::array<double, 2> xv = detail::scheduleCoordinates(s.data, step);
  const double count = options.sampleCount < 0 ? s.data.curves[curve].lastCount : options.sampleCount;
  const std::size_t n = s.weight.size();
  std::vector<double> means(n), sds(n);
  for (std::size_t k = 0; k < n; ++k) {
    const detail::CurveCoef& coef = s.coef[k * curveCount + curve];
    const double g = detail::basis(s.family[k], s.theta[k], xv[0]);
    const double slope = coef.r + g;
    means[k] = coef.c0 + slope * coef.muB + s.annealingGain[k] * xv[1];
    double var = slope * slope * coef.varB + coef.varCond;
    if (options.observationNoise) {
      var += s.noiseSd[k] * s.noiseSd[k] + s.sharedSd[k] * s.sharedSd[k];
      if (count > 0) {
        const double p = std::clamp(means[k], 0.0, 1.0);
        var += s.binomialScale[k] * p * (1.0 - p) / count;
      }
    }
    sds[k] = std::sqrt(var);
  }
  Predictive predictive(s.weight, std::move(means), std::move(sds));
  // The learned map of the CDF (the model's own, else the schedule's default), by how far the
  // prediction reaches beyond the curve's last observation and how many points the curve has.
  const Recalibration* map = s.model.appliedRecalibration();
  const double last = s.data.curves[curve].x.back();
  if (map != nullptr && options.recalibrated && x > last) {
    const std::array<double, 2> ab = map->at(last / x, s.data.curves[curve].x.size());
    return predictive.recalibrated(ab[0], ab[1]);
  }
  return predictive;
}

Prediction Posterior::predict(std::size_t curve, double step, const PredictOptions& options) const {
  const Predictive p = predictive(curve, step, options);
  Prediction out;
  out.step = step;
  out.mean = p.mean();
  out.sd = p.sd();
  out.q05 = p.quantile(0.05);
  out.q50 = p.quantile(0.5);
  out.q95 = p.quantile(0.95);
  out.curveMean = p.untruncatedMean();
  return out;
}

PosteriorSummary Posterior::summary() const {
  const detail::PosteriorState& s = *state_;
  const std::size_t curveCount = s.data.curves.size();
  PosteriorSummary out;
  out.componentCount = s.weight.size();
  out.startMean.assign(curveCount, 0);
  out.gainMean.assign(curveCount, 0);
  out.asymptoteMean.assign(curveCount, 0);
  std::vector<double> asymptoteSecond(curveCount, 0);
  for (std::size_t k = 0; k < s.weight.size(); ++k) {
    const double w = s.weight[k];
    out.familyWeights[static_cast<int>(s.family[k])] += w;
    out.noiseSdMean += w * s.noiseSd[k];
    out.binomialScaleMean += w * (s.binomialScale[k] - 1.0);
    out.sharedNoiseSdMean += w * s.sharedSd[k];
    for (std::size_t c = 0; c < curveCount; ++c) {
      const detail::CurveCoef& coef = s.coef[k * curveCount + c];
      // g -> 1 far out: asymptote = a + b = c0 + (r + 1) b.
      const double slope = coef.r + 1.0;
      const double mean = coef.c0 + slope * coef.muB;
      const double var = slope * slope * coef.varB + coef.varCond;
      out.startMean[c] += w * (coef.c0 + coef.r * coef.muB);
      out.gainMean[c] += w * coef.muB;
      out.asymptoteMean[c] += w * mean;
      asymptoteSecond[c] += w * (var + mean * mean);
    }
  }
  for (std::size_t c = 0; c < curveCount; ++c) {
    out.asymptoteSd.push_back(
        std::sqrt(std::max(asymptoteSecond[c] - out.asymptoteMean[c] * out.asymptoteMean[c], 0.0)));
  }
  return out;
}

std::array<double, 2> Posterior::familyParameterMean(Family family) const {
  const detail::PosteriorState& s = *state_;
  double w = 0, logKappa = 0, alpha = 0;
  for (std::size_t k = 0; k < s.weight.size(); ++k) {
    if (s.family[k] != family) continue;
    w += s.weight[k];
    logKappa += s.weight[k] * std::log(s.theta[k][0]);
    alpha += s.weight[k] * s.theta[k][1];
  }
  ADAPREC_CHECK_ARG(w > 0, "family " << familyName(family) << " has no posterior weight");
  return {std::exp(logKappa / w), alpha / w};
}

}  // namespace adaprec::predictor
