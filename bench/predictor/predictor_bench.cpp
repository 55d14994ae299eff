// adaprec-predictor-bench: how well and how fast the learning-curve predictor forecasts.
//
// Three curve sources, 5 related curves x 30 points per set:
//   sgd     - real curves: a small MLP trained by SGD, 5 gradient precisions branching from one fp32
//             checkpoint, validation accuracy on 500 samples (sgd_curves.hpp). Honest test.
//   trainer - real curves from adaprec-train (2 ranks, Fashion-MNIST, 5 wire formats branching from one
//             checkpoint), written by make_trainer_curves.sh: trainer_curves.csv (5 sets) and
//             trainer_curves_heldout.csv (4, written after the shared-noise model was fixed), on which the
//             model was designed; trainer_curves_design.csv (12, written to choose the gain prior) and
//             trainer_curves_final.csv (8, written with them and evaluated once the prior was fixed).
//             All 29 by default (--trainer-csv picks files). trainer_curves_fresh.csv (10 sets, written
//             later) is not read by default: it was held out and evaluated once (docs/predictor.md).
//             trainer_curves_heldout2.csv (10 sets, written before the priors learned from runs were
//             finished) is not read by default either: held out for that change, and evaluated.
//             trainer_curves_heldout3.csv (10 sets, written after the recalibration map was fixed) is
//             the held-out set of that map; not read by default. Honest test.
//   prior   - curves drawn from the model's own prior (conditioned on [0, 1]): self-consistency only.
// The real sources lead every curve with the checkpoint's own evaluation, as the precision controller
// does (--no-anchor: without it). For cutoffs at 10/20/40% of the points, each method sees the first
// points of every curve and predicts the final value and every later point. Methods: fast (fitFast),
// mcmc (fitMcmc, the reference), last (last observed value), pow3 (least-squares pow3 fit). With
// --prior-runs-csv (trainer source) fast fits with the priors and the recalibration map learned from
// those sets (learnPriorFromRuns, the evaluated set left out) and dflt is fitFast with the library's default model, for the paired difference.
// Reported per source and cutoff:
//   final: mean log predictive density (LPD), CRPS, MSE, coverage of the 50% and 90% central intervals
//   later: the same LPD / MSE / 90% coverage over every held-out point
//   time : median and p99 thread CPU time of fit + predict (mean, sd, 5/50/95% quantiles at the final
//          step, all curves)
// plus a timing of fitFast on the full 5 x 30 sgd sets (with and without sample counts).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../support/cli_checks.hpp"
#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "baselines.hpp"
#include "prior_sampler.hpp"
#include "sgd_curves.hpp"
#include "trainer_curves.hpp"

namespace ap = adaprec::predictor;
using adaprec::bench::PointForecast;

namespace {
constexpr int kPoints = 30;
constexpr int kCurves = 5;
constexpr double kZ90 = 1.6448536269514722, kZ50 = 0.6744897501960817;

struct Score {
  double logDensity = 0, crps = 0, sqError = 0, cover50 = 0, cover90 = 0, count = 0;
  void add(const Score& s) {
    logDensity += s.logDensity; crps += s.crps; sqError += s.sqError;
    cover50 += s.cover50; cover90 += s.cover90; count += s.count;
  }
};

struct Cell {
  Score final, later;
  std::vector<double> timesMs;
  std::vector<double> setFinalLpd;  // per set: mean final-value log density (paired comparisons)
  std::vector<std::array<double, 2>> finalPit;  // Bayesian methods, per final value in set order: (cdf(y), log density)
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * (v.size() - 1) + 0.5))];
}

Score scoreGaussian(const PointForecast& f, double y, bool withCrps) {
  Score s;
  const double z = (y - f.mean) / f.sd;
  s.logDensity = -0.5 * z * z - std::log(f.sd) - 0.9189385332046727;
  if (withCrps) {
    const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
    s.crps = f.sd * (z * (2 * cdf - 1) + 2 * pdf - 1 / std::sqrt(M_PI));
  }
  s.sqError = (y - f.mean) * (y - f.mean);
  s.cover50 = std::abs(z) <= kZ50;
  s.cover90 = std::abs(z) <= kZ90;
  s.count = 1;
  return s;
}

