// Bayesian learning-curve prediction: given the first points of one or several related learning curves
// (validation accuracy in [0, 1] against training step), predict later values with uncertainty.
//
// The model (docs/predictor.md): every curve is value(step) = a_c + b_c * g(step / stepScale; theta),
// where g is an increasing basis in [0, 1) from one of several parametric families (pow3, log-power,
// vapor pressure, Weibull/Janoschek, ilog2), theta (1-2 nonlinear parameters) and the extra noise scale
// are shared by all curves of a fit, and a_c (start) and b_c >= 0 (gain) belong to curve c. Observations
// carry Gaussian noise of variance sigma^2 (+ lambda p(1-p)/n when sample counts n are given; lambda
// <= 1 because a fixed validation set makes successive evaluations fluctuate less than independent
// binomial draws), plus a term s_t ~ N(0, tau^2) shared by every curve observed at the same step t
// (branches of one checkpoint see the same batches and the same validation images, so their dips
// coincide); a prediction of a later step includes a fresh s_t.
//
// fitFast() integrates (a_c, b_c) and the shared terms in closed form and (family, theta, sigma, lambda,
// tau) on a quadrature grid: a posterior mixture in milliseconds. fitMcmc() samples the same posterior
// by MCMC and is the reference fitFast() is validated against. Both return a Posterior whose predictive
// distributions are mixtures of Gaussians truncated to [0, 1].
//
// Invalid input (no curves, an empty curve, unsorted or negative steps, values outside [0, 1], counts
// <= 0, non-finite numbers) raises adaprec::Error with kInvalidArgument; readCurvesCsv() raises
// kMalformedInput naming the offending line. No function returns NaN.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace adaprec::predictor {

// One learning curve. steps strictly increasing and >= 0; values in [0, 1]; sampleCounts empty or one
// count > 0 per point (the number of evaluation samples behind each value: binomial noise).
struct Curve {
  std::vector<double> steps;
  std::vector<double> values;
  std::vector<double> sampleCounts;
};

// Parametric families of the basis g(x; theta), x = step / stepScale. All are 0 at x = 0 and increase
// towards 1 (ilog2 only logarithmically slowly). Log-power and MMF coincide once an offset is allowed,
// as do Weibull and Janoschek; both pairs are one family here.
enum class Family : int {
  kPow3 = 0,           // 1 - (1 + x/kappa)^-alpha
  kLogPower = 1,       // 1 / (1 + (x/kappa)^-alpha)          (Hill / MMF)
  kVaporPressure = 2,  // exp(-kappa / x)
  kWeibull = 3,        // 1 - exp(-(x/kappa)^alpha)           (Janoschek)
  kIlog2 = 4,          // 1 - 1 / ln(e + x/kappa)
};
inline constexpr int kFamilyCount = 5;

const char* familyName(Family family);
// Parses a name printed by familyName(); kInvalidArgument for anything else.
Family familyFromName(const std::string& name);
std::vector<Family> allFamilies();
// Number of nonlinear parameters (kappa, then alpha when 2).
int familyParameterCount(Family family);

