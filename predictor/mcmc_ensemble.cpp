// The uncollapsed MCMC reference (McmcMethod::kEnsemble).
//
// State per walker: family k, binomial scale lambda (switched like k), the one shared noise sd tau the
// model allows here (fitEnsembleMcmc requires a single value: tau switches do not mix) and
// x = (u0, u1, log sigma, a_1, b_1, ..., a_C, b_C). Only the shared terms s_t are integrated out (per
// step, by Sherman-Morrison: no regression), and every b_c >= 0 is sampled exactly, so a mistake in the
// closed forms of evidence.cpp / joint_evidence.cpp, or their per-curve treatment of the truncation,
// shows up as a disagreement. The target is
//   p(k) U(u; [0,1]^2) U(log sigma; [log noiseMin, log noiseMax]) prod_c N(a_c) N+(b_c) prod_t N(y_.t)
// with y_.t the observations at step t, covariance D_t + tau^2 11',
// in the product space of all families (one-parameter families ignore u1, whose prior is then its own
// pseudo-prior, so the family marginal is exact). Moves per iteration: the affine-invariant stretch
// move (Goodman & Weare 2010, as in emcee: each half of the ensemble moves against the other) on x with
// k fixed, then a Metropolis family switch per walker keeping x (a and b mean start and gain in every
// family, so switches are accepted when shapes agree). Walkers start from per-family least-squares
// fits at random theta, away from the fast posterior, so agreement is not built in.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor {

namespace {
constexpr double kStretch = 2.0;
constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

class Target {
 public:
  Target(const detail::Data& data, const ModelOptions& model) : data_(data), model_(model), shape_(model) {
    logSigmaLo_ = std::log(model.noiseMin);
    logSigmaHi_ = std::log(model.noiseMax);
  }

  std::size_t dimension() const { return 3 + 2 * data_.curves.size(); }

  double operator()(Family family, std::size_t scale, std::size_t shared, const std::vector<double>& x) const {
    const double binomialScale = data_.binomialScales[scale];
    const double t2 = data_.sharedSds[shared] * data_.sharedSds[shared];
    if (x[0] < 0 || x[0] > 1 || x[1] < 0 || x[1] > 1 || x[2] < logSigmaLo_ || x[2] > logSigmaHi_) {
      return kMinusInf;
    }
    double lp = shape_.logRelative(family, x[0], x[1]);
    if (!std::isfinite(lp)) return kMinusInf;
    const std::array<double, 2> theta = detail::familyTheta(family, x[0], x[1]);
    const double s2 = std::exp(2.0 * x[2]);
    // With the gain prior at the step scale it is a prior on b g(1): its density at b g(1) times the
    // Jacobian g(1) per curve.
    const double g1 = detail::priorGainScale(model_, family, theta);
    for (std::size_t c = 0; c < data_.curves.size(); ++c) {
      const double a = x[3 + 2 * c];
      const double b = x[4 + 2 * c];
      if (b < 0) return kMinusInf;
      const double za = (a - model_.startMean) / model_.startSd;
      const double zb = (b * g1 - model_.gainMean) / model_.gainSd;
      lp -= 0.5 * (za * za + zb * zb) - std::log(g1);
    }
    for (std::size_t t = 0; t < data_.pointsAt.size(); ++t) {
      const double g = detail::basis(family, theta, data_.distinctX[t]);
      double wSum = 0, wrSum = 0;
      for (const auto& [c, i] : data_.pointsAt[t]) {
        const detail::CurveData& d = data_.curves[static_cast<std::size_t>(c)];
        const double v = s2 + binomialScale * d.tau[static_cast<std::size_t>(i)];
        const double r = d.y[static_cast<std::size_t>(i)] - x[3 + 2 * c] - x[4 + 2 * c] * g;
        lp -= 0.5 * (r * r / v + std::log(v));
        wSum += 1.0 / v;
        wrSum += r / v;
      }
      // (D + tau^2 11')^-1 = D^-1 - D^-1 1 1' D^-1 / (1/tau^2 + 1'D^-1 1); det = det D (1 + tau^2 1'D^-1 1).
      if (t2 > 0) lp += 0.5 * (wrSum * wrSum / (1.0 / t2 + wSum) - std::log1p(t2 * wSum));
    }
    return lp;
  }

  const detail::Data& data() const { return data_; }
  double logSigmaLo() const { return logSigmaLo_; }
  double logSigmaHi() const { return logSigmaHi_; }

