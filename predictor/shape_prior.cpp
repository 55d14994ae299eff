// Priors learned from finished related runs (learnPriorFromRuns): the shape prior over (family, theta)
// and the density every fit evaluates it by (ShapeDensity), the gain scale, and the Recalibration map.
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
// Per run, E[(gain / h)^2] under the run's posterior (the gain b, or b g(1) with gainAtStepScale; h the
// run's headroom): their mean is the EM update of k^2 without the pseudo-count.
std::vector<double> squaredRelativeGains(const std::vector<std::vector<Curve>>& runs, const ModelOptions& model,
                                         const FastOptions& fit) {
  std::vector<double> out;
  for (const std::vector<Curve>& run : runs) {
    const auto state = detail::fastPosteriorState(run, model, fit);
    double first = 0;
    for (const Curve& curve : run) first += curve.values.front() / static_cast<double>(run.size());
    const double h = std::max(1.0 - first, kMinHeadroom);
    const std::size_t curveCount = run.size();
    double sum = 0;
    for (std::size_t k = 0; k < state->weight.size(); ++k) {
      const double g1 = detail::priorGainScale(model, state->family[k], state->theta[k]);
      for (std::size_t c = 0; c < curveCount; ++c) {
        const detail::CurveCoef& coef = state->coef[k * curveCount + c];
        sum += state->weight[k] * g1 * g1 * (coef.varB + coef.muB * coef.muB) / (h * h) / curveCount;
      }
    }
    out.push_back(sum);
  }
  return out;
}

using CellMass = std::array<std::vector<double>, kFamilyCount>;

// A run's posterior mass over the cells of `prior`'s grid (fitted under `model`, the uniform shape prior).
CellMass runCellMass(const std::vector<Curve>& run, const ModelOptions& model, const FastOptions& fit,
                     const ShapePrior& prior) {
  CellMass mass;
  for (Family family : model.families) {
    mass[static_cast<std::size_t>(family)].assign(static_cast<std::size_t>(cellCount(family, prior.grid1d, prior.grid2d)), 0.0);
  }
  const auto state = detail::fastPosteriorState(run, model, fit);
  for (std::size_t k = 0; k < state->weight.size(); ++k) {
    const Family family = state->family[k];
    const std::array<double, 2> u = detail::familyUnit(family, state->theta[k]);
    mass[static_cast<std::size_t>(family)][static_cast<std::size_t>(
        cellOf(family, prior.grid1d, prior.grid2d, u[0], u[1]))] += state->weight[k];
  }
  return mass;
}

// The shape prior of the runs whose masses are summed in `runSum` (`runs` of them), with the uniform
// prior at the weight of `pseudoCount` runs.
std::shared_ptr<ShapePrior> shapePriorFrom(const ShapePrior& grid, const std::vector<Family>& families,
                                           const CellMass& runSum, double runs, double pseudoCount) {
  auto prior = std::make_shared<ShapePrior>(grid);
  const double total = pseudoCount + runs;
  for (Family family : families) {
    std::vector<double>& mass = prior->cellMass[static_cast<std::size_t>(family)];
    const std::vector<double>& sum = runSum[static_cast<std::size_t>(family)];
    mass.assign(sum.size(), 0.0);
    for (std::size_t i = 0; i < sum.size(); ++i) {
      mass[i] = (pseudoCount / (static_cast<double>(families.size()) * sum.size()) + sum[i]) / total;
    }
  }
  prior->runCount = static_cast<std::size_t>(runs);
  return prior;
}

// The curves of `run` cut at `fraction` of their last step (curves with no point that early, or with
// nothing after it, are left out); `kept` receives the indices of the curves kept.
std::vector<Curve> earlyPart(const std::vector<Curve>& run, double fraction, std::vector<std::size_t>& kept) {
  std::vector<Curve> out;
  kept.clear();
  for (std::size_t c = 0; c < run.size(); ++c) {
    const Curve& curve = run[c];
    const double cut = fraction * curve.steps.back();
    const auto end = std::upper_bound(curve.steps.begin(), curve.steps.end(), cut) - curve.steps.begin();
    if (end == 0 || end == static_cast<long>(curve.steps.size())) continue;
    Curve part;
    part.steps.assign(curve.steps.begin(), curve.steps.begin() + end);
    part.values.assign(curve.values.begin(), curve.values.begin() + end);
    if (!curve.sampleCounts.empty()) part.sampleCounts.assign(curve.sampleCounts.begin(), curve.sampleCounts.begin() + end);
    out.push_back(std::move(part));
    kept.push_back(c);
  }
  return out;
}
}  // namespace