// A learning-rate schedule over training steps (the same steps the curves use), relative to its peak
// (file: as written). Parsed from exactly these forms (kInvalidArgument, one line, for anything else):
//   constant                lr = 1
//   cosine:TOTAL            lr = 1/2 (1 + cos(pi min(step, TOTAL) / TOTAL))
//   cosine:TOTAL:WARMUP     lr = step / WARMUP below WARMUP, then the cosine over [WARMUP, TOTAL]
//   poly:TOTAL:POWER        lr = (1 - min(step, TOTAL) / TOTAL)^POWER
//   step:GAMMA:S1,S2,...    lr = GAMMA^(number of listed steps <= step); S1 < S2 < ... > 0
//   file:PATH               CSV rows `step,lr` (optional header `step,lr`, '#' comments), steps increasing
//                           and >= 0, lr finite >= 0 and not all 0; linear between rows, the first row's
//                           lr before it and the last row's after it.
// TOTAL > 0 and integer-valued counts are not required; WARMUP in [0, TOTAL), POWER > 0, GAMMA in (0, 1].
class LrSchedule {
 public:
  static LrSchedule parse(const std::string& spec);
  // The file form from sampled points (a trainer's rates at some steps, as the controller collects
  // them): the same rules and the same interpolation as `file:` rows, without the file; spec() is
  // "points:N" (N points; not a form parse() reads). kInvalidArgument, one line naming the point, for
  // unequal lengths, no points, a non-finite or negative step or lr, non-increasing steps, or all lr 0.
  static LrSchedule fromPoints(const std::vector<double>& steps, const std::vector<double>& lrs);
  const std::string& spec() const { return spec_; }
  double lrAt(double step) const;
  // The largest rate: 1 for the analytic forms, the largest row for file and points. A trainer whose
  // peak rate is P runs at P * lrAt(step) / peak().
  double peak() const;
  // The annealing areas of Tissue et al. (2024), "Scaling law with learning rate annealing", at a step
  // (after `step` updates, update i taken at lr(i); a fractional step interpolates linearly):
  //   forward area    S1(s) = sum_{i < s} lr(i)
  //   annealing area  S2(s) = sum_{1 <= i < s} m_i,  m_i = momentum m_{i-1} + max(lr(i-1) - lr(i), 0)
  // (warm-up increases do not count). Cost: O(step) (one pass over the integer steps), so steps are
  // at most kMaxAreaStep (Error(kInvalidArgument) beyond). In the rates' own units: beyond double's
  // range (Inf) for rates near 1e308 summed over many steps.
  static constexpr double kMaxAreaStep = 1e9;
  std::array<double, 2> areas(double step, double momentum) const;
  // The same areas divided by the largest power of two <= peak(), exactly (a power of two scales every
  // sum without rounding): finite for any rates a schedule accepts, and ratios of two of them equal
  // those of areas() bit for bit. The model reads only such ratios.
  std::array<double, 2> scaledAreas(double step, double momentum) const;
  // Whether lr never decreases (constant, or a file without decreases): then S2 = 0 everywhere.
  bool neverAnneals() const;
  // The first step from which lr is 0 for good (cosine and poly: TOTAL; a file: the first row of its
  // final run of zero rows), +infinity when it never is (constant, step, a file ending above 0). Updates
  // from there change nothing, so the model holds every curve flat after it: a curve observed past it
  // that still moves was trained under another schedule (often TOTAL given in epochs, steps in steps).
  double zeroFrom() const;

 private:
  enum class Kind { kConstant, kCosine, kPoly, kStep, kFile };
  Kind kind_ = Kind::kConstant;
  std::string spec_ = "constant";
  double total_ = 0, warmup_ = 0, power_ = 0, gamma_ = 1;
  std::vector<double> steps_, lrs_;  // step milestones, or the file's rows
};
// The annealing momentum lambda of S2: Tissue et al.'s value.
inline constexpr double kAnnealingMomentum = 0.999;

struct ShapePrior;
struct Recalibration;