Score scorePredictive(const ap::Predictive& p, double y, bool withCrps) {
  Score s;
  s.logDensity = p.logDensity(y);
  if (withCrps) s.crps = p.crps(y);
  s.sqError = (y - p.mean()) * (y - p.mean());
  s.cover50 = y >= p.quantile(0.25) && y <= p.quantile(0.75);
  s.cover90 = y >= p.quantile(0.05) && y <= p.quantile(0.95);
  s.count = 1;
  return s;
}

std::vector<ap::Curve> firstPoints(const std::vector<ap::Curve>& full, int m) {
  std::vector<ap::Curve> out;
  for (const ap::Curve& c : full) {
    ap::Curve o;
    o.steps.assign(c.steps.begin(), c.steps.begin() + m);
    o.values.assign(c.values.begin(), c.values.begin() + m);
    if (!c.sampleCounts.empty()) o.sampleCounts.assign(c.sampleCounts.begin(), c.sampleCounts.begin() + m);
    out.push_back(std::move(o));
  }
  return out;
}

std::string sharedList(const ap::ModelOptions& model) {
  std::string out;
  for (double v : model.sharedNoiseSds) out += (out.empty() ? "" : ",") + std::to_string(v).substr(0, 6);
  return out;
}

// Records the set just scored (its final values are those added to cell.final since `before`).
void closeSet(Cell& cell, const Score& before) {
  cell.setFinalLpd.push_back((cell.final.logDensity - before.logDensity) / (cell.final.count - before.count));
}

// CPU time of this thread: the machine is shared, and the goal is stated per core.
double cpuMs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// Fits with one of the Bayesian methods, times fit + final-step prediction, scores held-out points.
template <typename Fit>
void evaluateBayes(Fit fit, const std::vector<ap::Curve>& full, const std::vector<ap::Curve>& observed,
                   Cell& cell) {
  const Score before = cell.final;
  const double start = cpuMs();
  const ap::Posterior posterior = fit(observed);
  for (std::size_t c = 0; c < full.size(); ++c) posterior.predict(c, full[c].steps.back());
  cell.timesMs.push_back(cpuMs() - start);
  for (std::size_t c = 0; c < full.size(); ++c) {
    for (std::size_t i = observed[c].steps.size(); i < full[c].steps.size(); ++i) {
      const bool isFinal = i + 1 == full[c].steps.size();
      const ap::Predictive p = posterior.predictive(c, full[c].steps[i]);
      const Score s = scorePredictive(p, full[c].values[i], isFinal);
      cell.later.add(s);
      if (isFinal) cell.final.add(s);
      if (isFinal) cell.finalPit.push_back({p.cdf(full[c].values[i]), s.logDensity});
    }
  }
  closeSet(cell, before);
}

template <typename Forecaster>
void evaluatePoint(Forecaster makeForecaster, const std::vector<ap::Curve>& full,
                   const std::vector<ap::Curve>& observed, Cell& cell) {
  const Score before = cell.final;
  const double start = cpuMs();
  std::vector<decltype(makeForecaster(observed[0]))> forecasters;
  for (std::size_t c = 0; c < full.size(); ++c) {
    forecasters.push_back(makeForecaster(observed[c]));
    forecasters.back()(full[c].steps.back());
  }
  cell.timesMs.push_back(cpuMs() - start);
  for (std::size_t c = 0; c < full.size(); ++c) {
    for (std::size_t i = observed[c].steps.size(); i < full[c].steps.size(); ++i) {
      const bool isFinal = i + 1 == full[c].steps.size();
      const Score s = scoreGaussian(forecasters[c](full[c].steps[i]), full[c].values[i], isFinal);
      cell.later.add(s);
      if (isFinal) cell.final.add(s);
    }
  }
  closeSet(cell, before);
}

