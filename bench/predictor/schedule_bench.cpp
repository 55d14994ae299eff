// adaprec-schedule-bench: the schedule-aware learning-curve model (ModelOptions::lrSchedule) on real
// curves trained under annealing learning-rate schedules (make_schedule_*_curves.*), against the same
// model without the schedule, its MCMC reference, and the last-value and least-squares pow3 baselines.
//
//   adaprec-schedule-bench CSV... [--cutoffs 0.2,0.4] [--mcmc] [--timing]
//
// Every curve (one `curve` id; columns curve,...,step,value,n,...,lr_schedule with the SPEC last, the
// rest of the line) is cut at each fraction f of its last step (points with step <= f x last) and its
// last value predicted from the points kept, one curve per fit. Per method and cut-off it prints the
// mean absolute error of the predictive mean, the 90% band's coverage (q05 <= y <= q95) and the mean
// log predictive density of y (a future observation with the curve's sample count). --timing: fit +
// predict of 5 curves x 30 points with the schedule on one core (the first 5 curves with >= 30 points
// at common steps, cut to 30), median of 21 runs.
//
// Sparse evaluations: --every K keeps every K-th point of each curve (ending at its last) and
// --min-points N (default 3) evaluates a cut curve from N points on; --fit-maps prints the Beta map
// the unmapped model's PITs give at each cut-off with the points the cut curves had
// (docs/predictor.md, "Sparse curves").
//
// --recalibrate: also "fast-recal", the schedule-aware fast model with its predictive CDF mapped
// through a Beta(a, b) fitted to PITs of finished annealed runs (Predictive::recalibrated; the quantile
// recalibration learnPriorFromRuns learns for the model without a schedule, docs/predictor.md). Without
// --recalibration-corpus each curve's map is fitted to the PITs of every *other* curve at the same
// cut-off (leave one out); with it, one map per cut-off from the corpus CSVs' curves, applied to every
// curve evaluated (a held-out set against maps from the tuning set). With --mcmc also "mcmc-recal":
// the MCMC reference recalibrated the same way from its own PITs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "baselines.hpp"
#include "model.hpp"

namespace ap = adaprec::predictor;

namespace {
struct Row {
  ap::Curve curve;
  std::string spec, source;
};

std::vector<Row> readCurves(const std::vector<std::string>& paths) {
  std::vector<Row> rows;
  for (const std::string& path : paths) {
    std::ifstream in(path);
    ADAPREC_CHECK(in.good(), adaprec::ErrorCode::kIo, "cannot open " << path);
    std::string line;
    std::getline(in, line);
    std::vector<std::string> header;
    {
      std::istringstream h(line);
      for (std::string f; std::getline(h, f, ',');) header.push_back(f);
    }
    auto column = [&](const std::string& name) {
      const auto it = std::find(header.begin(), header.end(), name);
      ADAPREC_CHECK(it != header.end(), adaprec::ErrorCode::kMalformedInput, path << ": no column " << name);
      return static_cast<std::size_t>(it - header.begin());
    };
    const std::size_t cCurve = column("curve"), cStep = column("step"), cValue = column("value"), cN = column("n"),
                      cSource = column("source"), cSpec = column("lr_schedule");
    ADAPREC_CHECK(cSpec + 1 == header.size(), adaprec::ErrorCode::kMalformedInput, path << ": lr_schedule must be last");
    std::map<std::pair<std::string, long>, std::size_t> index;  // (source, curve)
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::vector<std::string> f;
      std::istringstream s(line);
      for (std::string x; f.size() < cSpec && std::getline(s, x, ',');) f.push_back(x);
      std::string rest;
      std::getline(s, rest);
      f.push_back(rest);
      const long id = std::stol(f[cCurve]);
      auto [it, fresh] = index.emplace(std::pair{f[cSource], id}, rows.size());
      if (fresh) rows.push_back({{}, f[cSpec], f[cSource]});
      Row& r = rows[it->second];
      r.curve.steps.push_back(std::stod(f[cStep]));
      r.curve.values.push_back(std::stod(f[cValue]));
      r.curve.sampleCounts.push_back(std::stod(f[cN]));
    }
  }
  return rows;
}