 private:
  const detail::Data& data_;
  const ModelOptions& model_;
  const detail::ShapeDensity shape_;
  double logSigmaLo_, logSigmaHi_;
};

struct Walker {
  Family family;
  std::size_t scale;   // index into Data::binomialScales
  std::size_t shared;  // index into Data::sharedSds
  std::vector<double> x;
  double logTarget;
};

// A walker at random (family, u) with each curve's (a, b) from a ridge least-squares fit plus jitter.
Walker initialWalker(const Target& target, const ModelOptions& model, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    Walker w;
    w.family = model.families[static_cast<std::size_t>(unit(rng) * model.families.size()) % model.families.size()];
    const std::size_t scaleCount = target.data().binomialScales.size();
    w.scale = static_cast<std::size_t>(unit(rng) * scaleCount) % scaleCount;
    const std::size_t sharedCount = target.data().sharedSds.size();
    w.shared = static_cast<std::size_t>(unit(rng) * sharedCount) % sharedCount;
    w.x.assign(target.dimension(), 0.0);
    w.x[0] = unit(rng);
    w.x[1] = unit(rng);
    const std::array<double, 2> theta = detail::familyTheta(w.family, w.x[0], w.x[1]);
    double sse = 0, count = 0;
    for (std::size_t c = 0; c < target.data().curves.size(); ++c) {
      const detail::CurveData& d = target.data().curves[c];
      detail::Sums s;
      std::vector<double> g(d.x.size());
      for (std::size_t i = 0; i < d.x.size(); ++i) {
        g[i] = detail::basis(w.family, theta, d.x[i]);
        s.w += 1;
        s.wg += g[i];
        s.wgg += g[i] * g[i];
        s.wy += d.y[i];
        s.wyg += d.y[i] * g[i];
      }
      // Noise 0.05 for the ridge: a neutral scale, not taken from any posterior.
      const double scale = 1.0 / (0.05 * 0.05);
      s.w *= scale; s.wg *= scale; s.wgg *= scale; s.wy *= scale; s.wyg *= scale;
      const detail::CurveFit fit = detail::curveEvidence(s, model);
      const double a = fit.meanA + 0.02 * normal(rng);
      const double b = std::abs(fit.meanB + 0.02 * normal(rng));
      w.x[3 + 2 * c] = a;
      w.x[4 + 2 * c] = b;
      for (std::size_t i = 0; i < d.x.size(); ++i) {
        const double r = d.y[i] - a - b * g[i];
        sse += r * r;
        count += 1;
      }
    }
    const double rms = std::sqrt(sse / count);
    w.x[2] = std::clamp(std::log(std::max(rms, 1e-12)) + 0.2 * normal(rng), target.logSigmaLo() + 1e-6,
                        target.logSigmaHi() - 1e-6);
    w.logTarget = target(w.family, w.scale, w.shared, w.x);
    if (std::isfinite(w.logTarget)) return w;
  }
  ADAPREC_FAIL(ErrorCode::kInternal, "MCMC: no finite starting point found");
}
}  // namespace

