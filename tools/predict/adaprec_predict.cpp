// adaprec-predict: forecast learning curves from a CSV of observed points (see docs/predictor.md).
//
//   adaprec-predict --input curves.csv --at 3000,6000 [--json] [--plot out.png] [--method fast|mcmc]
//                   [--prior-runs finished.csv] [--lr-schedule SPEC [--no-schedule-map]]
//
// Prints `curve,step,mean,std,q05,q95` (one line per curve and requested step) or JSON. Input errors
// (and a --plot path whose directory cannot be written) exit with status 2; other failures exit 1.
// --method mcmc fits at most --mcmc-max-points points per curve (evenly thinned; its cost grows
// linearly with the points, ~5 ms each: 10^5 points took 299 s), and says so.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"

namespace ap = adaprec::predictor;

namespace {
constexpr int kPlotSteps = 120;
constexpr std::size_t kDefaultMcmcMaxPoints = 500;

// Keeps `limit` points of the curve, evenly spread by index, the first and the last included.
ap::Curve thinned(const ap::Curve& curve, std::size_t limit) {
  const std::size_t n = curve.steps.size();
  if (limit == 0 || n <= limit) return curve;
  ap::Curve out;
  for (std::size_t k = 0; k < limit; ++k) {
    const std::size_t i = static_cast<std::size_t>(static_cast<double>(k) * static_cast<double>(n - 1) / (limit - 1) + 0.5);
    out.steps.push_back(curve.steps[i]);
    out.values.push_back(curve.values[i]);
    if (!curve.sampleCounts.empty()) out.sampleCounts.push_back(curve.sampleCounts[i]);
  }
  return out;
}

// The model is for values that rise with training (accuracy): b >= 0. A curve that clearly falls — an
// error rate or a loss in [0, 1] given by mistake — got a forecast above its own last points with no
// word said. Flagged when it falls by 0.05 or more overall and in at least 2/3 of its steps (an
// accuracy that dips or slowly overfits is not).
std::string fallingCurveWarning(long id, const ap::Curve& curve) {
  const std::vector<double>& y = curve.values;
  if (y.size() < 3 || y.front() - y.back() < 0.05) return "";
  std::size_t falls = 0;
  for (std::size_t i = 1; i < y.size(); ++i) falls += y[i] < y[i - 1];
  if (3 * falls < 2 * (y.size() - 1)) return "";
  std::ostringstream os;
  os << "curve " << id << " falls from " << y.front() << " to " << y.back()
     << ": the model forecasts values that rise with training, like accuracy (for an error rate give 1 - error); "
        "its forecast of this curve assumes a rise";
  return os.str();
}

// A step for a message: as given (10 significant digits: steps up to 1e9 in full).
std::string stepText(double step) {
  std::ostringstream os;
  os << std::setprecision(10) << step;
  return os.str();
}

// The prior and its recalibration (--prior-runs) were learned for predictions up to the runs'
// horizon: beyond it they still narrow the band (+-0.02 at 5x the horizon on test_cli's corpus), on no
// evidence. "" when there is no prior or every step is within its horizon.
std::string priorHorizonWarning(const ap::ModelOptions& model, const std::vector<double>& at) {
  if (!model.shapePrior || at.empty()) return "";
  const double horizon = model.shapePrior->stepScale;
  const double farthest = *std::max_element(at.begin(), at.end());
  if (farthest <= horizon) return "";
  return "--at " + stepText(farthest) + " is past the --prior-runs horizon (step " + stepText(horizon) +
         ", where the runs end): the prior and its recalibration were learned for predictions up to it, so the "
         "band beyond it is an extrapolation; give runs seen that far";
}

// A curve observed past the step from which the schedule's rate is 0 for good: updates there change
// nothing, so the model holds the curve flat from that step, and a curve that still rises after it
// gets a forecast below its own last values (cosine:100 for 100 epochs on a curve of 4,000 steps
// forecast 0.72 where the curve was at 0.86). "" when the curve ends before that step.
std::string scheduleEndWarning(long id, const ap::Curve& curve, const ap::ModelOptions& model) {
  if (!model.lrSchedule || curve.steps.empty()) return "";
  const double zero = model.lrSchedule->zeroFrom();
  const double last = curve.steps.back();
  if (!(last > zero)) return "";
  return "curve " + std::to_string(id) + " is observed up to step " + stepText(last) + ", past step " +
         stepText(zero) + " where --lr-schedule " + model.lrSchedule->spec() +
         " reaches a rate of 0 for good: the model holds every curve flat from there, so this forecast ignores "
         "whatever the curve does after step " + stepText(zero) +
         "; give the schedule in the curve's own steps (TOTAL counted in epochs is a common slip)";
}

// --plot: refuse a path that cannot be written before spending the fit on it.
void checkPlotPath(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::filesystem::path dir = parent.empty() ? std::filesystem::path(".") : parent;
  std::error_code ec;
  ADAPREC_CHECK_ARG(std::filesystem::is_directory(dir, ec),
                    "--plot " << path << ": directory " << dir.string() << " does not exist");
  ADAPREC_CHECK_ARG(::access(dir.c_str(), W_OK) == 0,
                    "--plot " << path << ": directory " << dir.string() << " is not writable");
  ADAPREC_CHECK_ARG(!std::filesystem::is_directory(path, ec), "--plot " << path << " is a directory, not a file name");
}

ap::CurveTable readTable(const std::string& path) {
  if (path == "-") return ap::readCurvesCsv(std::cin);
  std::ifstream file(path);
  ADAPREC_CHECK(file.good(), adaprec::ErrorCode::kIo, "cannot open " << path);
  return ap::readCurvesCsv(file);
}

ap::Posterior fit(const std::vector<ap::Curve>& curves, const ap::ModelOptions& model, const std::string& method,
                  std::uint64_t seed) {
  if (method == "mcmc") {
    ap::McmcOptions options;
    options.seed = seed;
    return ap::fitMcmc(curves, model, options);
  }
  return ap::fitFast(curves, model);
}

std::string plotScript() {
  if (const char* env = std::getenv("ADAPREC_PLOT_SCRIPT")) return env;
  for (const char* candidate : {ADAPREC_PLOT_SCRIPT_SOURCE, ADAPREC_PLOT_SCRIPT_INSTALLED}) {
    if (std::filesystem::is_regular_file(candidate)) return candidate;
  }
  ADAPREC_FAIL(adaprec::ErrorCode::kIo, "plot_prediction.py not found (set ADAPREC_PLOT_SCRIPT)");
}

// Debian's interpreter, which has python3-matplotlib; ADAPREC_PYTHON overrides it.
std::string python() {
  const char* env = std::getenv("ADAPREC_PYTHON");
  return env ? env : "/usr/bin/python3";
}

std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Writes the observed points and a dense prediction grid to a temporary folder and runs the script.
void plot(const ap::CurveTable& table, const ap::Posterior& posterior, double lastStep, const ap::PredictOptions& po,
          const std::string& output) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("adaprec-predict-" + std::to_string(static_cast<long>(::getpid())));
  std::filesystem::create_directories(dir);
  {
    std::ofstream obs(dir / "observed.csv");
    obs << "curve,step,value\n";
    for (std::size_t c = 0; c < table.curves.size(); ++c) {
      for (std::size_t i = 0; i < table.curves[c].steps.size(); ++i) {
        obs << table.ids[c] << ',' << table.curves[c].steps[i] << ',' << table.curves[c].values[i] << '\n';
      }
    }
    std::ofstream pred(dir / "predicted.csv");
    pred.precision(8);
    pred << "curve,step,mean,std,q05,q95\n";
    for (std::size_t c = 0; c < table.curves.size(); ++c) {
      for (int i = 0; i <= kPlotSteps; ++i) {
        const double step = lastStep * i / kPlotSteps;
        const ap::Prediction p = posterior.predict(c, step, po);
        pred << table.ids[c] << ',' << step << ',' << p.mean << ',' << p.sd << ',' << p.q05 << ',' << p.q95 << '\n';
      }
    }
  }
  // The script's own output (a Python traceback when it fails) is kept aside; a failure is reported in
  // one line with the script's last line, the exception.
  const std::filesystem::path errors = dir / "plot-stderr.txt";
  const std::string command = shellQuote(python()) + " " + shellQuote(plotScript()) + " --observed " +
                              shellQuote((dir / "observed.csv").string()) + " --predicted " +
                              shellQuote((dir / "predicted.csv").string()) + " --output " + shellQuote(output) +
                              " > " + shellQuote(errors.string()) + " 2>&1";
  const int rc = std::system(command.c_str());
  std::string last;
  {
    std::ifstream in(errors);
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t") != std::string::npos) last = line;
    }
  }
  std::filesystem::remove_all(dir);
  ADAPREC_CHECK(rc == 0, adaprec::ErrorCode::kIo,
                "--plot " << output << ": the plot script failed (status " << rc << ")" << (last.empty() ? "" : ": ")
                          << last);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Predict learning curves with uncertainty (AdaPrec Bayesian learning-curve model)"};
  std::string input, plotPath, priorRuns, lrSchedule, method = "fast";
  std::vector<double> at;
  std::vector<std::string> families;
  bool json = false, latent = false;
  std::uint64_t seed = 1;
  std::size_t mcmcMaxPoints = kDefaultMcmcMaxPoints;
  app.add_option("--input", input, "CSV with header step,value[,curve][,n] (TensorBoard's Wall time,Step,Value too); '-' reads stdin")->required();
  // Checked as text: CLI11 reads an empty item ("--at ''", "--at 10,,20") as step 0.
  const CLI::Validator stepCheck(
      [](std::string& text) -> std::string {
        double v = 0;
        const bool ok = !text.empty() && CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v >= 0;
        return ok ? std::string() : "steps must be finite numbers >= 0, got '" + text + "'";
      },
      "STEP >= 0");
  app.add_option("--at", at, "steps to predict at, comma-separated")->required()->delimiter(',')->check(stepCheck);
  app.add_flag("--json", json, "print JSON instead of CSV");
  app.add_option("--plot", plotPath, "also draw points, mean and 90% band to this PNG (python3 + matplotlib)");
  app.add_option("--method", method, "fast (quadrature posterior) or mcmc (reference sampler; fits at most "
                                     "--mcmc-max-points points per curve)")
      ->check(CLI::IsMember({"fast", "mcmc"}));
  app.add_option("--mcmc-max-points", mcmcMaxPoints,
                 "--method mcmc: a longer curve is thinned evenly (first and last kept) to this many points, since "
                 "the sampler's time grows with the points (~5 ms each); reported on stderr and as mcmc_points in "
                 "JSON. 0: all points")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double v = 0;
            const bool ok = CLI::detail::lexical_cast(text, v) && v == std::floor(v) && (v == 0 || (v >= 10 && v <= 1e9));
            return ok ? std::string() : "must be 0 (all points) or an integer >= 10, got '" + text + "'";
          },
          "0 or >= 10"))
      ->capture_default_str();
  app.add_option("--families", families, "families to mix (default all): pow3,log_power,vapor_pressure,weibull,ilog2")
      ->delimiter(',');
  app.add_flag("--latent", latent, "predict the noise-free curve instead of a future observation");
  // CLI11 would wrap "-1" to 2^64 - 1: a seed is refused unless it is a whole number >= 0.
  app.add_option("--seed", seed, "MCMC seed (an integer >= 0)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double v = 0;
            const bool ok = CLI::detail::lexical_cast(text, v) && std::isfinite(v) && v >= 0 && v == std::floor(v);
            return ok ? std::string() : "must be an integer >= 0, got '" + text + "'";
          },
          "INTEGER >= 0"));
  app.add_option("--prior-runs", priorRuns,
                 "CSV of finished related runs (header run,curve,step,value[,n]; each run seen to the horizon "
                 "the prediction is about): learn the shape prior, the horizon gain's scale and a recalibration "
                 "of the predictive CDF from them")
      ->check(CLI::ExistingFile);
  app.add_option("--lr-schedule", lrSchedule,
                 "learning-rate schedule the curves were trained under, in their steps: constant, cosine:TOTAL, "
                 "cosine:TOTAL:WARMUP, poly:TOTAL:POWER, step:GAMMA:S1,S2,..., file:PATH (CSV step,lr); the "
                 "model then reads the curve against the area under the rate and adds the annealing gain");
  bool noScheduleMap = false;
  app.add_flag("--no-schedule-map", noScheduleMap,
               "with --lr-schedule: the model's own bands, without the recalibration map that schedule-aware "
               "predictions get by default (learned from real annealed curves, docs/predictor.md)");
  // Command-line errors are input problems: status 2, as the CSV's (CLI11 would exit with 101-115).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);
    return status == 0 ? 0 : 2;
  }

  try {
    for (double step : at) {
      ADAPREC_CHECK_ARG(std::isfinite(step) && step >= 0, "--at: steps must be finite and >= 0, got " << step);
    }
    if (!plotPath.empty()) checkPlotPath(plotPath);
    const ap::CurveTable table = readTable(input);
    ADAPREC_CHECK(table.runs.front() == table.runs.back(), adaprec::ErrorCode::kMalformedInput,
                  "--input: the curves of one run are predicted together; found runs " << table.runs.front()
                                                                                      << " to " << table.runs.back());
    ap::ModelOptions model;
    ADAPREC_CHECK_ARG(app.count("--lr-schedule") == 0 || !lrSchedule.empty(),
                      "--lr-schedule: an empty spec (give constant, cosine:TOTAL, ... or leave the option out)");
    if (!lrSchedule.empty()) {
      model.lrSchedule = std::make_shared<const ap::LrSchedule>(ap::LrSchedule::parse(lrSchedule));
      // Refused here, before the fit and before any output (the prediction at such a step used to
      // fail after the rows before it were printed).
      for (double step : at) {
        // 17 digits: 1000000001 read "at most 1e+09, got 1e+09".
        ADAPREC_CHECK_ARG(step <= ap::LrSchedule::kMaxAreaStep, "--at: with --lr-schedule steps must be at most "
                                                                    << std::setprecision(17) << ap::LrSchedule::kMaxAreaStep
                                                                    << ", got " << step);
      }
    }
    model.scheduleRecalibration = !noScheduleMap;
    if (!families.empty()) {
      model.families.clear();
      for (const std::string& name : families) model.families.push_back(ap::familyFromName(name));
    }
    if (!priorRuns.empty()) {
      // The configuration docs/predictor.md measures: the gain prior on the gain reached at the runs' horizon.
      model.gainAtStepScale = true;
      model = ap::learnPriorFromRuns(ap::curvesByRun(readTable(priorRuns)), model);
    }
    std::vector<ap::Curve> fitted = table.curves;
    nlohmann::json mcmcPoints = nlohmann::json::array();
    if (method == "mcmc") {
      for (std::size_t c = 0; c < fitted.size(); ++c) {
        const std::size_t all = fitted[c].steps.size();
        fitted[c] = thinned(fitted[c], mcmcMaxPoints);
        mcmcPoints.push_back({{"curve", table.ids[c]}, {"points", all}, {"used", fitted[c].steps.size()}});
        if (fitted[c].steps.size() < all) {
          std::fprintf(stderr, "adaprec-predict: --method mcmc: curve %ld thinned from %zu to %zu points "
                               "(--mcmc-max-points)\n", table.ids[c], all, fitted[c].steps.size());
        }
      }
    }
    const ap::Posterior posterior = fit(fitted, model, method, seed);
    ap::PredictOptions po;
    po.observationNoise = !latent;

    nlohmann::json out;
    out["method"] = method;
    if (method == "mcmc") {
      out["mcmc_max_points"] = mcmcMaxPoints;
      out["mcmc_points"] = mcmcPoints;  // per curve: points read, points the sampler used
    }
    out["predictions"] = nlohmann::json::array();
    std::vector<std::string> warnings;
    for (std::size_t c = 0; c < table.curves.size(); ++c) {
      const std::string warning = fallingCurveWarning(table.ids[c], table.curves[c]);
      if (!warning.empty()) warnings.push_back(warning);
      const std::string pastEnd = scheduleEndWarning(table.ids[c], table.curves[c], model);
      if (!pastEnd.empty()) warnings.push_back(pastEnd);
    }
    const std::string pastHorizon = priorHorizonWarning(model, at);
    if (!pastHorizon.empty()) warnings.push_back(pastHorizon);
    for (const std::string& warning : warnings) {
      std::fprintf(stderr, "adaprec-predict: warning: %s\n", warning.c_str());
      out["warnings"].push_back(warning);
    }
    if (!json) std::printf("curve,step,mean,std,q05,q95\n");
    for (std::size_t c = 0; c < table.curves.size(); ++c) {
      for (double step : at) {
        const ap::Prediction p = posterior.predict(c, step, po);
        if (json) {
          out["predictions"].push_back({{"curve", table.ids[c]}, {"step", step}, {"mean", p.mean}, {"std", p.sd},
                                        {"q05", p.q05}, {"q95", p.q95}});
        } else {
          std::printf("%ld,%.10g,%.6f,%.6f,%.6f,%.6f\n", table.ids[c], step, p.mean, p.sd, p.q05, p.q95);
        }
      }
    }
    if (json) {
      const ap::PosteriorSummary summary = posterior.summary();
      for (ap::Family f : ap::allFamilies()) {
        out["family_weights"][ap::familyName(f)] = summary.familyWeights[static_cast<int>(f)];
      }
      out["noise_sd_mean"] = summary.noiseSdMean;
      out["shared_noise_sd_mean"] = summary.sharedNoiseSdMean;
      if (model.shapePrior) {
        out["prior_runs"] = model.shapePrior->runCount;
        out["prior_step_scale"] = model.shapePrior->stepScale;
        out["gain_headroom_sd"] = model.gainHeadroomSd;
      }
      if (const ap::Recalibration* map = model.appliedRecalibration()) {
        const ap::Recalibration& r = *map;
        out["recalibration_source"] = model.recalibration ? "prior runs" : "schedule default";
        // 0: applied in full; else faded for curves with fewer points by the reach (Recalibration::at).
        out["recalibration_points_per_run"] = r.pointsPerRun;
        out["recalibration"] = nlohmann::json::array();
        for (std::size_t i = 0; i < r.fractions.size(); ++i) {
          out["recalibration"].push_back({{"fraction", r.fractions[i]}, {"a", r.a[i]}, {"b", r.b[i]}, {"pits", r.counts[i]}});
        }
      }
      std::cout << out.dump(2) << std::endl;
    }
    if (!plotPath.empty()) {
      double lastStep = *std::max_element(at.begin(), at.end());
      for (const ap::Curve& curve : table.curves) lastStep = std::max(lastStep, curve.steps.back());
      plot(table, posterior, lastStep, po, plotPath);
    }
  } catch (const adaprec::Error& e) {
    std::fprintf(stderr, "adaprec-predict: %s\n", adaprec::messageForUsers(e).c_str());
    const bool inputError = e.code() == adaprec::ErrorCode::kInvalidArgument ||
                            e.code() == adaprec::ErrorCode::kMalformedInput;
    return inputError ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec-predict: %s\n", adaprec::messageForUsers(e).c_str());
    return 1;
  }
  // Predictions printed into a full disk or /dev/full were lost: say so, not exit 0 with an empty file.
  if (!adaprec::standardStreamsComplete()) {
    std::fprintf(stderr, "adaprec-predict: cannot write the predictions to standard output\n");
    return 1;
  }
  return 0;
}