// The points of c whose index `take` accepts.
template <class Take>
ap::Curve subset(const ap::Curve& c, Take take) {
  ap::Curve out;
  for (std::size_t i = 0; i < c.steps.size(); ++i) {
    if (!take(i)) continue;
    out.steps.push_back(c.steps[i]);
    out.values.push_back(c.values[i]);
    out.sampleCounts.push_back(c.sampleCounts[i]);
  }
  return out;
}

// Every `every`-th point of each curve, counted from its first and ending at its last (the value every
// cut-off predicts): the same runs evaluated less often (--every).
void thin(std::vector<Row>& rows, std::size_t every) {
  for (Row& row : rows) {
    const std::size_t offset = (row.curve.steps.size() - 1) % every;
    row.curve = subset(row.curve, [&](std::size_t i) { return i >= offset && (i - offset) % every == 0; });
  }
}

ap::Curve cut(const ap::Curve& c, double fraction) {
  const double limit = fraction * c.steps.back();
  return subset(c, [&](std::size_t i) { return c.steps[i] <= limit; });
}

struct Score {
  double absError = 0, cover = 0, logDensity = 0, count = 0;
  bool hasDensity = true;
};

// The model options the tuning flags change (defaults: ModelOptions').
struct Tuning {
  double annealingSd = ap::ModelOptions{}.annealingHeadroomSd;
  double momentum = ap::ModelOptions{}.annealingMomentum;
  int nodes = ap::ModelOptions{}.annealingNodes;
  double gainSd = ap::ModelOptions{}.gainHeadroomSd;
  bool horizonGain = false;  // the gain prior on the gain reached at the predicted step
  std::uint64_t mcmcSeed = ap::McmcOptions{}.seed;  // the MCMC reference's
  ap::FastOptions fit;  // the fast posterior's quadrature (--grid1d, --grid2d, --noise-grid)
  std::size_t minPoints = 3;  // a cut curve with fewer observed points is not evaluated (--min-points)
};

ap::ModelOptions scheduledModel(const Row& row, const Tuning& tuning) {
  ap::ModelOptions scheduled;
  scheduled.lrSchedule = std::make_shared<const ap::LrSchedule>(ap::LrSchedule::parse(row.spec));
  scheduled.annealingHeadroomSd = tuning.annealingSd;
  scheduled.annealingMomentum = tuning.momentum;
  scheduled.annealingNodes = tuning.nodes;
  scheduled.gainHeadroomSd = tuning.gainSd;
  if (tuning.horizonGain) {
    scheduled.stepScale = row.curve.steps.back();
    scheduled.gainAtStepScale = true;
  }
  return scheduled;
}

// Each row's predictive of its last value under the schedule-aware fast model (mcmc: its MCMC
// reference) from the points up to fraction f of its last step (nullopt: fewer than --min-points points,
// not evaluated): the model's own (`unmapped`) and the default one (through the schedule's default map,
// ModelOptions::scheduleRecalibration). Fitted once per row and cut-off: every score and the PITs
// share the fit.
struct Fitted {
  std::vector<std::optional<ap::Predictive>> unmapped, mapped;
};
Fitted predictives(const std::vector<Row>& rows, double f, const Tuning& tuning, bool mcmc) {
  Fitted out;
  ap::PredictOptions own;
  own.recalibrated = false;
  for (const Row& row : rows) {
    const ap::Curve observed = cut(row.curve, f);
    if (observed.steps.size() < tuning.minPoints) {
      out.unmapped.emplace_back();
      out.mapped.emplace_back();
      continue;
    }
    const ap::ModelOptions model = scheduledModel(row, tuning);
    ap::McmcOptions sampler;
    sampler.seed = tuning.mcmcSeed;
    const ap::Posterior posterior = mcmc ? ap::fitMcmc({observed}, model, sampler) : ap::fitFast({observed}, model, tuning.fit);
    out.unmapped.emplace_back(posterior.predictive(0, row.curve.steps.back(), own));
    out.mapped.emplace_back(posterior.predictive(0, row.curve.steps.back()));
  }
  return out;
}