void Recalibration::check() const {
  ADAPREC_CHECK_ARG(a.size() == fractions.size() && b.size() == fractions.size(),
                    "Recalibration: need one (a, b) per fraction, got " << fractions.size() << " fractions, "
                                                                        << a.size() << " a, " << b.size() << " b");
  for (std::size_t i = 0; i < fractions.size(); ++i) {
    ADAPREC_CHECK_ARG(fractions[i] > 0 && fractions[i] < 1 && (i == 0 || fractions[i] > fractions[i - 1]),
                      "Recalibration: fractions must increase within (0, 1), got " << fractions[i]);
    ADAPREC_CHECK_ARG(std::isfinite(a[i]) && std::isfinite(b[i]) && a[i] > 0 && b[i] > 0,
                      "Recalibration: Beta parameters must be finite and > 0, got " << a[i] << ", " << b[i]);
  }
  ADAPREC_CHECK_ARG(std::isfinite(pointsPerRun) && pointsPerRun >= 0,
                    "Recalibration: pointsPerRun must be finite and >= 0, got " << pointsPerRun);
}

std::array<double, 2> Recalibration::at(double fraction) const {
  if (fractions.empty() || !(fraction < 1)) return {1.0, 1.0};
  // Linear in log f between the learned fractions and (1, (1, 1)) after the last, of log a and log b.
  const auto interpolate = [&](double f0, double a0, double b0, double f1, double a1, double b1) {
    const double t = std::log(fraction / f0) / std::log(f1 / f0);
    return std::array<double, 2>{std::exp((1 - t) * std::log(a0) + t * std::log(a1)),
                                 std::exp((1 - t) * std::log(b0) + t * std::log(b1))};
  };
  if (!(fraction > fractions.front())) return {a.front(), b.front()};
  if (fraction >= fractions.back()) return interpolate(fractions.back(), a.back(), b.back(), 1.0, 1.0, 1.0);
  const std::size_t i = static_cast<std::size_t>(std::upper_bound(fractions.begin(), fractions.end(), fraction) -
                                                 fractions.begin());
  return interpolate(fractions[i - 1], a[i - 1], b[i - 1], fractions[i], a[i], b[i]);
}

std::array<double, 2> Recalibration::at(double fraction, std::size_t points) const {
  const std::array<double, 2> full = at(fraction);
  // The points a curve evaluated like the map's own had by this reach (30 x 0.2 = 6 for the default).
  const double learned = pointsPerRun * fraction;
  if (!(pointsPerRun > 0) || static_cast<double>(points) >= learned) return full;
  const double w = points <= 1 ? 0.0 : (static_cast<double>(points) - 1) / (learned - 1);
  return {std::pow(full[0], w), std::pow(full[1], w)};
}

void RunPriorOptions::check() const {
  ADAPREC_CHECK_ARG(pseudoCount > 0 && std::isfinite(pseudoCount),
                    "RunPriorOptions: pseudoCount must be finite and > 0, got " << pseudoCount);
  ADAPREC_CHECK_ARG(grid1d >= 1 && grid1d <= 4096 && grid2d >= 1 && grid2d <= 256,
                    "RunPriorOptions: grid1d in [1, 4096] and grid2d in [1, 256], got " << grid1d << ", " << grid2d);
  for (std::size_t i = 0; i < recalibrationFractions.size(); ++i) {
    const double f = recalibrationFractions[i];
    ADAPREC_CHECK_ARG(f > 0 && f < 1 && (i == 0 || f > recalibrationFractions[i - 1]),
                      "RunPriorOptions: recalibrationFractions must increase within (0, 1), got " << f);
  }
}