void printTable(const std::string& source, const std::map<std::pair<int, std::string>, Cell>& cells,
                const std::vector<int>& cutoffs, const std::vector<std::string>& methods) {
  std::printf("\n== source %s ==\n", source.c_str());
  std::printf("%-6s %-5s | %8s %8s %9s %6s %6s | %8s %9s %6s | %10s %10s\n", "cutoff", "method", "LPDfin",
              "CRPSfin", "MSEfin", "cov50", "cov90", "LPDall", "MSEall", "cov90", "cpu_med_ms", "cpu_p99_ms");
  for (int percent : cutoffs) {
    for (const std::string& m : methods) {
      auto it = cells.find({percent, m});
      if (it == cells.end()) continue;
      const Cell& c = it->second;
      const double nf = std::max(c.final.count, 1.0), nl = std::max(c.later.count, 1.0);
      std::printf("%5d%% %-5s | %8.3f %8.4f %9.5f %6.3f %6.3f | %8.3f %9.5f %6.3f | %10.3f %10.3f\n", percent,
                  m.c_str(), c.final.logDensity / nf, c.final.crps / nf, c.final.sqError / nf,
                  c.final.cover50 / nf, c.final.cover90 / nf, c.later.logDensity / nl, c.later.sqError / nl,
                  c.later.cover90 / nl, percentile(c.timesMs, 0.5), percentile(c.timesMs, 0.99));
    }
  }
  // The curves of one set share a checkpoint and their noise, so sets (not curves) are the independent
  // units: the paired difference of the per-set final LPD, with its standard error over the sets.
  std::printf("final LPD of fast minus another method, mean over sets +- standard error (paired):\n");
  for (int percent : cutoffs) {
    auto fast = cells.find({percent, "fast"});
    if (fast == cells.end()) continue;
    std::printf("%5d%%", percent);
    for (const std::string& m : methods) {
      auto other = cells.find({percent, m});
      if (m == "fast" || other == cells.end()) continue;
      const std::vector<double>& a = fast->second.setFinalLpd;
      const std::vector<double>& b = other->second.setFinalLpd;
      const double n = static_cast<double>(a.size());
      double mean = 0, sq = 0;
      for (std::size_t i = 0; i < a.size(); ++i) mean += (a[i] - b[i]) / n;
      for (std::size_t i = 0; i < a.size(); ++i) sq += (a[i] - b[i] - mean) * (a[i] - b[i] - mean);
      const double se = n > 1 ? std::sqrt(sq / (n - 1) / n) : 0.0;
      std::printf("   vs %-4s %+8.3f +- %.3f", m.c_str(), mean, se);
    }
    std::printf("\n");
  }
}
}  // namespace

// The model's priors learned from the corpus without the set being evaluated (left out when its curves
// are equal to one corpus set's).
ap::ModelOptions corpusModel(const std::vector<std::vector<ap::Curve>>& corpus, const std::vector<ap::Curve>& evaluated,
                             const ap::ModelOptions& model, const ap::FastOptions& fit, double pseudoCount,
                             bool recalibrate) {
  auto same = [](const std::vector<ap::Curve>& a, const std::vector<ap::Curve>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t c = 0; c < a.size(); ++c) {
      if (a[c].steps != b[c].steps || a[c].values != b[c].values) return false;
    }
    return true;
  };
  std::vector<std::vector<ap::Curve>> others;
  for (const auto& set : corpus) {
    if (!same(set, evaluated)) others.push_back(set);
  }
  ap::RunPriorOptions options;
  options.pseudoCount = pseudoCount;
  options.grid1d = fit.grid1d;
  options.grid2d = fit.grid2d;
  options.learnGainScale = model.gainHeadroomSd > 0;
  if (!recalibrate) options.recalibrationFractions.clear();
  return ap::learnPriorFromRuns(others, model, fit, options);
}

