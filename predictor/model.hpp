// Internal pieces shared by the fast posterior, the MCMC reference and the predictive: normalised data,
// the family bases, the closed-form per-curve marginal likelihood and the posterior mixture layout.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "adaprec/predictor.hpp"

namespace adaprec::predictor::detail {

inline constexpr double kLog2Pi = 1.8378770664093454836;

// One curve after normalisation: x = step / stepScale, tau = known binomial variance (0 without n), at
// the accuracy pooled over the curves with counts at that step.
struct CurveData {
  std::vector<double> x, y, tau;
  std::vector<int> xIndex;  // per point: its x's position in Data::distinctX
  bool hasCounts = false;
  double lastCount = 0;  // sample count of the last point (0 without counts)
};

struct Data {
  double stepScale = 1;
  std::vector<double> binomialScales;  // the model's list with counts, {1} without (lambda is moot)
  std::vector<CurveData> curves;
  // The distinct x of all curves, ascending: related curves are usually evaluated at the same steps,
  // so fitFast computes the basis once per distinct step instead of once per curve point.
  std::vector<double> distinctX;
  // Per distinct x: the (curve, point) pairs observed there. The shared noise term s_t couples exactly these.
  std::vector<std::vector<std::pair<int, int>>> pointsAt;
  std::vector<double> sharedSds;  // the model's tau values
  // Every curve has the same steps and the same per-point variances (counts): the across-curve mean
  // and the contrasts then decouple (symmetricEvidence), which is fitFast's fast path.
  bool symmetric = false;
  // The schedule-aware model (ModelOptions::lrSchedule). Per distinct x: the basis argument
  // S1(step) / S1(stepScale) (exactly distinctX without a schedule) and the annealing regressor
  // S2(step) / S1(stepScale) (0 without). annealingGains: the nodes of the shared annealing coefficient c,
  // equal prior weight each ({0} without a schedule or when it never anneals). forwardScale: S1(stepScale).
  std::vector<double> basisX, annealing, annealingGains;
  std::shared_ptr<const LrSchedule> schedule;
  double forwardScale = 0, annealingMomentum = 0;
};

Data prepareData(const std::vector<Curve>& curves, const ModelOptions& model);

// The basis argument and the annealing regressor of a step (Data::basisX, Data::annealing for any step).
std::array<double, 2> scheduleCoordinates(const Data& data, double step);
// The data with every observation shifted by -c * annealing: given c, the rest of the model is today's.
Data withoutAnnealing(const Data& data, double c);

// The gain prior's sd under ModelOptions::gainHeadroomSd, given the mean first value.
double headroomGainSd(double gainHeadroomSd, double firstValueMean);
// The model with the headroom gain prior turned into the fixed one it stands for on these (validated)
// curves (gainMean 0, gainSd from headroomGainSd, gainHeadroomSd 0); unchanged with the fixed prior.
// Every fit resolves it first, so the evidence, the samplers and the predictive see one fixed prior.
ModelOptions resolveGainPrior(const ModelOptions& model, const std::vector<Curve>& curves);

// Nonlinear parameters from unit coordinates u in [0,1]^2 (the prior is uniform in u): kappa is
// log-uniform over the family's range, alpha uniform. One-parameter families ignore u[1].
std::array<double, 2> familyTheta(Family family, double u0, double u1);
// The inverse of familyTheta: unit coordinates of theta (u1 = 0.5 for one-parameter families).
std::array<double, 2> familyUnit(Family family, const std::array<double, 2>& theta);

// The model's prior over the shape, as a density of (family, u) on each family's unit square (interval)
// times the family's probability: uniform over ModelOptions::families, or the learned ShapePrior
// restricted to them and renormalised (piecewise constant per cell). Built once per fit.
class ShapeDensity {
 public:
  explicit ShapeDensity(const ModelOptions& model);
  bool uniform() const { return !prior_; }
  // log p(family, u0, u1); -inf for a family outside the model or a cell without mass. One-parameter
  // families ignore u1 (uniform on [0, 1]).
  double logDensity(Family family, double u0, double u1) const;
  // logDensity minus the uniform prior's (so exactly 0 under the uniform prior, for a family of the
  // model): what the samplers add to their targets, which need it only up to a constant.
  double logRelative(Family family, double u0, double u1) const;
  // A draw of (family, u0, u1). The uniform prior draws exactly as the code before learned priors did.
  void sample(std::mt19937_64& rng, Family& family, double& u0, double& u1) const;

