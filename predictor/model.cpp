// Data validation and normalisation, the family bases and the numerically careful normal helpers.
#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "adaprec/error.hpp"

namespace adaprec::predictor {

namespace {
struct FamilyInfo {
  const char* name;
  int parameterCount;
  double log10KappaLo, log10KappaHi;  // kappa log-uniform in 10^[lo, hi]
  double alphaLo, alphaHi;            // alpha uniform (two-parameter families)
};

// Ranges in units of the step scale (the last observed step by default): kappa from "saturates within
// the first percent of the window" to "barely bends before 10-30x the window"; alpha spans the shapes
// seen in practice without making g a step function.
constexpr FamilyInfo kFamilies[kFamilyCount] = {
    {"pow3", 2, -2.5, 1.5, 0.1, 3.0},
    {"log_power", 2, -2.5, 1.5, 0.3, 4.0},
    {"vapor_pressure", 1, -3.0, 1.3, 0.0, 0.0},
    {"weibull", 2, -2.5, 1.5, 0.3, 3.0},
    {"ilog2", 1, -3.0, 1.0, 0.0, 0.0},
};

const FamilyInfo& info(Family family) {
  const int index = static_cast<int>(family);
  ADAPREC_CHECK_ARG(index >= 0 && index < kFamilyCount, "unknown family " << index);
  return kFamilies[index];
}
}  // namespace

const char* familyName(Family family) { return info(family).name; }

Family familyFromName(const std::string& name) {
  for (int i = 0; i < kFamilyCount; ++i) {
    if (name == kFamilies[i].name) return static_cast<Family>(i);
  }
  ADAPREC_FAIL(ErrorCode::kInvalidArgument,
               "unknown family '" << name << "' (pow3, log_power, vapor_pressure, weibull, ilog2)");
}

std::vector<Family> allFamilies() {
  std::vector<Family> out;
  for (int i = 0; i < kFamilyCount; ++i) out.push_back(static_cast<Family>(i));
  return out;
}

int familyParameterCount(Family family) { return info(family).parameterCount; }

void ModelOptions::check() const {
  ADAPREC_CHECK_ARG(!families.empty(), "ModelOptions: at least one family is needed");
  for (std::size_t i = 0; i < families.size(); ++i) {
    info(families[i]);
    for (std::size_t j = 0; j < i; ++j) {
      ADAPREC_CHECK_ARG(families[i] != families[j],
                        "ModelOptions: family " << familyName(families[i]) << " listed twice");
    }
  }
  ADAPREC_CHECK_ARG(std::isfinite(startMean) && std::isfinite(gainMean),
                    "ModelOptions: prior means must be finite");
  ADAPREC_CHECK_ARG(startSd > 0 && gainSd > 0 && std::isfinite(startSd) && std::isfinite(gainSd),
                    "ModelOptions: prior sds must be > 0, got start " << startSd << " gain " << gainSd);
  ADAPREC_CHECK_ARG(gainHeadroomSd >= 0 && std::isfinite(gainHeadroomSd),
                    "ModelOptions: gainHeadroomSd must be finite and >= 0, got " << gainHeadroomSd);
  ADAPREC_CHECK_ARG(noiseMin > 0 && noiseMax > noiseMin && std::isfinite(noiseMax),
                    "ModelOptions: need 0 < noiseMin < noiseMax, got " << noiseMin << ", " << noiseMax);
  ADAPREC_CHECK_ARG(!binomialScales.empty(), "ModelOptions: binomialScales must not be empty");
  for (double scale : binomialScales) {
    ADAPREC_CHECK_ARG(std::isfinite(scale) && scale > 0, "ModelOptions: binomial scales must be > 0, got " << scale);
  }
  ADAPREC_CHECK_ARG(!sharedNoiseSds.empty(), "ModelOptions: sharedNoiseSds must not be empty (use {0})");
  for (std::size_t i = 0; i < sharedNoiseSds.size(); ++i) {
    ADAPREC_CHECK_ARG(std::isfinite(sharedNoiseSds[i]) && sharedNoiseSds[i] >= 0,
                      "ModelOptions: shared noise sds must be finite and >= 0, got " << sharedNoiseSds[i]);
    for (std::size_t j = 0; j < i; ++j) {
      ADAPREC_CHECK_ARG(sharedNoiseSds[i] != sharedNoiseSds[j],
                        "ModelOptions: shared noise sd " << sharedNoiseSds[i] << " listed twice");
    }
  }
  ADAPREC_CHECK_ARG(stepScale >= 0 && std::isfinite(stepScale),
                    "ModelOptions: stepScale must be >= 0, got " << stepScale);
  if (shapePrior) {
    shapePrior->check();
    ADAPREC_CHECK_ARG(stepScale == 0 || stepScale == shapePrior->stepScale,
                      "ModelOptions: stepScale " << stepScale << " differs from the shape prior's "
                                                 << shapePrior->stepScale << " (leave it 0)");
    double mass = 0;
    for (Family family : families) {
      for (double m : shapePrior->cellMass[static_cast<std::size_t>(family)]) mass += m;
    }
    ADAPREC_CHECK_ARG(mass > 0, "ModelOptions: the shape prior gives the selected families no mass");
  }
  if (recalibration) recalibration->check();
  ADAPREC_CHECK_ARG(annealingHeadroomSd >= 0 && std::isfinite(annealingHeadroomSd),
                    "ModelOptions: annealingHeadroomSd must be finite and >= 0, got " << annealingHeadroomSd);
  ADAPREC_CHECK_ARG(annealingNodes >= 1 && annealingNodes <= 64,
                    "ModelOptions: annealingNodes in [1, 64], got " << annealingNodes);
  ADAPREC_CHECK_ARG(annealingMomentum >= 0 && annealingMomentum < 1,
                    "ModelOptions: annealingMomentum in [0, 1), got " << annealingMomentum);
}

void FastOptions::check() const {
  ADAPREC_CHECK_ARG(grid1d >= 2 && grid1d <= 4096, "FastOptions: grid1d in [2, 4096], got " << grid1d);
  ADAPREC_CHECK_ARG(grid2d >= 2 && grid2d <= 256, "FastOptions: grid2d in [2, 256], got " << grid2d);
  ADAPREC_CHECK_ARG(noiseGrid >= 1 && noiseGrid <= 1024,
                    "FastOptions: noiseGrid in [1, 1024], got " << noiseGrid);
  ADAPREC_CHECK_ARG(noiseGridWithCounts >= 1 && noiseGridWithCounts <= 1024,
                    "FastOptions: noiseGridWithCounts in [1, 1024], got " << noiseGridWithCounts);
  ADAPREC_CHECK_ARG(refineLevels >= 0 && refineLevels <= 6, "FastOptions: refineLevels in [0, 6], got " << refineLevels);
  ADAPREC_CHECK_ARG(refineCells >= 1, "FastOptions: refineCells must be >= 1, got " << refineCells);
  ADAPREC_CHECK_ARG(refineMass > 0 && refineMass <= 1, "FastOptions: refineMass in (0, 1], got " << refineMass);
  ADAPREC_CHECK_ARG(dropMass >= 0 && dropMass < 0.5, "FastOptions: dropMass in [0, 0.5), got " << dropMass);
}

void McmcOptions::check() const {
  ADAPREC_CHECK_ARG(method == McmcMethod::kCollapsed || method == McmcMethod::kEnsemble,
                    "McmcOptions: unknown method " << static_cast<int>(method));
  ADAPREC_CHECK_ARG(method == McmcMethod::kCollapsed ? walkers >= 0 : (walkers == 0 || (walkers >= 4 && walkers % 2 == 0)),
                    "McmcOptions: walkers must be 0, a chain count, or (ensemble) an even number >= 4, got " << walkers);
  ADAPREC_CHECK_ARG(iterations > 0 && burnIn >= 0 && burnIn < iterations,
                    "McmcOptions: need 0 <= burnIn < iterations, got " << burnIn << ", " << iterations);
  ADAPREC_CHECK_ARG(thin >= 1, "McmcOptions: thin must be >= 1, got " << thin);
  ADAPREC_CHECK_ARG(maxSamples >= 1, "McmcOptions: maxSamples must be >= 1, got " << maxSamples);
}

void validateCurves(const std::vector<Curve>& curves) {
  ADAPREC_CHECK_ARG(!curves.empty(), "no curves given");
  for (std::size_t c = 0; c < curves.size(); ++c) {
    const Curve& curve = curves[c];
    ADAPREC_CHECK_ARG(!curve.steps.empty(), "curve " << c << " has no points");
    ADAPREC_CHECK_ARG(curve.steps.size() == curve.values.size(),
                      "curve " << c << ": " << curve.steps.size() << " steps but " << curve.values.size()
                               << " values");
    ADAPREC_CHECK_ARG(curve.sampleCounts.empty() || curve.sampleCounts.size() == curve.steps.size(),
                      "curve " << c << ": " << curve.sampleCounts.size() << " sample counts for "
                               << curve.steps.size() << " points");
    for (std::size_t i = 0; i < curve.steps.size(); ++i) {
      const double step = curve.steps[i];
      const double value = curve.values[i];
      ADAPREC_CHECK_ARG(std::isfinite(step) && step >= 0,
                        "curve " << c << " point " << i << ": step must be finite and >= 0, got " << step);
      ADAPREC_CHECK_ARG(i == 0 || step > curve.steps[i - 1],
                        "curve " << c << " point " << i << ": steps must increase, got " << curve.steps[i - 1]
                                 << " then " << step);
      ADAPREC_CHECK_ARG(std::isfinite(value) && value >= 0 && value <= 1,
                        "curve " << c << " point " << i << ": value must be in [0, 1], got " << value);
      if (!curve.sampleCounts.empty()) {
        const double n = curve.sampleCounts[i];
        ADAPREC_CHECK_ARG(std::isfinite(n) && n > 0,
                          "curve " << c << " point " << i << ": sample count must be > 0, got " << n);
      }
    }
  }
}

namespace detail {

double headroomGainSd(double gainHeadroomSd, double firstValueMean) {
  return gainHeadroomSd * std::max(1.0 - firstValueMean, kMinHeadroom);
}

ModelOptions resolveGainPrior(const ModelOptions& model, const std::vector<Curve>& curves) {
  ModelOptions out = model;
  if (model.gainHeadroomSd == 0 || curves.empty()) return out;
  double first = 0;
  for (const Curve& curve : curves) first += curve.values.front() / static_cast<double>(curves.size());
  out.gainMean = 0;
  out.gainSd = headroomGainSd(model.gainHeadroomSd, first);
  out.gainHeadroomSd = 0;
  return out;
}

Data prepareData(const std::vector<Curve>& curves, const ModelOptions& model) {
  validateCurves(curves);
  model.check();
  Data data;
  double last = 0;
  for (const Curve& curve : curves) last = std::max(last, curve.steps.back());
  // Without a prior's or an explicit scale, curves seen only at step 0 have no window: any unit is
  // arbitrary (1 step), and the annealing term below is dropped for them.
  const bool windowObserved = model.shapePrior || model.stepScale > 0 || last > 0;
  data.stepScale = model.shapePrior  ? model.shapePrior->stepScale
                   : model.stepScale > 0 ? model.stepScale
                   : windowObserved      ? last
                                         : 1.0;
  for (const Curve& curve : curves) {
    CurveData d;
    d.hasCounts = !curve.sampleCounts.empty();
    for (std::size_t i = 0; i < curve.steps.size(); ++i) {
      d.x.push_back(curve.steps[i] / data.stepScale);
      d.y.push_back(curve.values[i]);
    }
    d.lastCount = d.hasCounts ? curve.sampleCounts.back() : 0.0;
    if (d.hasCounts) data.binomialScales = model.binomialScales;
    data.distinctX.insert(data.distinctX.end(), d.x.begin(), d.x.end());
    data.curves.push_back(std::move(d));
  }
  if (data.binomialScales.empty()) data.binomialScales = {1.0};
  data.sharedSds = model.sharedNoiseSds;
  std::sort(data.distinctX.begin(), data.distinctX.end());
  data.distinctX.erase(std::unique(data.distinctX.begin(), data.distinctX.end()), data.distinctX.end());
  data.pointsAt.resize(data.distinctX.size());
  for (std::size_t c = 0; c < data.curves.size(); ++c) {
    CurveData& d = data.curves[c];
    for (std::size_t i = 0; i < d.x.size(); ++i) {
      const int t = static_cast<int>(std::lower_bound(data.distinctX.begin(), data.distinctX.end(), d.x[i]) -
                                     data.distinctX.begin());
      d.xIndex.push_back(t);
      data.pointsAt[static_cast<std::size_t>(t)].emplace_back(static_cast<int>(c), static_cast<int>(i));
    }
  }
  // Binomial variance at the accuracy pooled over the curves with counts at the step (smoothed, so that
  // 0/n and n/n still carry noise): related curves share the accuracy up to small differences, and the
  // pooled value gives them equal variances, which keeps the symmetric fast path (one curve: its own).
  for (const auto& at : data.pointsAt) {
    double hits = 0, total = 0;
    for (const auto& [c, i] : at) {
      const Curve& curve = curves[static_cast<std::size_t>(c)];
      if (curve.sampleCounts.empty()) continue;
      hits += curve.values[static_cast<std::size_t>(i)] * curve.sampleCounts[static_cast<std::size_t>(i)];
      total += curve.sampleCounts[static_cast<std::size_t>(i)];
    }
    const double p = (hits + 0.5) / (total + 1.0);
    for (const auto& [c, i] : at) {
      const Curve& curve = curves[static_cast<std::size_t>(c)];
      const double n = curve.sampleCounts.empty() ? 0.0 : curve.sampleCounts[static_cast<std::size_t>(i)];
      data.curves[static_cast<std::size_t>(c)].tau.push_back(n > 0 ? p * (1.0 - p) / n : 0.0);
    }
  }
  // pointsAt visits each curve's points in step order, so tau lines up with x.
  data.symmetric = true;
  for (const CurveData& d : data.curves) {
    const CurveData& first = data.curves.front();
    data.symmetric = data.symmetric && d.x == first.x && d.tau == first.tau && d.hasCounts == first.hasCounts;
  }
  data.basisX = data.distinctX;
  data.annealing.assign(data.distinctX.size(), 0.0);
  data.annealingGains = {0.0};
  if (model.lrSchedule) {
    data.schedule = model.lrSchedule;
    data.annealingMomentum = model.annealingMomentum;
    data.forwardScale = model.lrSchedule->scaledAreas(data.stepScale, model.annealingMomentum)[0];
    ADAPREC_CHECK_ARG(data.forwardScale > 0, "lr schedule '" << model.lrSchedule->spec()
                                                             << "': the learning rate is 0 up to step " << data.stepScale);
    for (std::size_t t = 0; t < data.distinctX.size(); ++t) {
      const std::array<double, 2> xv = scheduleCoordinates(data, data.distinctX[t] * data.stepScale);
      data.basisX[t] = xv[0];
      data.annealing[t] = xv[1];
    }
    // The annealing regressor is S2 over the window's forward area: for a window of one arbitrary step
    // it grows with the schedule's length, and a gain c of the prior's size times it put every
    // prediction at the truncation at 1 (0.3 at step 0 under cosine:1000 predicted 0.94 +- 0.036 at
    // step 1000, where without the schedule the prior gives 0.61 +- 0.23).
    if (!model.lrSchedule->neverAnneals() && model.annealingHeadroomSd > 0 && windowObserved) {
      // c ~ N(0, sd^2) truncated to c >= 0, sd = annealingHeadroomSd x the headroom above the first values
      // (as the gain prior's): equal-mass nodes at the half-normal's quantiles (i + 1/2) / nodes.
      double first = 0;
      for (const Curve& curve : curves) first += curve.values.front() / static_cast<double>(curves.size());
      const double sd = headroomGainSd(model.annealingHeadroomSd, first);
      data.annealingGains.clear();
      for (int i = 0; i < model.annealingNodes; ++i) {
        const double p = 0.5 + 0.5 * (i + 0.5) / model.annealingNodes;
        double lo = 0, hi = 10;
        for (int k = 0; k < 100; ++k) (normalCdf(0.5 * (lo + hi)) < p ? lo : hi) = 0.5 * (lo + hi);
        data.annealingGains.push_back(sd * 0.5 * (lo + hi));
      }
    }
  }
  return data;
}

std::array<double, 2> scheduleCoordinates(const Data& data, double step) {
  if (!data.schedule) return {step / data.stepScale, 0.0};
  const std::array<double, 2> areas = data.schedule->scaledAreas(step, data.annealingMomentum);
  return {areas[0] / data.forwardScale, areas[1] / data.forwardScale};
}

Data withoutAnnealing(const Data& data, double c) {
  Data out = data;
  if (c == 0) return out;
  for (CurveData& d : out.curves) {
    for (std::size_t i = 0; i < d.y.size(); ++i) d.y[i] -= c * data.annealing[static_cast<std::size_t>(d.xIndex[i])];
  }
  return out;
}

BasisTable::BasisTable(const std::vector<double>& distinctX)
    : x_(distinctX), logX_(distinctX.size()), inner_(distinctX.size()), g_(distinctX.size()) {
  for (std::size_t i = 0; i < x_.size(); ++i) logX_[i] = x_[i] > 0 ? std::log(x_[i]) : 0.0;
}

const std::vector<double>& BasisTable::values(Family family, const std::array<double, 2>& theta) {
  const double kappa = theta[0], alpha = theta[1];
  const std::size_t n = x_.size();
  if (static_cast<int>(family) != family_ || kappa != kappa_) {
    family_ = static_cast<int>(family);
    kappa_ = kappa;
    const double logKappa = std::log(kappa);
    for (std::size_t i = 0; i < n; ++i) {
      switch (family) {
        case Family::kPow3: inner_[i] = std::log1p(x_[i] / kappa); break;
        case Family::kLogPower:
        case Family::kWeibull: inner_[i] = logX_[i] - logKappa; break;
        case Family::kVaporPressure:
        case Family::kIlog2: inner_[i] = 0; break;
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double x = x_[i];
    if (x <= 0) {
      g_[i] = 0;
      continue;
    }
    switch (family) {
      case Family::kPow3: g_[i] = -std::expm1(-alpha * inner_[i]); break;
      case Family::kLogPower: g_[i] = 1.0 / (1.0 + std::exp(-alpha * inner_[i])); break;
      case Family::kVaporPressure: g_[i] = std::exp(-kappa / x); break;
      case Family::kWeibull: g_[i] = -std::expm1(-std::exp(alpha * inner_[i])); break;
      case Family::kIlog2: g_[i] = 1.0 - 1.0 / std::log(M_E + x / kappa); break;
    }
  }
  return g_;
}

std::array<double, 2> familyTheta(Family family, double u0, double u1) {
  const FamilyInfo& f = info(family);
  const double kappa = std::pow(10.0, f.log10KappaLo + (f.log10KappaHi - f.log10KappaLo) * u0);
  const double alpha = f.parameterCount == 2 ? f.alphaLo + (f.alphaHi - f.alphaLo) * u1 : 0.0;
  return {kappa, alpha};
}

std::array<double, 2> familyUnit(Family family, const std::array<double, 2>& theta) {
  const FamilyInfo& f = info(family);
  const double u0 = (std::log10(theta[0]) - f.log10KappaLo) / (f.log10KappaHi - f.log10KappaLo);
  const double u1 = f.parameterCount == 2 ? (theta[1] - f.alphaLo) / (f.alphaHi - f.alphaLo) : 0.5;
  return {u0, u1};
}

double basis(Family family, const std::array<double, 2>& theta, double x) {
  const double kappa = theta[0];
  const double alpha = theta[1];
  if (x <= 0) return 0.0;
  switch (family) {
    case Family::kPow3: return -std::expm1(-alpha * std::log1p(x / kappa));
    case Family::kLogPower: return 1.0 / (1.0 + std::exp(-alpha * std::log(x / kappa)));
    case Family::kVaporPressure: return std::exp(-kappa / x);
    case Family::kWeibull: return -std::expm1(-std::pow(x / kappa, alpha));
    case Family::kIlog2: return 1.0 - 1.0 / std::log(M_E + x / kappa);
  }
  ADAPREC_FAIL(ErrorCode::kInternal, "unknown family " << static_cast<int>(family));
}

double gainScale(Family family, const std::array<double, 2>& theta) {
  return std::max(basis(family, theta, 1.0), 1e-12);
}

double priorGainScale(const ModelOptions& model, Family family, const std::array<double, 2>& theta) {
  return model.gainAtStepScale ? gainScale(family, theta) : 1.0;
}

double normalCdf(double z) { return 0.5 * std::erfc(-z * M_SQRT1_2); }

double normalPdf(double z) { return 0.3989422804014327 * std::exp(-0.5 * z * z); }

double logNormalCdf(double z) {
  if (z > 8) return 0.0;  // log(1 - 6e-16)
  if (z > -30) return std::log(normalCdf(z));
  // Mills-ratio asymptotic series: Phi(z) = phi(z)/|z| * (1 - 1/z^2 + 3/z^4 - 15/z^6 ...).
  const double z2 = z * z;
  return -0.5 * z2 - 0.5 * kLog2Pi - std::log(-z) + std::log1p(-1.0 / z2 + 3.0 / (z2 * z2));
}

namespace {
// phi(z) / Phi(z), finite for every z.
double inverseMills(double z) {
  if (z > -30) return normalPdf(z) / normalCdf(z);
  const double z2 = z * z;
  return -z / (1.0 - 1.0 / z2 + 3.0 / (z2 * z2) - 15.0 / (z2 * z2 * z2));
}
}  // namespace

void truncatedMoments(double m, double s, double& mean, double& var) {
  if (!(s > 0)) {
    mean = std::max(m, 0.0);
    var = 0;
    return;
  }
  const double z = m / s;
  const double lambda = inverseMills(z);
  mean = std::max(m + s * lambda, 0.0);
  var = std::max(s * s * (1.0 - z * lambda - lambda * lambda), 0.0);
}

CurveCoef coefFromGaussian(double meanA, double meanB, double covAA, double covAB, double covBB) {
  CurveCoef coef;
  const double sb = std::sqrt(std::max(covBB, 0.0));
  coef.r = covBB > 0 ? covAB / covBB : 0.0;
  coef.c0 = meanA - coef.r * meanB;
  coef.varCond = std::max(covAA - coef.r * covAB, 0.0);
  truncatedMoments(meanB, sb, coef.muB, coef.varB);
  return coef;
}

}  // namespace detail
}  // namespace adaprec::predictor