int main(int argc, char** argv) {
  CLI::App app{"Evaluate the Bayesian learning-curve predictor against MCMC and point baselines"};
  int sets = 10;
  int mcmcIterations = 2000;
  int timingReps = 50;
  std::uint64_t seed = 1;
  bool noMcmc = false, big = false, noCounts = false;
  std::string sourceChoice = "all";
  const std::string dir = ADAPREC_TRAINER_CURVE_DIR;
  std::vector<std::string> trainerCsvs = {dir + "/trainer_curves.csv", dir + "/trainer_curves_heldout.csv",
                                          dir + "/trainer_curves_design.csv", dir + "/trainer_curves_final.csv"};
  bool anchor = true;
  ap::FastOptions fastOptions;
  ap::ModelOptions model;
  app.add_option("--sets", sets, "curve sets (5 curves x 30 points) per source (default 10; the trainer source: all "
                 "its sets unless given)")->check(CLI::PositiveNumber);
  app.add_option("--mcmc-iterations", mcmcIterations, "collapsed-MCMC iterations per chain (8 chains, 1/3 burn-in)")->check(CLI::Range(20, 1000000));
  app.add_option("--timing-reps", timingReps, "repetitions of the 5 x 30 timing")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "base seed")
      ->check(adaprec::bench::integerAtLeast(0, std::numeric_limits<std::uint64_t>::max()));
  app.add_flag("--no-mcmc", noMcmc, "skip the MCMC reference");
  app.add_flag("--no-counts", noCounts, "give the methods the sgd curves without their sample counts");
  app.add_option("--source", sourceChoice, "curve source")->check(CLI::IsMember({"sgd", "prior", "trainer", "all"}));
  app.add_option("--trainer-csv", trainerCsvs, "curves of the trainer source (make_trainer_curves.sh; default: the "
                 "4 files of bench/predictor); several files, comma-separated, are evaluated as one source, their "
                 "sets in the order given")->delimiter(',');
  app.add_flag("!--no-anchor", anchor, "real sources: do not lead every curve with the checkpoint's own evaluation "
               "(by default they are, as the precision controller does; the point is not counted in the cutoff)");
  app.add_option("--grid1d", fastOptions.grid1d, "fitFast grid1d");
  app.add_option("--grid2d", fastOptions.grid2d, "fitFast grid2d");
  app.add_option("--noise-grid", fastOptions.noiseGrid, "fitFast noiseGrid");
  app.add_option("--refine-levels", fastOptions.refineLevels, "fitFast refineLevels");
  app.add_option("--noise-grid-counts", fastOptions.noiseGridWithCounts, "fitFast noiseGridWithCounts");
  app.add_option("--refine-cells", fastOptions.refineCells, "fitFast refineCells");
  app.add_option("--start-mean", model.startMean, "model prior: startMean");
  app.add_option("--start-sd", model.startSd, "model prior: startSd");
  app.add_option("--gain-mean", model.gainMean, "model prior: gainMean (with --gain-headroom-sd 0)");
  app.add_option("--gain-sd", model.gainSd, "model prior: gainSd (with --gain-headroom-sd 0)");
  app.add_option("--gain-headroom-sd", model.gainHeadroomSd, "model prior: gainHeadroomSd (0: the fixed gain prior "
                 "of --gain-mean/--gain-sd)");
  app.add_option("--noise-max", model.noiseMax, "model prior: noiseMax");
  app.add_option("--shared-noise", model.sharedNoiseSds, "model prior: sharedNoiseSds, the values of tau "
                 "(comma-separated; 0 alone: no noise shared across the curves)")->delimiter(',');
  std::vector<std::string> corpusCsvs;
  double pseudoCount = 1.0;
  app.add_option("--prior-runs-csv", corpusCsvs, "trainer source: learn the priors (learnPriorFromRuns) from the "
                 "full, anchored sets of these files (comma-separated) and fit with it; a set being evaluated is "
                 "left out of its own prior")->delimiter(',');
  bool recalibrate = true;
  app.add_flag("!--no-recalibration", recalibrate, "with --prior-runs-csv: do not learn the recalibration map "
               "(RunPriorOptions::recalibrationFractions empty)");
  app.add_option("--pseudo-count", pseudoCount, "shape prior: weight of the uniform prior, in runs")->check(CLI::PositiveNumber);
  app.add_option("--step-scale", model.stepScale, "model: stepScale (0: the last observed step)");
  app.add_flag("--gain-at-step-scale", model.gainAtStepScale, "model: gainAtStepScale (the gain prior on the gain "
               "reached at the step scale)");
  std::string pitCsv;
  app.add_option("--pit-csv", pitCsv, "append source,cutoff,method,set,curve,pit,lpd of every final value the "
                 "Bayesian methods predict to this file (PIT = predictive CDF at the value)");
  app.add_flag("--big", big, "60 sets per source, 6000 MCMC iterations, 200 timing reps");
  CLI11_PARSE(app, argc, argv);
  if (big) {
    sets = 60;
    mcmcIterations = 6000;
    timingReps = 200;
  }
  try {
    std::printf("adaprec-predictor-bench: sets=%d per source, %d curves x %d points, seed=%llu, mcmc=%s, counts=%s, anchor=%s, "
                "fast grid %d/%d/%d(%d with counts) refine %d x %d, tau in {%s}\n", sets, kCurves, kPoints, static_cast<unsigned long long>(seed),
                noMcmc ? "off" : (std::to_string(mcmcIterations) + " iterations").c_str(), noCounts ? "no" : "yes", anchor ? "yes" : "no",
                fastOptions.grid1d, fastOptions.grid2d, fastOptions.noiseGrid, fastOptions.noiseGridWithCounts,
                fastOptions.refineLevels, fastOptions.refineCells, sharedList(model).c_str());
    if (model.gainHeadroomSd > 0) {
      std::printf("gain prior: half-normal, sd %g x headroom (1 - mean first value)\n", model.gainHeadroomSd);
    } else {
      std::printf("gain prior: N(%g, %g^2) truncated to >= 0\n", model.gainMean, model.gainSd);
    }
    const std::vector<int> cutoffs = {10, 20, 40};
    std::vector<std::string> methods = {"fast", "mcmc", "last", "pow3"};
    if (noMcmc) methods.erase(methods.begin() + 1);
    if (!corpusCsvs.empty()) methods.insert(methods.begin() + 1, "dflt");  // fitFast with the library's default model
    ap::McmcOptions mcmc;
    mcmc.iterations = mcmcIterations;
    mcmc.burnIn = mcmcIterations / 3;
    mcmc.thin = 2;
    mcmc.maxSamples = 2000;
    std::vector<ap::Curve> timingSets;  // full-length sets for the timing section
    for (int s = 0; s < 5; ++s) {
      const auto set = adaprec::bench::trainSgdCurves(seed * 1000003 + s, kPoints).curves;
      timingSets.insert(timingSets.end(), set.begin(), set.end());
    }
    std::vector<adaprec::bench::BranchSet> trainerSets;
    if (sourceChoice == "all" || sourceChoice == "trainer") {
      for (const std::string& file : trainerCsvs) {
        const auto loaded = adaprec::bench::loadTrainerCurves(file);
        trainerSets.insert(trainerSets.end(), loaded.begin(), loaded.end());
        std::printf("trainer source: %zu sets from %s\n", loaded.size(), file.c_str());
      }
    }
    std::vector<std::vector<ap::Curve>> corpus;  // full anchored sets the shape prior is learned from
    for (const std::string& file : corpusCsvs) {
      for (const auto& set : adaprec::bench::loadTrainerCurves(file)) corpus.push_back(adaprec::bench::withAnchor(set));
      std::printf("priors: learned from %zu sets (so far) of %s, pseudo-count %g, each set left out of its own\n",
                  corpus.size(), file.c_str(), pseudoCount);
    }
    for (const std::string source : {"sgd", "prior", "trainer"}) {
      if (sourceChoice != "all" && sourceChoice != source) continue;
      std::map<std::pair<int, std::string>, Cell> cells;
      const int trainerCount = static_cast<int>(trainerSets.size());
      const int setCount = source != "trainer" ? sets : app.count("--sets") ? std::min(sets, trainerCount) : trainerCount;
      for (int s = 0; s < setCount; ++s) {
        const std::uint64_t setSeed = seed * 1000003 + s;
        // Real sources: the branches of one checkpoint, led by the checkpoint's own evaluation as the
        // precision controller passes them (unless --no-anchor; the point is not counted in the cutoff).
        std::vector<ap::Curve> realFull;
        if (source == "sgd") {
          const adaprec::bench::SgdCurveSet set = adaprec::bench::trainSgdCurves(setSeed, kPoints);
          adaprec::bench::BranchSet branches{"", set.curves, set.checkpointStep, set.checkpointAccuracy,
                                             set.curves[0].sampleCounts[0]};
          realFull = anchor ? adaprec::bench::withAnchor(branches) : branches.curves;
        } else if (source == "trainer") {
          realFull = anchor ? adaprec::bench::withAnchor(trainerSets[s]) : trainerSets[s].curves;
        }
        if (noCounts) for (ap::Curve& c : realFull) c.sampleCounts.clear();
        ap::ModelOptions setModel = model;
        if (source == "trainer" && !corpus.empty()) {
          setModel = corpusModel(corpus, realFull, model, fastOptions, pseudoCount, recalibrate);
          std::printf("set %d: learned gain scale k = %.3f", s, setModel.gainHeadroomSd);
          if (setModel.recalibration) {
            const ap::Recalibration& r = *setModel.recalibration;
            for (std::size_t i = 0; i < r.fractions.size(); ++i) {
              std::printf(", map at %.2f: Beta(%.2f, %.2f)", r.fractions[i], r.a[i], r.b[i]);
            }
          }
          std::printf("\n");
        }
        const int lead = anchor && source != "prior" ? 1 : 0;
        for (int percent : cutoffs) {
          const int points = source == "prior" ? kPoints : static_cast<int>(realFull[0].steps.size()) - lead;
          const int m = std::max(2, static_cast<int>(std::lround(points * percent / 100.0)));
          std::vector<ap::Curve> full = realFull;
          if (source == "prior") {
            std::mt19937_64 rng(setSeed * 31 + percent);
            std::vector<double> steps;
            // From step 0, as the anchored real sources (the headroom gain prior reads the first values).
            for (int i = 0; i < kPoints; ++i) steps.push_back(20.0 * i);
            full = ap::detail::samplePrior(model, kCurves, steps, steps[m - 1], rng).curves;
          }
          const std::vector<ap::Curve> observed = firstPoints(full, m + lead);
          evaluateBayes([&](const auto& o) { return ap::fitFast(o, setModel, fastOptions); }, full, observed, cells[{percent, "fast"}]);
          if (setModel.shapePrior) {
            evaluateBayes([&](const auto& o) { return ap::fitFast(o, ap::ModelOptions{}, fastOptions); }, full, observed,
                          cells[{percent, "dflt"}]);
          }
          if (!noMcmc) {
            mcmc.seed = setSeed;
            evaluateBayes([&](const auto& o) { return ap::fitMcmc(o, setModel, mcmc); }, full, observed,
                          cells[{percent, "mcmc"}]);
          }
          evaluatePoint([](const ap::Curve& o) {
            return [o](double step) { return adaprec::bench::lastValueForecast(o, step); };
          }, full, observed, cells[{percent, "last"}]);
          evaluatePoint([](const ap::Curve& o) {
            return [ls = adaprec::bench::Pow3LeastSquares(o)](double step) { return ls.forecast(step); };
          }, full, observed, cells[{percent, "pow3"}]);
        }
      }
      printTable(source, cells, cutoffs, methods);
      if (!pitCsv.empty()) {
        std::FILE* out = std::fopen(pitCsv.c_str(), "a");
        ADAPREC_CHECK(out != nullptr, adaprec::ErrorCode::kIo, "cannot open " << pitCsv);
        for (const auto& [key, cell] : cells) {
          for (std::size_t i = 0; i < cell.finalPit.size(); ++i) {
            std::fprintf(out, "%s,%d,%s,%zu,%zu,%.17g,%.17g\n", source.c_str(), key.first, key.second.c_str(),
                         i / kCurves, i % kCurves, cell.finalPit[i][0], cell.finalPit[i][1]);
          }
        }
        ADAPREC_CHECK(std::fclose(out) == 0, adaprec::ErrorCode::kIo, "cannot write " << pitCsv);
      }
    }

    // Timing of the goal case: one fit of 5 curves x 30 points + predictions at one later step.
    std::printf("\n== timing: fitFast + predict, %d curves x %d points, %d reps per case ==\n", kCurves, kPoints,
                timingReps);
    for (int withCounts = 1; withCounts >= 0; --withCounts) {
      std::vector<double> times, wall;
      for (int r = 0; r < timingReps; ++r) {
        const std::size_t first = (r % (timingSets.size() / kCurves)) * kCurves;
        std::vector<ap::Curve> set(timingSets.begin() + first, timingSets.begin() + first + kCurves);
        if (!withCounts) for (ap::Curve& c : set) c.sampleCounts.clear();
        const double start = cpuMs();
        const auto wallStart = std::chrono::steady_clock::now();
        const ap::Posterior posterior = ap::fitFast(set, model, fastOptions);
        for (std::size_t c = 0; c < set.size(); ++c) posterior.predict(c, 2.0 * set[c].steps.back());
        times.push_back(cpuMs() - start);
        wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wallStart).count());
      }
      // min: the least disturbed repetition, the best estimate of the cost on an idle core.
      std::printf("%-22s cpu min %7.3f  median %7.3f  p99 %7.3f ms | wall median %7.3f  p99 %7.3f ms\n",
                  withCounts ? "with sample counts" : "without sample counts", percentile(times, 0.0),
                  percentile(times, 0.5), percentile(times, 0.99), percentile(wall, 0.5), percentile(wall, 0.99));
    }
  } catch (const adaprec::Error& e) {
    std::fprintf(stderr, "adaprec-predictor-bench: %s\n", adaprec::messageForUsers(e).c_str());
    return 1;
  }
  return 0;
}
