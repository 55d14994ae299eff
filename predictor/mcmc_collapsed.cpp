// The collapsed MCMC reference (McmcMethod::kCollapsed, the default of fitMcmc()).
//
// Chains move on (family k, u0, u1, log sigma, lambda, tau) with the curves' (a_c, b_c) and the shared
// noise terms integrated out by the dense joint regression of joint_evidence.cpp (fitFast uses the
// rotated closed form of the symmetric layout; the tests check both against brute-force quadrature),
// so the target is exactly the density fitFast() puts on its grid, but continuous. Moves per iteration:
//   - Gaussian random walk on (u0, u1, log sigma), step adapted towards 30% acceptance during burn-in;
//   - a family switch keeping (u, sigma), a switch of the binomial scale lambda (with counts), one
//     of the shared noise sd tau and (with a learning-rate schedule) one of the annealing coefficient c;
//   - with probability 0.1, an independence proposal of (k, u) uniform over the families' unit squares
//     (leaves local modes; the target carries the shape prior, uniform or learned).
// For each kept state, every curve's (a_c, b_c) is drawn from its Gaussian marginal posterior with
// b_c >= 0 (exact truncated-normal sampling): the model's per-curve treatment of the truncation, which
// is exact for tau = 0 (the ensemble sampler draws the coupled, truncated coefficients jointly).
// What this validates: the quadrature grid, the pruning, the per-component moment matching and the
// mixture handling of fitFast(). The uncollapsed ensemble sampler checks the closed forms as well.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor {

namespace detail {

void addSample(PosteriorState& state, Family family, const std::array<double, 2>& theta, double noiseSd,
               double binomialScale, double sharedSd, const std::vector<double>& start,
               const std::vector<double>& gain, double annealingGain) {
  state.weight.push_back(0.0);
  state.annealingGain.push_back(annealingGain);
  state.binomialScale.push_back(binomialScale);
  state.sharedSd.push_back(sharedSd);
  state.family.push_back(family);
  state.theta.push_back(theta);
  state.noiseSd.push_back(noiseSd);
  for (std::size_t c = 0; c < start.size(); ++c) {
    CurveCoef coef;
    coef.c0 = start[c];
    coef.muB = gain[c];
    state.coef.push_back(coef);
  }
}

namespace {
constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

struct ChainState {
  Family family;
  double u0, u1, logSigma;
  std::size_t scale;   // index into Data::binomialScales
  std::size_t shared;  // index into Data::sharedSds
  std::size_t annealing;  // index into Data::annealingGains
  double logTarget;
};

class CollapsedTarget {
 public:
  CollapsedTarget(const Data& data, const ModelOptions& model)
      : data_(data), model_(model), prior_(evidencePrior(model)), shape_(model), g_(data.distinctX.size()) {
    // Given the annealing coefficient c the model is today's on the observations less c * S2.
    for (double c : data.annealingGains) shifted_.push_back(withoutAnnealing(data, c));
  }

  // The shape prior plus the log evidence; fills the per-curve Gaussian posteriors when fits != nullptr.
  double operator()(const ChainState& s, std::vector<CurveFit>* fits = nullptr) const {
    if (s.u0 < 0 || s.u0 > 1 || s.u1 < 0 || s.u1 > 1 || s.logSigma < std::log(model_.noiseMin) ||
        s.logSigma > std::log(model_.noiseMax)) {
      return kMinusInf;
    }
    const double logShape = shape_.logRelative(s.family, s.u0, s.u1);
    if (!std::isfinite(logShape)) return kMinusInf;
    // The dense joint regression (not fitFast's rotated closed form), so the two paths check each other.
    const std::array<double, 2> theta = familyTheta(s.family, s.u0, s.u1);
    // With the gain prior at the step scale the regressor is g / g(1), its coefficient b g(1).
    const double scale = 1.0 / priorGainScale(model_, s.family, theta);
    for (std::size_t t = 0; t < g_.size(); ++t) g_[t] = scale * basis(s.family, theta, data_.basisX[t]);
    return logShape + jointEvidence(shifted_[s.annealing], prior_, g_, std::exp(s.logSigma), data_.binomialScales[s.scale],
                                    data_.sharedSds[s.shared], fits);
  }