Posterior detail::fitEnsembleMcmc(const std::vector<Curve>& curves, const ModelOptions& model,
                                  const McmcOptions& options) {
  // Switching tau at fixed coefficients is accepted too rarely for the chains to mix over it (measured:
  // with tau in {0, .005, .01, .02, .04} the predictive sd came out 20% narrower than the collapsed
  // sampler's), so this reference takes one value of tau: still the coupled likelihood, exactly.
  ADAPREC_CHECK_ARG(model.sharedNoiseSds.size() == 1,
                    "the ensemble MCMC needs exactly one ModelOptions::sharedNoiseSds value (it does not mix over "
                    "tau), got " << model.sharedNoiseSds.size() << "; use McmcMethod::kCollapsed");
  auto state = std::make_shared<detail::PosteriorState>();
  ADAPREC_CHECK_ARG(!model.lrSchedule, "the ensemble MCMC does not support a learning-rate schedule (use the collapsed reference)");
  state->data = detail::prepareData(curves, model);
  state->model = detail::resolveGainPrior(model, curves);
  const Target target(state->data, state->model);
  const std::size_t dim = target.dimension();
  std::size_t walkerCount = options.walkers;
  if (walkerCount == 0) walkerCount = std::max<std::size_t>(32, 4 * dim + (4 * dim) % 2);
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  std::vector<Walker> walkers;
  for (std::size_t i = 0; i < walkerCount; ++i) walkers.push_back(initialWalker(target, state->model, rng));

  std::vector<Walker> samples;
  const std::size_t half = walkerCount / 2;
  std::vector<double> proposal(dim);
  for (int iteration = 0; iteration < options.iterations; ++iteration) {
    for (int side = 0; side < 2; ++side) {
      const std::size_t begin = side * half;
      const std::size_t otherBegin = (1 - side) * half;
      for (std::size_t i = begin; i < begin + half; ++i) {
        const Walker& partner = walkers[otherBegin + static_cast<std::size_t>(unit(rng) * half) % half];
        const double u = unit(rng);
        const double z = std::pow((kStretch - 1.0) * u + 1.0, 2) / kStretch;
        for (std::size_t d = 0; d < dim; ++d) proposal[d] = partner.x[d] + z * (walkers[i].x[d] - partner.x[d]);
        const double lp = target(walkers[i].family, walkers[i].scale, walkers[i].shared, proposal);
        const double logAccept = (static_cast<double>(dim) - 1.0) * std::log(z) + lp - walkers[i].logTarget;
        if (std::log(unit(rng)) < logAccept) {
          walkers[i].x = proposal;
          walkers[i].logTarget = lp;
        }
      }
    }
    if (state->model.families.size() > 1) {
      for (Walker& w : walkers) {
        const std::size_t f = static_cast<std::size_t>(unit(rng) * state->model.families.size()) %
                              state->model.families.size();
        const Family other = state->model.families[f];
        if (other == w.family) continue;
        const double lp = target(other, w.scale, w.shared, w.x);
        if (std::log(unit(rng)) < lp - w.logTarget) {
          w.family = other;
          w.logTarget = lp;
        }
      }
    }
    const std::size_t scaleCount = state->data.binomialScales.size();
    if (scaleCount > 1) {
      for (Walker& w : walkers) {
        const std::size_t scale = static_cast<std::size_t>(unit(rng) * scaleCount) % scaleCount;
        if (scale == w.scale) continue;
        const double lp = target(w.family, scale, w.shared, w.x);
        if (std::log(unit(rng)) < lp - w.logTarget) {
          w.scale = scale;
          w.logTarget = lp;
        }
      }
    }
    if (iteration == options.burnIn / 2) {
      // Stuck walkers: the stretch move cannot pull a walker out of a region far below the others (it
      // was started there), so halfway through burn-in each walker more than 3*dim nats below the best
      // restarts next to a random walker in the upper half. Burn-in only; the chain after it is untouched.
      std::vector<std::size_t> order(walkerCount);
      for (std::size_t i = 0; i < walkerCount; ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](std::size_t x, std::size_t y) { return walkers[x].logTarget > walkers[y].logTarget; });
      const double best = walkers[order[0]].logTarget;
      std::normal_distribution<double> normal(0.0, 1.0);
      for (Walker& w : walkers) {
        if (w.logTarget > best - 3.0 * dim) continue;
        for (int attempt = 0; attempt < 100; ++attempt) {
          const Walker& donor = walkers[order[static_cast<std::size_t>(unit(rng) * (walkerCount / 2)) % (walkerCount / 2)]];
          Walker moved = donor;
          for (double& v : moved.x) v += 1e-4 * normal(rng);
          moved.logTarget = target(moved.family, moved.scale, moved.shared, moved.x);
          if (std::isfinite(moved.logTarget)) {
            w = moved;
            break;
          }
        }
      }
    }
    if (iteration >= options.burnIn && (iteration - options.burnIn) % options.thin == 0) {
      samples.insert(samples.end(), walkers.begin(), walkers.end());
    }
  }
  ADAPREC_CHECK(!samples.empty(), ErrorCode::kInternal, "MCMC kept no samples");
  // Keep at most maxSamples, evenly spread over the run.
  const std::size_t keep = std::min<std::size_t>(samples.size(), options.maxSamples);
  const std::size_t curveCount = state->data.curves.size();
  std::vector<double> start(curveCount), gain(curveCount);
  for (std::size_t i = 0; i < keep; ++i) {
    const Walker& w = samples[i * samples.size() / keep];
    for (std::size_t c = 0; c < curveCount; ++c) {
      start[c] = w.x[3 + 2 * c];
      gain[c] = w.x[4 + 2 * c];
    }
    detail::addSample(*state, w.family, detail::familyTheta(w.family, w.x[0], w.x[1]), std::exp(w.x[2]),
                      state->data.binomialScales[w.scale], state->data.sharedSds[w.shared], start, gain);
    state->weight.back() = 1.0 / keep;
  }
  return Posterior(std::move(state));
}

}  // namespace adaprec::predictor