// The PIT F(y) of each row's last value under its predictive (NaN where there is none).
std::vector<double> pits(const std::vector<Row>& rows, const std::vector<std::optional<ap::Predictive>>& predictive) {
  std::vector<double> out;
  for (std::size_t i = 0; i < rows.size(); ++i)
    out.push_back(predictive[i] ? predictive[i]->cdf(rows[i].curve.values.back()) : std::nan(""));
  return out;
}

// Beta(a, b) fitted to the finite PITs, leaving out index `skip` (none: rows' size).
std::array<double, 2> mapFrom(const std::vector<double>& values, std::size_t skip) {
  std::vector<double> kept;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (i != skip && std::isfinite(values[i])) kept.push_back(std::clamp(values[i], 1e-6, 1 - 1e-6));
  return adaprec::predictor::detail::fitBeta(kept);
}

// The Beta map the unmapped model's PITs of the rows' last values give from cut-off f, and how many
// curves (those with --min-points points by then) gave a PIT.
struct RefitMap {
  std::array<double, 2> ab;
  std::size_t curves = 0;
};
RefitMap refitMap(const std::vector<Row>& rows, double f, const Tuning& tuning) {
  const std::vector<double> values = pits(rows, predictives(rows, f, tuning, false).unmapped);
  RefitMap out;
  for (double v : values) out.curves += std::isfinite(v);
  out.ab = mapFrom(values, values.size());
  return out;
}