// The prior. Both fit functions use exactly this model.
struct ModelOptions {
  std::vector<Family> families = allFamilies();  // equal prior weight each (unless shapePrior is set)
  double startMean = 0.3;   // a_c ~ N(startMean, startSd^2): value extrapolated to step 0
  double startSd = 0.4;
  // b_c (asymptote - start) has a half-normal prior scaled by the headroom above the curves' first values:
  // b_c ~ N(0, (gainHeadroomSd * h)^2) truncated to b_c >= 0, h = 1 - (mean over the curves of their first
  // value), at least kMinHeadroom. An accuracy cannot gain more than its headroom; at 0.7 the asymptote
  // stays below 1 with 85% prior probability. With the controller's anchor (the checkpoint's evaluation
  // at step 0) the first value is the checkpoint's accuracy. An empirical-Bayes choice: one number of the
  // data sets the scale, measured in docs/predictor.md. gainHeadroomSd = 0 selects the fixed prior
  // b_c ~ N(gainMean, gainSd^2) truncated to b_c >= 0 instead.
  double gainHeadroomSd = 0.7;
  double gainMean = 0.3;
  double gainSd = 0.4;
  // false: the gain prior above is on b, the gain up to the asymptote. true: it is on b * g(1; theta),
  // the gain reached at step = stepScale (the horizon a prediction is about), whatever the shape: a
  // slowly bending shape then cannot claim a large rise by the horizon just because its asymptote is far.
  bool gainAtStepScale = false;
  double noiseMin = 1e-3;   // sigma log-uniform on [noiseMin, noiseMax]
  double noiseMax = 0.3;
  // lambda, uniform over these values, scales the binomial variance p(1-p)/n (used only with counts).
  std::vector<double> binomialScales = {0.25, 0.5, 1.0};
  // tau, the sd of the noise shared by all curves observed at one step, uniform over these values (>= 0,
  // distinct; {0} gives independent noise per curve). The binomial variance of a point then uses the
  // pooled accuracy of all curves with counts at its step.
  std::vector<double> sharedNoiseSds = {0.0, 0.005, 0.01, 0.02, 0.04};
  // Steps are divided by stepScale; 0 means "the largest observed step". kappa ranges (docs) are in
  // these units, so the default adapts the prior to the observed window.
  double stepScale = 0.0;
  // A prior over (family, theta) learned from finished related runs (learnPriorFromRuns) instead of the
  // uniform one; restricted to `families` and renormalised. Steps are then divided by its stepScale
  // (stepScale above must be 0 or equal), because its cells are shapes in those units.
  std::shared_ptr<const ShapePrior> shapePrior;
  // Not part of the prior: a map of the predictive CDF learned from finished runs (learnPriorFromRuns),
  // applied by Posterior::predictive to every prediction beyond a curve's last observed step.
  std::shared_ptr<const Recalibration> recalibration;
  // With an lrSchedule that anneals (not neverAnneals()), neither recalibration nor shapePrior set (the
  // priors it was learned under):
  // Posterior::predictive maps the CDF through scheduleRecalibration(), learned from real annealed
  // curves (docs/predictor.md: the schedule-aware bands are too wide by a stable amount). false: the
  // model's own predictive.
  bool scheduleRecalibration = true;
  // The learning-rate schedule the curves were trained under (none: the model above, exactly). With one,
  // the basis is evaluated at the forward area instead of the step, x = S1(step) / S1(stepScale), and
  // an annealing term c * S2(step) / S1(stepScale) is added to every curve (docs/predictor.md): c >= 0
  // is shared by the curves of a fit (like the shape), with a half-normal prior of sd annealingHeadroomSd
  // times the headroom h of the gain prior, integrated on annealingNodes equal-mass nodes. The annealing
  // momentum of S2 is annealingMomentum. Not supported by McmcMethod::kEnsemble and samplePrior.
  std::shared_ptr<const LrSchedule> lrSchedule;
  double annealingHeadroomSd = 0.05;  // chosen on the tuning curves (docs/predictor.md)
  int annealingNodes = 3;  // as good as 5 on the tuning curves at ~60% of the cost (docs/predictor.md)
  double annealingMomentum = kAnnealingMomentum;
  void check() const;
  // The map Posterior::predictive applies: recalibration, else the schedule's default (see
  // scheduleRecalibration above), else none.
  const Recalibration* appliedRecalibration() const;
};
inline constexpr double kMinHeadroom = 0.02;

// Quadrature of the fast posterior.
struct FastOptions {
  int grid1d = 40;          // nodes for one-parameter families
  int grid2d = 16;          // nodes per dimension for two-parameter families
  int noiseGrid = 12;       // nodes over log sigma
  int noiseGridWithCounts = 5;  // the same when sample counts are given (times binomialScales)
  int refineLevels = 2;     // times the heaviest cells are split 3 ways per coordinate
  int refineCells = 24;     // cells split per level, at most
  double refineMass = 0.98; // split the heaviest cells holding this much posterior mass
  double dropMass = 5e-4;   // posterior mass of the lightest components dropped after the fit
  void check() const;
};

