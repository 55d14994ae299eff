// The prior over the curve shape (family, theta): uniform, or learned from finished related runs
// (learnPriorFromRuns), and the density every fit evaluates it by (ShapeDensity).
#include <algorithm>
#include <cmath>
#include <limits>

#include "adaprec/error.hpp"
#include "model.hpp"

namespace adaprec::predictor {

namespace {
int cellCount(Family family, int grid1d, int grid2d) {
  return familyParameterCount(family) == 2 ? grid2d * grid2d : grid1d;
}

// The cell holding unit coordinates (u0, u1) (u0 major for two-parameter families).
int cellOf(Family family, int grid1d, int grid2d, double u0, double u1) {
  auto index = [](double u, int n) { return std::clamp(static_cast<int>(std::floor(u * n)), 0, n - 1); };
  return familyParameterCount(family) == 2 ? index(u0, grid2d) * grid2d + index(u1, grid2d) : index(u0, grid1d);
}
}  // namespace

void ShapePrior::check() const {
  ADAPREC_CHECK_ARG(stepScale > 0 && std::isfinite(stepScale), "ShapePrior: stepScale must be > 0, got " << stepScale);
  ADAPREC_CHECK_ARG(grid1d >= 1 && grid1d <= 4096 && grid2d >= 1 && grid2d <= 256,
                    "ShapePrior: grid1d in [1, 4096] and grid2d in [1, 256], got " << grid1d << ", " << grid2d);
  double total = 0;
  for (int f = 0; f < kFamilyCount; ++f) {
    const std::vector<double>& mass = cellMass[static_cast<std::size_t>(f)];
    const int cells = cellCount(static_cast<Family>(f), grid1d, grid2d);
    ADAPREC_CHECK_ARG(mass.empty() || static_cast<int>(mass.size()) == cells,
                      "ShapePrior: family " << familyName(static_cast<Family>(f)) << " has " << mass.size()
                                            << " cell masses, expected " << cells << " or none");
    for (double m : mass) {
      ADAPREC_CHECK_ARG(std::isfinite(m) && m >= 0, "ShapePrior: cell masses must be finite and >= 0, got " << m);
      total += m;
    }
  }
  ADAPREC_CHECK_ARG(std::abs(total - 1.0) < 1e-6, "ShapePrior: cell masses must sum to 1, got " << total);
}

void RunPriorOptions::check() const {
  ADAPREC_CHECK_ARG(pseudoCount > 0 && std::isfinite(pseudoCount),
                    "RunPriorOptions: pseudoCount must be finite and > 0, got " << pseudoCount);
  ADAPREC_CHECK_ARG(grid1d >= 1 && grid1d <= 4096 && grid2d >= 1 && grid2d <= 256,
                    "RunPriorOptions: grid1d in [1, 4096] and grid2d in [1, 256], got " << grid1d << ", " << grid2d);
}

namespace detail {

ShapeDensity::ShapeDensity(const ModelOptions& model) : families_(model.families), prior_(model.shapePrior) {
  if (!prior_) return;
  double total = 0;
  for (Family family : families_) {
    for (double m : prior_->cellMass[static_cast<std::size_t>(family)]) total += m;
  }
  double cumulative = 0;
  for (Family family : families_) {
    const std::vector<double>& mass = prior_->cellMass[static_cast<std::size_t>(family)];
    std::vector<double>& log = logDensity_[static_cast<std::size_t>(family)];
    const double cells = static_cast<double>(mass.size());
    for (std::size_t i = 0; i < mass.size(); ++i) {
      log.push_back(mass[i] > 0 ? std::log(mass[i] / total * cells) : -std::numeric_limits<double>::infinity());
      if (mass[i] <= 0) continue;
      cumulative += mass[i] / total;
      cumulative_.push_back({cumulative, {static_cast<int>(family), static_cast<int>(i)}});
    }
  }
}

double ShapeDensity::logDensity(Family family, double u0, double u1) const {
  if (!prior_) {
    const bool member = std::find(families_.begin(), families_.end(), family) != families_.end();
    return member ? -std::log(static_cast<double>(families_.size())) : -std::numeric_limits<double>::infinity();
  }
  const std::vector<double>& log = logDensity_[static_cast<std::size_t>(family)];
  if (log.empty()) return -std::numeric_limits<double>::infinity();
  return log[static_cast<std::size_t>(cellOf(family, prior_->grid1d, prior_->grid2d, u0, u1))];
}

double ShapeDensity::logRelative(Family family, double u0, double u1) const {
  const double log = logDensity(family, u0, u1);
  return std::isfinite(log) && !prior_ ? 0.0 : log + std::log(static_cast<double>(families_.size()));
}

void ShapeDensity::sample(std::mt19937_64& rng, Family& family, double& u0, double& u1) const {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  if (!prior_) {
    family = families_[static_cast<std::size_t>(unit(rng) * families_.size()) % families_.size()];
    u1 = unit(rng);  // this order reproduces the draws of the sampler before learned priors
    u0 = unit(rng);
    return;
  }
  const double r = unit(rng) * cumulative_.back().first;
  auto it = std::lower_bound(cumulative_.begin(), cumulative_.end(), r,
                             [](const auto& entry, double value) { return entry.first < value; });
  if (it == cumulative_.end()) --it;
  family = static_cast<Family>(it->second.first);
  const int cell = it->second.second;
  const bool two = familyParameterCount(family) == 2;
  const int n = two ? prior_->grid2d : prior_->grid1d;
  const int i0 = two ? cell / n : cell, i1 = two ? cell % n : 0;
  u0 = (i0 + unit(rng)) / n;
  u1 = two ? (i1 + unit(rng)) / n : unit(rng);
}

}  // namespace detail

namespace {
// Mean over runs of E[(gain / h)^2] under each run's posterior (the gain b, or b g(1) with
// gainAtStepScale; h the run's headroom): the EM update of k^2 without the pseudo-count.
double meanSquaredRelativeGain(const std::vector<std::vector<Curve>>& runs, const ModelOptions& model,
                               const FastOptions& fit) {
  double sum = 0;
  for (const std::vector<Curve>& run : runs) {
    const auto state = detail::fastPosteriorState(run, model, fit);
    double first = 0;
    for (const Curve& curve : run) first += curve.values.front() / static_cast<double>(run.size());
    const double h = std::max(1.0 - first, kMinHeadroom);
    const std::size_t curveCount = run.size();
    for (std::size_t k = 0; k < state->weight.size(); ++k) {
      const double g1 = model.gainAtStepScale ? detail::gainScale(state->family[k], state->theta[k]) : 1.0;
      for (std::size_t c = 0; c < curveCount; ++c) {
        const detail::CurveCoef& coef = state->coef[k * curveCount + c];
        sum += state->weight[k] * g1 * g1 * (coef.varB + coef.muB * coef.muB) / (h * h) / curveCount;
      }
    }
  }
  return sum / static_cast<double>(runs.size());
}
}  // namespace

ModelOptions learnPriorFromRuns(const std::vector<std::vector<Curve>>& runs, const ModelOptions& model,
                                const FastOptions& fit, const RunPriorOptions& options) {
  options.check();
  fit.check();
  ADAPREC_CHECK_ARG(!runs.empty(), "learnPriorFromRuns: no runs given");
  ModelOptions uniform = model;
  uniform.shapePrior.reset();
  uniform.check();
  ADAPREC_CHECK_ARG(!options.learnGainScale || model.gainHeadroomSd > 0,
                    "learnPriorFromRuns: learnGainScale needs the headroom gain prior (gainHeadroomSd > 0)");
  double horizon = model.stepScale;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    try {
      validateCurves(runs[r]);
    } catch (const Error& e) {
      ADAPREC_FAIL(ErrorCode::kInvalidArgument, "learnPriorFromRuns: run " << r << ": " << e.what());
    }
    if (model.stepScale == 0) {
      for (const Curve& curve : runs[r]) horizon = std::max(horizon, curve.steps.back());
    }
  }
  ADAPREC_CHECK_ARG(horizon > 0, "learnPriorFromRuns: every step is 0, so the runs show no shape");
  uniform.stepScale = horizon;