 private:
  const Data& data_;
  const ModelOptions& model_;
  const EvidencePrior prior_;
  const ShapeDensity shape_;
  std::vector<Data> shifted_;  // per annealing node
  mutable std::vector<double> g_;  // scratch: the basis at every distinct x
};

// A draw from N(m, s^2) truncated to [0, inf): plain rejection when that accepts often, else Robert's
// (1995) exponential proposal for the far tail.
double truncatedNormalDraw(double m, double s, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double lower = -m / s;  // standardised truncation point
  if (lower < 0.5) {
    while (true) {
      const double z = normal(rng);
      if (z >= lower) return m + s * z;
    }
  }
  const double rate = 0.5 * (lower + std::sqrt(lower * lower + 4.0));
  while (true) {
    const double z = lower - std::log(1.0 - unit(rng)) / rate;
    if (unit(rng) <= std::exp(-0.5 * (z - rate) * (z - rate))) return m + s * z;
  }
}
}  // namespace

Posterior fitCollapsedMcmc(const std::vector<Curve>& curves, const ModelOptions& model, const McmcOptions& options) {
  auto state = std::make_shared<PosteriorState>();
  state->data = prepareData(curves, model);
  state->model = resolveGainPrior(model, curves);
  const CollapsedTarget target(state->data, state->model);
  const std::vector<Family>& families = state->model.families;
  const std::size_t chainCount = options.walkers > 0 ? options.walkers : 8;
  const std::size_t curveCount = state->data.curves.size();
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double logLo = std::log(model.noiseMin), logHi = std::log(model.noiseMax);
  auto pickFamily = [&]() { return families[static_cast<std::size_t>(unit(rng) * families.size()) % families.size()]; };
  const std::size_t scaleCount = state->data.binomialScales.size();
  auto pickScale = [&]() { return static_cast<std::size_t>(unit(rng) * scaleCount) % scaleCount; };
  const std::size_t sharedCount = state->data.sharedSds.size();
  auto pickShared = [&]() { return static_cast<std::size_t>(unit(rng) * sharedCount) % sharedCount; };
  const std::size_t annealingCount = state->data.annealingGains.size();
  auto pickAnnealing = [&]() { return static_cast<std::size_t>(unit(rng) * annealingCount) % annealingCount; };

  std::vector<ChainState> samples;
  for (std::size_t chain = 0; chain < chainCount; ++chain) {
    // Start from the prior; burn-in walks to the posterior.
    ChainState s;
    do {
      s = {pickFamily(), unit(rng), unit(rng), logLo + (logHi - logLo) * unit(rng), pickScale(), pickShared(), 0, 0.0};
      // Drawn only with a schedule, so that the chains without one use the random stream as before.
      if (annealingCount > 1) s.annealing = pickAnnealing();
      s.logTarget = target(s);
    } while (!std::isfinite(s.logTarget));
    double step = 0.1;
    int accepted = 0, proposed = 0;
    for (int iteration = 0; iteration < options.iterations; ++iteration) {
      ChainState p = s;
      p.u0 += step * normal(rng);
      p.u1 += step * normal(rng);
      p.logSigma += step * (logHi - logLo) * normal(rng);
      p.logTarget = target(p);
      ++proposed;
      if (std::log(unit(rng)) < p.logTarget - s.logTarget) {
        s = p;
        ++accepted;
      }
      // Discrete moves (family, lambda, tau): propose a fresh draw of one coordinate from its prior.
      auto switchMove = [&](auto member, std::size_t choices, auto pick) {
        if (choices < 2) return;
        p = s;
        p.*member = pick();
        if (p.*member == s.*member) return;
        p.logTarget = target(p);
        if (std::log(unit(rng)) < p.logTarget - s.logTarget) s = p;
      };
      switchMove(&ChainState::family, families.size(), pickFamily);
      switchMove(&ChainState::scale, scaleCount, pickScale);
      switchMove(&ChainState::shared, sharedCount, pickShared);
      switchMove(&ChainState::annealing, annealingCount, pickAnnealing);
      if (unit(rng) < 0.1) {
        p = s;
        p.family = pickFamily();
        p.u0 = unit(rng);
        p.u1 = unit(rng);
        p.logTarget = target(p);
        if (std::log(unit(rng)) < p.logTarget - s.logTarget) s = p;
      }
      if (iteration < options.burnIn && proposed == 50) {
        step *= accepted > 15 ? 1.3 : 0.77;
        step = std::clamp(step, 1e-4, 0.5);
        accepted = proposed = 0;
      }
      if (iteration >= options.burnIn && (iteration - options.burnIn) % options.thin == 0) samples.push_back(s);
    }
  }
  ADAPREC_CHECK(!samples.empty(), ErrorCode::kInternal, "MCMC kept no samples");
  const std::size_t keep = std::min<std::size_t>(samples.size(), options.maxSamples);
  std::vector<CurveFit> fits;
  std::vector<double> start(curveCount), gain(curveCount);
  for (std::size_t i = 0; i < keep; ++i) {
    const ChainState& s = samples[i * samples.size() / keep];
    target(s, &fits);
    const std::array<double, 2> theta = familyTheta(s.family, s.u0, s.u1);
    // The fits' gain coefficient is b g(1) with the gain prior at the step scale.
    const double toGain = 1.0 / priorGainScale(model, s.family, theta);
    for (std::size_t c = 0; c < curveCount; ++c) {
      const CurveFit& f = fits[c];
      const double b = truncatedNormalDraw(f.meanB, std::sqrt(f.covBB), rng);
      const double r = f.covAB / f.covBB;
      const double condSd = std::sqrt(std::max(f.covAA - r * f.covAB, 0.0));
      gain[c] = b * toGain;
      start[c] = f.meanA + r * (b - f.meanB) + condSd * normal(rng);
    }
    addSample(*state, s.family, theta, std::exp(s.logSigma),
              state->data.binomialScales[s.scale], state->data.sharedSds[s.shared], start, gain,
              state->data.annealingGains[s.annealing]);
    state->weight.back() = 1.0 / keep;
  }
  return Posterior(std::move(state));
}

}  // namespace detail

Posterior fitMcmc(const std::vector<Curve>& curves, const ModelOptions& model, const McmcOptions& options) {
  options.check();
  return options.method == McmcMethod::kEnsemble ? detail::fitEnsembleMcmc(curves, model, options)
                                                 : detail::fitCollapsedMcmc(curves, model, options);
}

}  // namespace adaprec::predictor