// The MCMC reference. kCollapsed: random-walk Metropolis over (family, theta, log sigma, lambda, tau) on the
// closed-form evidence, with every curve's (a, b) drawn exactly from its conditional posterior for each kept sample
// (well mixing; validates the quadrature, pruning and mixture). kEnsemble: affine-invariant ensemble
// sampler (Goodman & Weare stretch move, as Domhan et al.) on all parameters, only the shared noise
// terms integrated out (validates the closed forms, including the per-curve treatment of the b >= 0
// truncation, but mixes slowly across families; it requires exactly one ModelOptions::sharedNoiseSds
// value, because switches of tau at fixed coefficients do not mix).
enum class McmcMethod : int { kCollapsed = 0, kEnsemble = 1 };

struct McmcOptions {
  McmcMethod method = McmcMethod::kCollapsed;
  int walkers = 0;          // chains (kCollapsed, 0: 8) or walkers (kEnsemble, 0: 4 * dimension, >= 32)
  int iterations = 4000;    // per chain or walker, burn-in included
  int burnIn = 1000;
  int thin = 2;
  int maxSamples = 4000;    // samples kept (evenly spread) as the posterior mixture
  std::uint64_t seed = 1;
  void check() const;
};

struct PredictOptions {
  // true: the distribution of a future observation (latent curve + noise); false: the latent curve.
  bool observationNoise = true;
  // false: the model's own predictive, without the recalibration map (ModelOptions::recalibration or
  // the schedule's default) that would otherwise apply.
  bool recalibrated = true;
  // Sample count behind the future observation; < 0: the curve's last count (none if it had none).
  double sampleCount = -1.0;
};

// mean, sd and quantiles describe the predictive distribution (truncated to [0, 1]). curveMean is the
// posterior mean of the noise-free curve before truncation, clamped to [0, 1]: non-decreasing in the
// step by construction (every component has gain b >= 0 and fixed weight). mean can dip slightly below
// a previous step's mean close to 1, where a growing sd loses more mass to the truncation.
struct Prediction {
  double step = 0, mean = 0, sd = 0, q05 = 0, q50 = 0, q95 = 0, curveMean = 0;
};

// A mixture of Gaussians truncated to [0, 1] (renormalised). Every accessor returns a finite number.
class Predictive {
 public:
  Predictive(std::vector<double> weights, std::vector<double> means, std::vector<double> sds);
  double mean() const { return mean_; }
  double sd() const { return sd_; }
  // Mean of the mixture before truncation, clamped to [0, 1].
  double untruncatedMean() const { return untruncatedMean_; }
  double cdf(double y) const;
  double quantile(double p) const;  // p in (0, 1): bisection on cdf()
  double logDensity(double y) const;
  double crps(double y) const;  // continuous ranked probability score (lower is better)
  std::size_t componentCount() const { return weights_.size(); }
  // This predictive with its CDF F mapped through the Beta(a, b) CDF B: cdf B(F(y)), density
  // b(F(y)) f(y), quantile F^-1(B^-1(p)); mean and sd by quadrature. a = b = 1 changes nothing;
  // a, b > 1 narrow the distribution (Recalibration).
  Predictive recalibrated(double a, double b) const;

 private:
  // cdf and density of the untruncated mixture at y, relative to the truncation's lower end.
  void evaluate(double y, double& cdf, double& density) const;
  bool mapped() const { return mapA_ != 1 || mapB_ != 1; }
  // The mixture alone (what the map is applied to).
  double mixtureCdf(double y) const;
  // mixtureCdf at lo, lo + h, ... (out.size() points) with a tabulated Phi (to 2e-10): for moments.
  void mixtureCdfGrid(double lo, double h, std::span<double> out) const;
  double mixtureQuantile(double p) const;
  double mixtureLogDensity(double y) const;
  // P(0 <= X_k <= y) for z = (y - mean_k) / sd_k, computed where it does not cancel.
  double componentCdf(std::size_t k, double z) const;

  std::vector<double> weights_, means_, sds_;
  // Per component: P(X_k <= 0), or, for a component whose mean is below 0 (all of [0, 1] in its upper
  // tail, where Phi(z) - Phi(alpha) cancels to 0 - 0 = 1 - 1), -P(X_k > 0): the sign tells which.
  std::vector<double> lower_;
  double mapA_ = 1, mapB_ = 1;  // the Beta map of the CDF (1, 1: none)
  double mass_ = 0, mean_ = 0, sd_ = 0, untruncatedMean_ = 0;
  bool degenerate_ = false;  // no mass inside [0, 1]: a point mass at mean_
};