 private:
  std::vector<Family> families_;
  std::shared_ptr<const ShapePrior> prior_;
  std::array<std::vector<double>, kFamilyCount> logDensity_;  // per cell: log(mass / total * cell count)
  std::vector<std::pair<double, std::pair<int, int>>> cumulative_;  // (cumulative mass, (family, cell))
};

// The basis g(x; theta) in [0, 1] (1 only by rounding once saturated), non-decreasing in x >= 0.
double basis(Family family, const std::array<double, 2>& theta, double x);

// The Beta distribution as the recalibration map (beta_distribution.cpp): CDF (regularized incomplete
// beta), log density, quantile, and a maximum-likelihood fit to values in (0, 1).
double betaCdf(double x, double a, double b);
double betaLogPdf(double x, double a, double b);
double betaQuantile(double p, double a, double b);
std::array<double, 2> fitBeta(const std::vector<double>& values);

// g(1; theta), the part of the gain b reached at x = 1 (ModelOptions::gainAtStepScale), at least 1e-12.
double gainScale(Family family, const std::array<double, 2>& theta);
// What b is multiplied by to give the coefficient the gain prior is on: g(1; theta) with
// gainAtStepScale, else 1. Every fit, sampler and the prior sampler convert through this.
double priorGainScale(const ModelOptions& model, Family family, const std::array<double, 2>& theta);

// Basis values at every Data::distinctX for one (family, theta) at a time. What depends only on the
// family and kappa (log(x / kappa) or log1p(x / kappa)) is kept across calls with the same family and
// kappa, which is how fitFast walks its grid (alpha innermost). Equal to basis() up to rounding.
class BasisTable {
 public:
  explicit BasisTable(const std::vector<double>& distinctX);
  const std::vector<double>& values(Family family, const std::array<double, 2>& theta);