double gaussianLogDensity(double y, double mean, double sd) {
  const double z = (y - mean) / sd;
  return -0.5 * z * z - std::log(sd) - 0.9189385332046727;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Schedule-aware predictor on real annealed curves"};
  std::vector<std::string> inputs;
  std::vector<double> cutoffs = {0.2, 0.4};
  bool mcmc = false, timing = false, recalibrate = false, perCurve = false;
  std::vector<std::string> corpus;
  Tuning tuning;
  app.add_option("csv", inputs, "curve CSVs")->required();
  app.add_option("--cutoffs", cutoffs, "fractions of each curve's last step")->delimiter(',');
  app.add_flag("--mcmc", mcmc, "also the MCMC reference with the schedule (slow)");
  app.add_flag("--per-curve", perCurve,
               "print each curve's fast prediction: predictive and latent sd, PIT, noise, and per family its "
               "weight and its prediction fitted alone");
  app.add_flag("--timing", timing, "time fit + predict of 5 curves x 30 points with the schedule");
  app.add_flag("--recalibrate", recalibrate,
               "also fast-recal: the fast model's CDF through a Beta map fitted to other curves' PITs");
  app.add_option("--recalibration-corpus", corpus,
                 "CSVs whose curves' PITs fit one map per cut-off (default: every other curve evaluated)");
  app.add_option("--annealing-sd", tuning.annealingSd, "ModelOptions::annealingHeadroomSd (tuning only)");
  app.add_option("--momentum", tuning.momentum, "ModelOptions::annealingMomentum (tuning only)");
  app.add_option("--gain-sd", tuning.gainSd, "ModelOptions::gainHeadroomSd (tuning only)");
  app.add_option("--mcmc-seed", tuning.mcmcSeed, "the MCMC reference's seed (its own sampling noise)");
  app.add_flag("--horizon-gain", tuning.horizonGain, "stepScale = the predicted step, gainAtStepScale (tuning only)");
  app.add_option("--annealing-nodes", tuning.nodes, "ModelOptions::annealingNodes (tuning only)");
  bool checkDefaultMap = false, fitMaps = false;
  std::size_t every = 1;
  app.add_flag("--check-default-map", checkDefaultMap,
               "refit the schedule's default recalibration map (predictor::scheduleRecalibration) from these "
               "curves' PITs at its fractions and exit 1 when it differs from the library's by more than 0.1 %");
  app.add_option("--every", every, "keep every K-th point of each curve, ending at its last (sparser evaluations)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_flag("--fit-maps", fitMaps,
               "print the Beta map the unmapped model's PITs give at each cut-off with the observed points per "
               "curve, and exit");
  app.add_option("--min-points", tuning.minPoints,
                 "evaluate a cut curve only when it has at least this many points (sparse evaluations)")
      ->check(CLI::Range(1, 1000000))
      ->default_val(3);
  app.add_option("--grid1d", tuning.fit.grid1d, "FastOptions::grid1d, the fast posterior's nodes per one-parameter family")
      ->capture_default_str();
  app.add_option("--grid2d", tuning.fit.grid2d, "FastOptions::grid2d, its nodes per dimension of a two-parameter family")
      ->capture_default_str();
  app.add_option("--noise-grid", tuning.fit.noiseGridWithCounts, "FastOptions::noiseGridWithCounts, its log sigma nodes")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<Row> rows = readCurves(inputs);
    thin(rows, every);
    if (fitMaps) {
      std::printf("cutoff,points_min,points_max,curves,a,b\n");
      for (double f : cutoffs) {
        std::size_t lo = SIZE_MAX, hi = 0, curves = 0;
        for (const Row& row : rows) {
          const std::size_t points = cut(row.curve, f).steps.size();
          if (points < tuning.minPoints) continue;  // no PIT: not evaluated
          ++curves;
          lo = std::min(lo, points);
          hi = std::max(hi, points);
        }
        if (curves < 2) continue;
        const RefitMap map = refitMap(rows, f, tuning);
        std::printf("%.2f,%zu,%zu,%zu,%.4f,%.4f\n", f, lo, hi, map.curves, map.ab[0], map.ab[1]);
      }
      return 0;
    }
    if (checkDefaultMap) {
      // The library's default map against the one these curves give now (the unmapped model's PITs).
      const ap::Recalibration& library = ap::scheduleRecalibration();
      bool same = true;
      for (std::size_t i = 0; i < library.fractions.size(); ++i) {
        const RefitMap map = refitMap(rows, library.fractions[i], tuning);
        const std::array<double, 2>& ab = map.ab;
        const std::size_t used = map.curves;
        const bool close = std::abs(ab[0] - library.a[i]) <= 1e-3 * library.a[i] &&
                           std::abs(ab[1] - library.b[i]) <= 1e-3 * library.b[i] && used == library.counts[i];
        same = same && close;
        std::printf("default map at %.2f: refitted Beta(%.4f, %.4f) from %zu curves, library Beta(%.4f, %.4f) from %zu: %s\n",
                    library.fractions[i], ab[0], ab[1], used, library.a[i], library.b[i], library.counts[i],
                    close ? "same" : "DIFFERENT");
      }
      // The density the map was learned at (Recalibration::pointsPerRun) is these curves' own.
      std::size_t fewest = SIZE_MAX, most = 0;
      for (const Row& row : rows) {
        fewest = std::min(fewest, row.curve.steps.size());
        most = std::max(most, row.curve.steps.size());
      }
      const bool density = library.pointsPerRun >= static_cast<double>(fewest) &&
                           library.pointsPerRun <= static_cast<double>(most);
      std::printf("default map's points per run: library %.0f, these curves %zu-%zu: %s\n", library.pointsPerRun, fewest,
                  most, density ? "same" : "DIFFERENT");
      return same && density ? 0 : 1;
    }
    std::vector<std::string> methods = {"last", "pow3", "fast-noschedule", "fast-unmapped", "fast"};
    if (mcmc) methods.insert(methods.end(), {"mcmc-unmapped", "mcmc"});
    if (!corpus.empty()) recalibrate = true;
    if (recalibrate) methods.push_back("fast-recal");
    if (recalibrate && mcmc) methods.push_back("mcmc-recal");
    std::vector<Row> corpusRows = corpus.empty() ? std::vector<Row>{} : readCurves(corpus);
    thin(corpusRows, every);
    std::printf("%zu curves\n", rows.size());
    std::printf("cutoff,method,curves,mae,coverage90,mean_log_density\n");
    for (double f : cutoffs) {
      std::map<std::string, Score> scores;
      std::map<std::string, std::vector<double>> curveLogDensity;  // fast's and mcmc's, per curve
      // Index 0: the fast model's; 1: the MCMC reference's. The maps: one from the corpus, or one per
      // row from every other row (leave one out).
      Fitted ownPredictive[2];
      std::vector<double> ownPits[2];
      std::array<double, 2> corpusMap[2] = {{1, 1}, {1, 1}};
      for (int m = 0; m < (mcmc ? 2 : 1); ++m) {
        ownPredictive[m] = predictives(rows, f, tuning, m == 1);
        if (!recalibrate) continue;
        // The maps are learned from, and applied to, the model's own (unmapped) predictives.
        if (corpus.empty()) {
          ownPits[m] = pits(rows, ownPredictive[m].unmapped);
          continue;
        }
        const std::vector<double> corpusPits =
            pits(corpusRows, predictives(corpusRows, f, tuning, m == 1).unmapped);
        corpusMap[m] = mapFrom(corpusPits, corpusPits.size());
        std::printf("# cut-off %.2f, %s: map Beta(%.3f, %.3f) from %zu corpus curves\n", f, m ? "mcmc" : "fast",
                    corpusMap[m][0], corpusMap[m][1], corpusRows.size());
      }
      for (std::size_t index = 0; index < rows.size(); ++index) {
        const Row& row = rows[index];
        const ap::Curve observed = cut(row.curve, f);
        if (observed.steps.size() < tuning.minPoints) continue;
        const double step = row.curve.steps.back(), y = row.curve.values.back();
        const auto lastPoint = adaprec::bench::lastValueForecast(observed, step);
        const auto pow3 = adaprec::bench::Pow3LeastSquares(observed).forecast(step);
        for (const auto& [name, point] : {std::pair{"last", lastPoint}, std::pair{"pow3", pow3}}) {
          Score& s = scores[name];
          s.absError += std::abs(point.mean - y);
          s.cover += std::abs(point.mean - y) <= 1.6448536269514722 * point.sd;
          s.logDensity += gaussianLogDensity(y, point.mean, point.sd);
          s.count += 1;
        }
        for (const std::string& method : methods) {
          if (method == "last" || method == "pow3") continue;
          const bool exact = method.rfind("mcmc", 0) == 0;
          const auto endsWith = [&method](std::string_view tail) {
            return method.size() > tail.size() && method.compare(method.size() - tail.size(), tail.size(), tail) == 0;
          };
          const bool own = endsWith("-unmapped") || endsWith("-recal");
          ap::Predictive p = method == "fast-noschedule"
                                 ? ap::fitFast({observed}, ap::ModelOptions{}).predictive(0, step)
                                 : *(own ? ownPredictive[exact].unmapped : ownPredictive[exact].mapped)[index];
          if (endsWith("-recal")) {
            const std::array<double, 2> ab = corpus.empty() ? mapFrom(ownPits[exact], index) : corpusMap[exact];
            p = p.recalibrated(ab[0], ab[1]);
          }
          if (perCurve && method == "fast-unmapped") {  // the model's own width, without the default map
            const ap::Posterior post = ap::fitFast({observed}, scheduledModel(row, tuning), tuning.fit);
            const ap::PosteriorSummary sum = post.summary();
            ap::PredictOptions latent, own;
            latent.observationNoise = false;
            latent.recalibrated = own.recalibrated = false;
            const ap::Predictive pl = post.predictive(0, step, latent);
            // Then per family: its posterior weight in the mixture, and the family fitted alone.
            std::printf("# curve,%.2f,%s,%s,y=%.4f,mean=%.4f,sd=%.4f,latentsd=%.4f,pit=%.3f,sigma=%.4f,tau=%.4f,lam=%.2f",
                        f, row.source.c_str(), row.spec.c_str(), y, p.mean(), p.sd(), pl.sd(), p.cdf(y), sum.noiseSdMean,
                        sum.sharedNoiseSdMean, sum.binomialScaleMean);
            for (int fam = 0; fam < ap::kFamilyCount; ++fam) {
              const auto family = static_cast<ap::Family>(fam);
              ap::ModelOptions one = scheduledModel(row, tuning);
              one.families = {family};
              const ap::Predictive q = ap::fitFast({observed}, one, tuning.fit).predictive(0, step, own);
              std::printf(",%s=w%.2f:%.3f+-%.3f", ap::familyName(family), sum.familyWeights[static_cast<std::size_t>(fam)],
                          q.mean(), q.sd());
            }
            std::printf("\n");
          }
          Score& s = scores[method];
          s.absError += std::abs(p.mean() - y);
          s.cover += p.quantile(0.05) <= y && y <= p.quantile(0.95);
          s.logDensity += p.logDensity(y);
          s.count += 1;
          if (method == "fast" || method == "mcmc") curveLogDensity[method].push_back(p.logDensity(y));
        }
      }
      for (const std::string& method : methods) {
        const Score& s = scores[method];
        if (s.count == 0) {  // no curve has --min-points points by this cut-off
          std::printf("%.2f,%s,0,,,\n", f, method.c_str());
          continue;
        }
        std::printf("%.2f,%s,%.0f,%.4f,%.3f,%.3f\n", f, method.c_str(), s.count, s.absError / s.count, s.cover / s.count,
                    s.logDensity / s.count);
      }
      if (mcmc) {
        // Paired over the curves: is the fast posterior's log density below the reference's by more
        // than the spread of the per-curve differences allows?
        const std::vector<double>& a = curveLogDensity["fast"];
        const std::vector<double>& b = curveLogDensity["mcmc"];
        double sum = 0, sumSq = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
          sum += a[i] - b[i];
          sumSq += (a[i] - b[i]) * (a[i] - b[i]);
        }
        const double n = static_cast<double>(a.size()), mean = sum / n;
        const double se = n > 1 ? std::sqrt(std::max(0.0, (sumSq / n - mean * mean) * n / (n - 1)) / n) : 0.0;
        std::printf("# cut-off %.2f: log density fast - mcmc, paired over %zu curves: %+.4f +- %.4f (se)\n", f,
                    a.size(), mean, se);
      }
    }
    if (timing) {
      // Five curves at common steps (one trainer set: its formats), cut to 30 points.
      std::vector<ap::Curve> five;
      std::string spec;
      for (const Row& row : rows) {
        if (row.curve.steps.size() < 30) continue;
        if (!five.empty() && (row.spec != spec || row.curve.steps != rows.front().curve.steps)) continue;
        ap::Curve c = row.curve;
        c.steps.resize(30);
        c.values.resize(30);
        c.sampleCounts.resize(30);
        if (five.empty()) spec = row.spec;
        five.push_back(c);
        if (five.size() == 5) break;
      }
      ADAPREC_CHECK(five.size() == 5, adaprec::ErrorCode::kInvalidArgument, "--timing: need 5 curves of >= 30 points");
      // The model without a schedule, the schedule-aware one (with its default map: the default), and
      // the same without the map.
      ap::ModelOptions unmapped = scheduledModel({{}, spec, ""}, tuning);
      unmapped.scheduleRecalibration = false;
      const ap::ModelOptions models[3] = {ap::ModelOptions{}, scheduledModel({{}, spec, ""}, tuning), unmapped};
      const std::string names[3] = {"no schedule", "schedule " + spec, "schedule " + spec + ", no map"};
      // Interleaved, so that all see the same load.
      std::vector<double> ms[3];
      double sink = 0;
      for (int run = 0; run < 21; ++run) {
        for (int which = 0; which < 3; ++which) {
          const auto t0 = std::chrono::steady_clock::now();
          const ap::Posterior posterior = ap::fitFast(five, models[which]);
          for (std::size_t c = 0; c < 5; ++c) sink += posterior.predict(c, 2 * five[c].steps.back()).mean;
          ms[which].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
      }
      for (int which = 0; which < 3; ++which) {
        std::sort(ms[which].begin(), ms[which].end());
        std::printf("timing: fit + predict, 5 curves x 30 points, %s: median %.2f ms (min %.2f, max %.2f)%s\n",
                    names[which].c_str(), ms[which][10], ms[which].front(), ms[which].back(), sink > 0 ? "" : " ");
      }
    }
  } catch (const adaprec::Error& e) {
    std::fprintf(stderr, "adaprec-schedule-bench: %s\n", adaprec::messageForUsers(e).c_str());
    return 2;
  }
  return 0;
}