struct PosteriorSummary {
  std::array<double, kFamilyCount> familyWeights{};
  double noiseSdMean = 0;
  double binomialScaleMean = 1;  // posterior mean of lambda (1 without sample counts)
  double sharedNoiseSdMean = 0;  // posterior mean of tau
  std::vector<double> startMean, gainMean, asymptoteMean, asymptoteSd;  // per curve
  std::size_t componentCount = 0;
};

namespace detail {
struct PosteriorState;
}

class Posterior {
 public:
  explicit Posterior(std::shared_ptr<const detail::PosteriorState> state);
  std::size_t curveCount() const;
  double stepScale() const;
  Predictive predictive(std::size_t curve, double step, const PredictOptions& options = {}) const;
  // mean, sd and the 5/50/95% quantiles of predictive().
  Prediction predict(std::size_t curve, double step, const PredictOptions& options = {}) const;
  PosteriorSummary summary() const;
  // Posterior means given the family: kappa as a geometric mean, alpha arithmetic (0 for one-parameter
  // families); kInvalidArgument if the family has no posterior weight.
  std::array<double, 2> familyParameterMean(Family family) const;

 private:
  std::shared_ptr<const detail::PosteriorState> state_;
};

Posterior fitFast(const std::vector<Curve>& curves, const ModelOptions& model = {},
                  const FastOptions& options = {});
Posterior fitMcmc(const std::vector<Curve>& curves, const ModelOptions& model = {},
                  const McmcOptions& options = {});

// A prior over the curve shape learned from finished runs of related training jobs (the cross-run
// sharing of Klein et al.'s LC-Net, in the form this model can use): the probability of every cell of
// the family's unit square (u0 = position of log10 kappa in its range, u1 = of alpha; see
// docs/predictor.md), piecewise constant within a cell. With it, a few points of a new run are read
// against the shapes earlier runs took over their whole length instead of every shape the families allow.
struct ShapePrior {
  double stepScale = 1;  // steps per unit of x the shapes are defined in (the corpus' last step)
  int grid1d = 40;       // cells of one-parameter families
  int grid2d = 16;       // cells per coordinate of two-parameter families (u0 major)
  std::array<std::vector<double>, kFamilyCount> cellMass;  // per family: grid1d or grid2d^2 masses, or empty (none)
  std::size_t runCount = 0;  // runs it was learned from (informational)
  void check() const;        // sizes, finite non-negative masses summing to 1, stepScale > 0
};

// A map of predictive CDFs learned from finished runs: where the model's predictive bands are too wide
// (or narrow) by a stable amount, the CDF F of a prediction is replaced by B(F), B the CDF of a
// Beta(a, b) fitted by maximum likelihood to the PITs F(y) of the runs' own final values predicted from
// their early points (quantile recalibration, Kuleshov et al. 2018, with a smooth map). The map
// depends on how far a prediction reaches: the fraction f = (last observed step) / (predicted step).
// (a, b) are interpolated linearly in log f between the learned fractions, kept at the first below
// it, and interpolated to the identity (1, 1) at f = 1 above the last.
struct Recalibration {
  std::vector<double> fractions;  // ascending, in (0, 1)
  std::vector<double> a, b;       // Beta parameters per fraction, > 0
  std::vector<std::size_t> counts;  // PITs each was fitted to (informational)
  // The evaluations per whole run of the curves the map was learned from (0: not known, the map applies
  // in full). A map learned on densely evaluated curves sharpens bands that are right for them and far
  // too narrow for a curve seen at a few points (docs/predictor.md, "Sparse curves"), so at(f, points)
  // fades it toward the identity for a curve with fewer points than such a curve had at that reach.
  double pointsPerRun = 0;
  void check() const;
  // The map's (a, b) at fraction f > 0.
  std::array<double, 2> at(double fraction) const;
  // The same for a curve observed at `points` points: log a and log b scaled by
  // w = (points - 1) / (N - 1), N = pointsPerRun x f, the points such a curve had by this reach: in full
  // from N points on, the identity at one point.
  std::array<double, 2> at(double fraction, std::size_t points) const;
};