 private:
  std::vector<double> x_, logX_, inner_, g_;
  int family_ = -1;
  double kappa_ = 0;
};

// Gaussian posterior of one curve's (a, b) and its log marginal likelihood, given the basis values and
// the total per-point variance. The b >= 0 truncation is included: logEvidence is the evidence under
// the truncated prior and (muB, varB) are moments of the truncated posterior of b.
struct CurveFit {
  double logEvidence = 0;
  double meanA = 0, meanB = 0;      // untruncated posterior mean
  double covAA = 0, covAB = 0, covBB = 0;
};

// Weighted sufficient statistics of one curve for a given basis and noise: w_i = 1/variance_i;
// sums of w, w g, w g^2, w y, w y g, w y^2, the point count and sum of log variance_i.
struct Sums {
  double w = 0, wg = 0, wgg = 0, wy = 0, wyg = 0, wyy = 0, count = 0, logVariance = 0;
};
// The prior's constants in the evidence, computed once per fit instead of once per grid cell.
struct EvidencePrior {
  double precA = 0, precB = 0, meanA = 0, meanB = 0;
  double constant = 0;  // -1/2 (m0'V0^-1 m0 + log|V0|) - log P(b >= 0)
};
EvidencePrior evidencePrior(const ModelOptions& model);
// Closed-form evidence p(y | family, theta, sigma) with (a, b) integrated under the truncated prior.
CurveFit curveEvidence(const Sums& sums, const EvidencePrior& prior);
inline CurveFit curveEvidence(const Sums& sums, const ModelOptions& model) {
  return curveEvidence(sums, evidencePrior(model));
}

// With a shared noise term s_t ~ N(0, tau^2) per step, the curves observed at one step are correlated
// (covariance D_t + tau^2 11'), so the coefficients of all curves form one 2C-dimensional Gaussian
// regression. The b_c >= 0 truncation enters per curve: the evidence is multiplied by
// prod_c P(b_c >= 0 | y) / P(b_c >= 0) with the posterior *marginals* of the b_c (exact for tau = 0, where the
// curves are independent; the orthant probability of correlated b_c is approximated by the product).
// jointEvidence: any layout (curves at different steps), dense 2C x 2C algebra. g holds the basis at
// every Data::distinctX. marginals (if given) receive each curve's untruncated Gaussian posterior.
double jointEvidence(const Data& data, const EvidencePrior& prior, const std::vector<double>& g, double sigma,
                     double binomialScale, double sharedSd, std::vector<CurveFit>* marginals = nullptr);

// The same for Data::symmetric (C curves at the same T steps, per-step variance v_t): rotating each step's
// C observations into their mean and C-1 orthonormal contrasts, the contrasts do not see s_t and share one
// 2x2 posterior precision; the mean sees v_t / C + tau^2. Sums over the steps, w_t = 1 / v_t,
// wm_t = 1 / (v_t + C tau^2), ybar_t the mean over the curves:
struct SymmetricSums {
  double count = 0, w = 0, wg = 0, wgg = 0, logVariance = 0;  // sum 1, w, w g, w g^2, log v_t
  double wyy = 0;       // sum over curves and steps of w y^2
  double wyMeanSq = 0;  // sum w ybar^2
  std::vector<double> wy, wyg;  // per curve: sum w y_c, sum w g y_c
  double mw = 0, mwg = 0, mwgg = 0, mwy = 0, mwyg = 0, mwyy = 0, mLogVariance = 0;  // with wm_t and ybar_t
};
// Log evidence (as jointEvidence) and, if given, each curve's untruncated marginal posterior. If the
// evidence without the truncation factors P(b_c >= 0 | y) <= 1 (an upper bound) is below floor, that
// bound is returned at once and marginals are left as they are (fitFast: the cell cannot matter).
double symmetricEvidence(const SymmetricSums& sums, const EvidencePrior& prior, std::vector<CurveFit>* marginals,
                         double floor = -std::numeric_limits<double>::infinity());
// The contrast part depends on the sums with w_t only, not on tau: fitFast computes it once per noise
// node and reuses it for every tau value.
struct SymmetricContrasts {
  double logEvidence = 0;
  double i00 = 0, i01 = 0, i11 = 0;  // A^-1
  double rBar0 = 0, rBar1 = 0;       // mean over the curves of (sum w y_c, sum w g y_c)
};
// A 2x2 posterior precision's inverse and log determinant: the contrasts' A (from w, wg, wgg) or the
// mean direction's B (from mw, mwg, mwgg). Neither depends on the observations, so fitFast computes them
// once per theta and noise cell and shares them across the annealing nodes (whose sums differ only in
// the observations, y - c S2).
struct SymmetricInverse {
  double i00 = 0, i01 = 0, i11 = 0;
  double logDet = 0;
};
SymmetricInverse contrastInverse(const SymmetricSums& sums, const EvidencePrior& prior);
SymmetricInverse meanInverse(const SymmetricSums& sums, const EvidencePrior& prior);
// contrastInverse(sums, prior) given.
SymmetricContrasts symmetricContrasts(const SymmetricSums& sums, const SymmetricInverse& inverse);
// symmetricEvidence above from its parts: the contrasts (symmetricContrasts), the mean direction's
// inverse (meanInverse(sums, prior)), and the per-curve sums (wy, wyg) taken from `curves`, everything
// else from `sums`. The per-curve sums do not depend on tau either, so fitFast keeps them in each noise
// node's first cell only (the cells of one node's tau values differ only in the mean direction's sums).
double symmetricEvidence(const SymmetricSums& sums, const SymmetricSums& curves, const EvidencePrior& prior,
                         const SymmetricContrasts& contrasts, const SymmetricInverse& mean,
                         std::vector<CurveFit>* marginals, double floor);
// The sums by their definition, point by point (fitFast forms them faster, per grid node).
SymmetricSums symmetricSums(const Data& data, const std::vector<double>& g, double sigma, double binomialScale,
                            double sharedSd);

// Standard normal helpers that stay finite in the tails.
double normalCdf(double z);
double logNormalCdf(double z);
double normalPdf(double z);
// Mean and variance of N(m, s^2) truncated to [0, inf).
void truncatedMoments(double m, double s, double& mean, double& var);

// Per-curve predictive coefficients of one mixture component: the latent value at basis value g is
// c0 + (r + g) * b + N(0, varCond) with b having mean muB and variance varB (independent of the
// Gaussian term). MCMC samples are point masses: r = varB = varCond = 0.
struct CurveCoef {
  double c0 = 0, r = 0, muB = 0, varB = 0, varCond = 0;
};

struct PosteriorState {
  Data data;
  ModelOptions model;
  std::vector<double> weight;          // per component, sums to 1
  std::vector<Family> family;          // per component
  std::vector<std::array<double, 2>> theta;
  std::vector<double> noiseSd;
  std::vector<double> binomialScale;   // lambda per component
  std::vector<double> sharedSd;        // tau per component
  std::vector<double> annealingGain;   // c per component (0 without a schedule)
  std::vector<CurveCoef> coef;         // component k, curve c at k * curveCount + c
};

// fitFast()'s posterior state (learnPriorFromRuns reads its components).
std::shared_ptr<PosteriorState> fastPosteriorState(const std::vector<Curve>& curves, const ModelOptions& model,
                                                   const FastOptions& options);

// The two MCMC references behind fitMcmc() (mcmc_collapsed.cpp, mcmc_ensemble.cpp).
Posterior fitCollapsedMcmc(const std::vector<Curve>& curves, const ModelOptions& model, const McmcOptions& options);
Posterior fitEnsembleMcmc(const std::vector<Curve>& curves, const ModelOptions& model, const McmcOptions& options);

// Appends one posterior sample as a point-mass component (weights are set by the caller).
void addSample(PosteriorState& state, Family family, const std::array<double, 2>& theta, double noiseSd,
               double binomialScale, double sharedSd, const std::vector<double>& start,
               const std::vector<double>& gain, double annealingGain = 0.0);

// Converts a Gaussian (a, b) posterior into predictive coefficients under the b >= 0 truncation.
CurveCoef coefFromGaussian(double meanA, double meanB, double covAA, double covAB, double covBB);

}  // namespace adaprec::predictor::detail