  // The gain scale first (EM over k^2 with the uniform shape prior; 4 iterations move k by < 1% on the
  // trainer corpus), then the shapes under it.
  const double runCount = static_cast<double>(runs.size());
  if (options.learnGainScale) {
    const double k0 = model.gainHeadroomSd;
    for (int iteration = 0; iteration < 4; ++iteration) {
      const double meanSquare = meanSquaredRelativeGain(runs, uniform, fit);
      uniform.gainHeadroomSd =
          std::sqrt((options.pseudoCount * k0 * k0 + runCount * meanSquare) / (options.pseudoCount + runCount));
    }
  }

  auto prior = std::make_shared<ShapePrior>();
  prior->stepScale = horizon;
  prior->grid1d = options.grid1d;
  prior->grid2d = options.grid2d;
  prior->runCount = runs.size();
  const double total = options.pseudoCount + runCount;
  for (Family family : uniform.families) {
    const int cells = cellCount(family, prior->grid1d, prior->grid2d);
    prior->cellMass[static_cast<std::size_t>(family)].assign(
        static_cast<std::size_t>(cells), options.pseudoCount / (total * uniform.families.size() * cells));
  }
  for (const std::vector<Curve>& run : runs) {
    const auto state = detail::fastPosteriorState(run, uniform, fit);
    for (std::size_t k = 0; k < state->weight.size(); ++k) {
      const Family family = state->family[k];
      const std::array<double, 2> u = detail::familyUnit(family, state->theta[k]);
      prior->cellMass[static_cast<std::size_t>(family)][static_cast<std::size_t>(
          cellOf(family, prior->grid1d, prior->grid2d, u[0], u[1]))] += state->weight[k] / total;
    }
  }
  ModelOptions learned = uniform;
  learned.stepScale = 0;
  learned.shapePrior = std::move(prior);
  return learned;
}

}  // namespace adaprec::predictor