// The map every schedule-aware fit uses by default (ModelOptions::scheduleRecalibration): Beta maps at
// fractions 0.2 and 0.4 fitted to the PITs of the final values of the 77 annealed curves of
// bench/predictor (schedule_curves_{trainer,torch}_{tune,heldout,fresh}.csv, two MLPs, cosine, step
// and poly schedules) predicted from those fractions of each curve by this model without a map.
// `adaprec-schedule-bench --check-default-map` refits it (a test: a model change that moves it fails).
const Recalibration& scheduleRecalibration();

struct RunPriorOptions {
  // Weight of the model's own prior, in runs: the learned shape prior is (pseudoCount * uniform + sum of
  // the runs' posteriors) / (pseudoCount + runs), the posterior predictive of a Dirichlet-process prior
  // centred on the uniform one, and the learned gain scale is shrunk to the model's at this weight. It
  // keeps every shape possible for a run unlike the corpus. > 0.
  double pseudoCount = 1.0;
  int grid1d = 40;  // cells of the learned shape prior (ShapePrior::grid1d, grid2d)
  int grid2d = 16;
  // Also learn the gain prior's headroom scale k (gainHeadroomSd; the model must use the headroom prior):
  // EM on k^2 = mean over runs of E[(gain / h)^2] under each run's posterior, the gain being b, or
  // b g(1) with gainAtStepScale.
  bool learnGainScale = true;
  // Learn a Recalibration at these fractions (empty: none): each run's curves are cut at fraction f of
  // their last step, fitted under the priors learned without that run, and the PIT of their last value
  // collected; a fraction with fewer than 10 PITs keeps the identity map.
  std::vector<double> recalibrationFractions = {0.1, 0.2, 0.4};
  void check() const;
};

// Learns the model's priors from finished runs of related training jobs (the cross-run sharing of Klein
// et al.'s LC-Net, in the form this model can use): each run (one or several curves, as fitFast takes
// them, seen to their end) is fitted with fitFast under `model` and the uniform shape prior, steps
// divided by model.stepScale or, when that is 0, by the largest step of all runs (the horizon later
// predictions are about). Returns `model` with shapePrior set to the runs' posterior mass over (family,
// theta) binned into cells, stepScale left to the shape prior, with options.learnGainScale the
// learned gainHeadroomSd, and with options.recalibrationFractions a Recalibration (ModelOptions::
// recalibration). A few points of a new run are then read against the shapes and gains earlier
// runs reached over their whole length. kInvalidArgument for no runs or invalid curves (naming the run).
ModelOptions learnPriorFromRuns(const std::vector<std::vector<Curve>>& runs, const ModelOptions& model = {},
                                const FastOptions& fit = {}, const RunPriorOptions& options = {});

// Checks one set of curves against the rules above (what the fit functions call first).
void validateCurves(const std::vector<Curve>& curves);

// CSV with a header naming `step` and `value` and optionally `curve` (a non-negative integer id), `n`
// (sample count) and `run` (a non-negative integer id grouping the curves of one run), in any order;
// blank lines and lines starting with '#' are skipped. Rows of one curve must come in increasing step
// order (curves may interleave); curves are returned in increasing (run, curve) order (id 0 for all rows
// without a curve or run column). Errors name the line (counting from 1) and raise kMalformedInput.
struct CurveTable {
  std::vector<Curve> curves;
  std::vector<long> ids;   // curve id of curves[i]
  std::vector<long> runs;  // run id of curves[i] (0 without a run column), ascending
};
CurveTable readCurvesCsv(std::istream& in);
// The curves of each run (the optional `run` column, an integer id; curves are keyed by (run, curve)),
// in increasing run order: the corpus learnPriorFromRuns() takes.
std::vector<std::vector<Curve>> curvesByRun(const CurveTable& table);

}  // namespace adaprec::predictor