ModelOptions learnPriorFromRuns(const std::vector<std::vector<Curve>>& runs, const ModelOptions& model,
                                const FastOptions& fit, const RunPriorOptions& options) {
  options.check();
  fit.check();
  ADAPREC_CHECK_ARG(!runs.empty(), "learnPriorFromRuns: no runs given");
  ModelOptions uniform = model;
  uniform.shapePrior.reset();
  uniform.recalibration.reset();
  // The PITs below are the model's own; the learned model carries its own map (or none).
  uniform.scheduleRecalibration = false;
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
  const double runCount = static_cast<double>(runs.size());
  const double pc = options.pseudoCount;

  // The gain scale first (EM over k^2 with the uniform shape prior; 4 iterations move k by < 1% on the
  // trainer corpus), then the shapes under it.
  const double k0 = model.gainHeadroomSd;
  std::vector<double> squares;
  if (options.learnGainScale) {
    for (int iteration = 0; iteration < 4; ++iteration) {
      squares = squaredRelativeGains(runs, uniform, fit);
      double sum = 0;
      for (double v : squares) sum += v;
      uniform.gainHeadroomSd = std::sqrt((pc * k0 * k0 + sum) / (pc + runCount));
    }
  }

  ShapePrior grid;
  grid.stepScale = horizon;
  grid.grid1d = options.grid1d;
  grid.grid2d = options.grid2d;
  std::vector<CellMass> masses;
  CellMass sum;
  for (Family family : uniform.families) {
    sum[static_cast<std::size_t>(family)].assign(static_cast<std::size_t>(cellCount(family, grid.grid1d, grid.grid2d)), 0.0);
  }
  for (const std::vector<Curve>& run : runs) {
    masses.push_back(runCellMass(run, uniform, fit, grid));
    for (std::size_t f = 0; f < sum.size(); ++f) {
      for (std::size_t i = 0; i < sum[f].size(); ++i) sum[f][i] += masses.back()[f][i];
    }
  }
  ModelOptions learned = uniform;
  learned.stepScale = 0;
  learned.shapePrior = shapePriorFrom(grid, uniform.families, sum, runCount, pc);
  if (options.recalibrationFractions.empty()) return learned;

  // Recalibration: every run's early part predicted under the priors learned from the other runs.
  std::vector<std::vector<double>> pits(options.recalibrationFractions.size());
  for (std::size_t r = 0; r < runs.size(); ++r) {
    CellMass others = sum;
    for (std::size_t f = 0; f < others.size(); ++f) {
      for (std::size_t i = 0; i < others[f].size(); ++i) others[f][i] = std::max(others[f][i] - masses[r][f][i], 0.0);
    }
    ModelOptions without = learned;
    without.shapePrior = shapePriorFrom(grid, uniform.families, others, runCount - 1, pc);
    if (options.learnGainScale) {
      double rest = 0;
      for (std::size_t s = 0; s < squares.size(); ++s) rest += s == r ? 0.0 : squares[s];
      without.gainHeadroomSd = std::sqrt((pc * k0 * k0 + rest) / (pc + runCount - 1));
    }
    for (std::size_t i = 0; i < options.recalibrationFractions.size(); ++i) {
      std::vector<std::size_t> kept;
      const std::vector<Curve> early = earlyPart(runs[r], options.recalibrationFractions[i], kept);
      if (early.empty()) continue;
      const Posterior posterior = fitFast(early, without, fit);
      for (std::size_t c = 0; c < early.size(); ++c) {
        const Curve& full = runs[r][kept[c]];
        const double pit = posterior.predictive(c, full.steps.back()).cdf(full.values.back());
        pits[i].push_back(std::clamp(pit, 1e-6, 1.0 - 1e-6));  // a value outside the band keeps a finite density
      }
    }
  }
  auto recalibration = std::make_shared<Recalibration>();
  for (std::size_t i = 0; i < pits.size(); ++i) {
    const std::array<double, 2> ab = pits[i].size() >= 10 ? detail::fitBeta(pits[i]) : std::array<double, 2>{1.0, 1.0};
    recalibration->fractions.push_back(options.recalibrationFractions[i]);
    recalibration->a.push_back(ab[0]);
    recalibration->b.push_back(ab[1]);
    recalibration->counts.push_back(pits[i].size());
  }
  learned.recalibration = std::move(recalibration);
  return learned;
}

}  // namespace adaprec::predictor
