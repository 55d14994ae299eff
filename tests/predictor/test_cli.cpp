// adaprec-predict as a user runs it: CSV and JSON output, stdin, and error messages naming the line.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {
struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs adaprec-predict with `args`, feeding `input` as the file named by {in} (or stdin with '-');
// its standard output goes to `stdoutPath` when given (then Result::out is empty).
Result run(const std::string& args, const std::string& input, const std::string& stdoutPath = "") {
  const char* exe = std::getenv("ADAPREC_PREDICT");
  REQUIRE(exe != nullptr);
  const fs::path dir = fs::temp_directory_path() / ("adaprec-cli-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.csv") << input;
  std::string a = args;
  const auto pos = a.find("{in}");
  if (pos != std::string::npos) a.replace(pos, 4, (dir / "in.csv").string());
  const std::string out = stdoutPath.empty() ? (dir / "out").string() : stdoutPath;
  const std::string command = std::string(exe) + " " + a + " < " + (dir / "in.csv").string() + " > " + out +
                              " 2> " + (dir / "err").string();
  const int raw = std::system(command.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  if (stdoutPath.empty()) r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  fs::remove_all(dir);
  return r;
}

int countLines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

const char* kTwoCurves =
    "curve,step,value,n\n"
    "0,100,0.30,500\n1,100,0.28,500\n0,200,0.42,500\n1,200,0.37,500\n"
    "0,300,0.48,500\n1,300,0.43,500\n0,400,0.51,500\n1,400,0.46,500\n";
}  // namespace

TEST_CASE("adaprec-predict prints one CSV line per curve and step", "[predictor][cli]") {
  const Result r = run("--input {in} --at 500,1000,2000", kTwoCurves);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.rfind("curve,step,mean,std,q05,q95\n", 0) == 0);
  CHECK(countLines(r.out) == 1 + 2 * 3);
  CHECK(r.out.find("\n1,2000,") != std::string::npos);
  // Parse one line and check the interval brackets the mean.
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);
  std::getline(lines, line);
  double curve, step, mean, sd, q05, q95;
  REQUIRE(std::sscanf(line.c_str(), "%lf,%lf,%lf,%lf,%lf,%lf", &curve, &step, &mean, &sd, &q05, &q95) == 6);
  CHECK(curve == 0);
  CHECK(step == 500);
  CHECK(q05 < mean);
  CHECK(mean < q95);
  CHECK(sd > 0);
  CHECK(mean > 0.45);
  CHECK(mean < 0.75);
}

TEST_CASE("adaprec-predict reads stdin and prints JSON", "[predictor][cli]") {
  const Result r = run("--input - --at 800 --json", "value,step\n0.2,10\n0.3,20\n0.35,30\n0.37,40\n");
  INFO(r.err);
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(j["predictions"].size() == 1);
  CHECK(j["predictions"][0]["curve"] == 0);
  CHECK(j["predictions"][0]["step"] == 800.0);
  CHECK(j["predictions"][0]["q05"].get<double>() < j["predictions"][0]["q95"].get<double>());
  double total = 0;
  for (const auto& [name, w] : j["family_weights"].items()) total += w.get<double>();
  CHECK(total == Approx(1.0).epsilon(1e-9));
}

TEST_CASE("adaprec-predict warns of a curve that falls (an error rate given for an accuracy)", "[predictor][cli]") {
  // Rising curves say nothing; a falling one still gets its forecast, with a warning on stderr and in JSON.
  const Result rising = run("--input {in} --at 800 --json", kTwoCurves);
  REQUIRE(rising.status == 0);
  CHECK(rising.err.empty());
  CHECK_FALSE(nlohmann::json::parse(rising.out).contains("warnings"));
  const std::string falling = "curve,step,value\n3,10,0.5\n3,20,0.4\n3,30,0.33\n3,40,0.29\n3,50,0.26\n";
  const Result csv = run("--input {in} --at 800", falling);
  INFO(csv.err);
  REQUIRE(csv.status == 0);
  CHECK(countLines(csv.out) == 2);
  CHECK(csv.err.find("warning: curve 3 falls from 0.5 to 0.26") != std::string::npos);
  const Result json = run("--input {in} --at 800 --json", falling);
  REQUIRE(json.status == 0);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  REQUIRE(j["warnings"].size() == 1);
  CHECK(j["warnings"][0].get<std::string>().find("1 - error") != std::string::npos);
  // A dip or a slow decline of an accuracy is not flagged.
  CHECK(run("--input {in} --at 800", "step,value\n10,0.5\n20,0.7\n30,0.68\n40,0.72\n50,0.69\n").err.empty());
  CHECK(run("--input {in} --at 800", "step,value\n10,0.80\n20,0.79\n30,0.785\n40,0.78\n").err.empty());
}

TEST_CASE("adaprec-predict predictions that cannot be written fail (a full disk)", "[predictor][cli]") {
  if (::access("/dev/full", W_OK) != 0) return;  // no /dev/full to write to here
  // Written into a full disk, the predictions were lost with exit 0 (an empty file).
  for (const char* form : {"", " --json"}) {
    const Result r = run(std::string("--input - --at 800") + form, "value,step\n0.2,10\n0.3,20\n0.35,30\n", "/dev/full");
    INFO(form << ": " << r.err);
    CHECK(r.status == 1);
    CHECK(r.err == "adaprec-predict: cannot write the predictions to standard output\n");
  }
}

TEST_CASE("adaprec-predict input errors name the line and exit with status 2", "[predictor][cli]") {
  const Result unsorted = run("--input {in} --at 100", "step,value\n10,0.1\n20,0.2\n15,0.3\n");
  CHECK(unsorted.status == 2);
  CHECK(unsorted.err.find("line 4") != std::string::npos);
  const Result range = run("--input - --at 100", "step,value\n10,0.1\n20,1.3\n");
  CHECK(range.status == 2);
  CHECK(range.err.find("line 3: value must be in [0, 1]") != std::string::npos);
  const Result header = run("--input - --at 100", "x,y\n1,2\n");
  CHECK(header.status == 2);
  CHECK(header.err.find("line 1") != std::string::npos);
  const Result badAt = run("--input - --at -5", "step,value\n10,0.1\n");
  CHECK(badAt.status == 2);
  // CLI11 alone reads an empty step as 0 and wraps a seed of -1 to 2^64 - 1.
  const Result emptyAt = run("--input - --at ''", "step,value\n10,0.1\n");
  CHECK(emptyAt.status == 2);
  CHECK(emptyAt.err.find("--at: steps must be finite numbers >= 0, got ''") != std::string::npos);
  const Result negativeSeed = run("--input - --at 5 --seed -1", "step,value\n10,0.1\n");
  CHECK(negativeSeed.status == 2);
  CHECK(negativeSeed.err.find("--seed: must be an integer >= 0, got '-1'") != std::string::npos);
  const Result missing = run("--input /nonexistent/file.csv --at 5", "");
  CHECK(missing.status == 1);
  CHECK(missing.err.find("cannot open") != std::string::npos);
}

TEST_CASE("adaprec-predict --prior-runs learns the prior from finished runs", "[predictor][cli]") {
  // Six finished runs of two curves, all bending alike (y = a + b (1 - exp(-step / 250))) to step 1000,
  // then a new run seen to step 200: with the runs' prior its band at 1000 is narrower.
  const fs::path corpus = fs::temp_directory_path() / ("adaprec-cli-corpus-" + std::to_string(::getpid()) + ".csv");
  {
    std::ofstream out(corpus);
    out << "run,curve,step,value,n\n";
    for (int run = 0; run < 6; ++run) {
      for (int curve = 0; curve < 2; ++curve) {
        for (int step = 0; step <= 1000; step += 100) {
          const double value = 0.2 + 0.02 * run + (0.5 - 0.03 * curve) * (1 - std::exp(-step / 250.0)) +
                               0.01 * std::sin(7.0 * step + run + curve);
          out << run << ',' << curve << ',' << step << ',' << value << ",500\n";
        }
      }
    }
  }
  const char* fresh = "curve,step,value,n\n0,0,0.25,500\n0,100,0.41,500\n0,200,0.52,500\n";
  const Result with = run("--input - --at 1000 --json --prior-runs " + corpus.string(), fresh);
  const Result without = run("--input - --at 1000 --json", fresh);
  INFO(with.err << without.err);
  REQUIRE(with.status == 0);
  REQUIRE(without.status == 0);
  const nlohmann::json a = nlohmann::json::parse(with.out), b = nlohmann::json::parse(without.out);
  CHECK(a["prior_runs"] == 6);
  CHECK(a["prior_step_scale"] == 1000.0);
  CHECK(a["gain_headroom_sd"].get<double>() > 0);
  REQUIRE(a["recalibration"].size() == 3);  // the default fractions 0.1, 0.2, 0.4
  CHECK(a["recalibration"][1]["fraction"] == 0.2);
  CHECK(a["recalibration"][1]["a"].get<double>() > 0);
  CHECK(b.find("prior_runs") == b.end());
  const auto width = [](const nlohmann::json& j) {
    return j["predictions"][0]["q95"].get<double>() - j["predictions"][0]["q05"].get<double>();
  };
  INFO("90% band at 1000 with the runs' prior " << width(a) << ", without " << width(b) << ", mean "
                                                << a["predictions"][0]["mean"] << " (truth 0.71)");
  CHECK(width(a) < 0.7 * width(b));
  CHECK(a["predictions"][0]["q05"].get<double>() < 0.71);
  CHECK(a["predictions"][0]["q95"].get<double>() > 0.71);
  // Up to the runs' horizon nothing is said; past it the band is an extrapolation (+-0.02 at 5x), said.
  CHECK_FALSE(a.contains("warnings"));
  CHECK(with.err.empty());
  const Result past = run("--input - --at 1000,2000 --json --prior-runs " + corpus.string(), fresh);
  REQUIRE(past.status == 0);
  const nlohmann::json p = nlohmann::json::parse(past.out);
  REQUIRE(p["warnings"].size() == 1);
  CHECK(p["warnings"][0].get<std::string>().find("--at 2000 is past the --prior-runs horizon (step 1000") !=
        std::string::npos);
  CHECK(past.err.find("adaprec-predict: warning: --at 2000 is past") != std::string::npos);

  std::ofstream(corpus) << "run,step,value\n0,0,0.2\n0,10,1.5\n";
  const Result badCorpus = run("--input - --at 1000 --prior-runs " + corpus.string(), fresh);
  CHECK(badCorpus.status == 2);
  CHECK(badCorpus.err.find("line 3") != std::string::npos);
  fs::remove(corpus);
  const Result twoRuns = run("--input - --at 1000", "run,step,value\n0,0,0.2\n1,0,0.3\n0,10,0.3\n1,10,0.4\n");
  CHECK(twoRuns.status == 2);
  CHECK(twoRuns.err.find("runs 0 to 1") != std::string::npos);
}

TEST_CASE("adaprec-predict --plot failures are one line, before the fit where possible", "[predictor][cli]") {
  const Result missingDir = run("--input {in} --at 1000 --plot /nonexistent/x.png", kTwoCurves);
  INFO(missingDir.err);
  CHECK(missingDir.status == 2);
  CHECK(countLines(missingDir.err) == 1);
  CHECK(missingDir.err.find("/nonexistent") != std::string::npos);
  CHECK(missingDir.err.find("does not exist") != std::string::npos);
  CHECK(missingDir.err.find("Traceback") == std::string::npos);
  CHECK(missingDir.out.empty());  // refused before anything was predicted

  // A plot script that fails anyway (here: on purpose) is reported in one line with its exception.
  const fs::path script = fs::temp_directory_path() / ("adaprec-failing-plot-" + std::to_string(::getpid()) + ".py");
  std::ofstream(script) << "import sys\nprint('drawing')\nraise RuntimeError('cannot draw here')\n";
  ::setenv("ADAPREC_PLOT_SCRIPT", script.c_str(), 1);
  const Result failing = run("--input {in} --at 1000 --plot " + (fs::temp_directory_path() / "x.png").string(), kTwoCurves);
  ::unsetenv("ADAPREC_PLOT_SCRIPT");
  fs::remove(script);
  INFO(failing.err);
  CHECK(failing.status == 1);
  CHECK(countLines(failing.err) == 1);
  CHECK(failing.err.find("RuntimeError: cannot draw here") != std::string::npos);
  CHECK(failing.err.find("Traceback") == std::string::npos);
}

TEST_CASE("adaprec-predict --method mcmc thins long curves and says so", "[predictor][cli]") {
  std::ostringstream csv;
  csv << "step,value\n";
  for (int i = 1; i <= 600; ++i) csv << i * 10 << ',' << 0.8 - 0.5 / std::sqrt(1.0 + i * 0.05) << '\n';
  const Result capped = run("--input - --at 20000 --json --method mcmc --mcmc-max-points 50", csv.str());
  INFO(capped.err);
  REQUIRE(capped.status == 0);
  const auto j = nlohmann::json::parse(capped.out);
  CHECK(j.at("mcmc_max_points") == 50);
  CHECK(j.at("mcmc_points").at(0).at("points") == 600);
  CHECK(j.at("mcmc_points").at(0).at("used") == 50);
  CHECK(capped.err.find("thinned from 600 to 50 points") != std::string::npos);
  CHECK(std::isfinite(j.at("predictions").at(0).at("mean").get<double>()));

  const Result byDefault = run("--input - --at 20000 --json --method mcmc", csv.str());
  REQUIRE(byDefault.status == 0);
  const auto d = nlohmann::json::parse(byDefault.out);
  CHECK(d.at("mcmc_max_points") == 500);
  CHECK(d.at("mcmc_points").at(0).at("used") == 500);

  const Result bad = run("--input - --at 20000 --mcmc-max-points 5", csv.str());
  CHECK(bad.status != 0);
  CHECK((bad.out + bad.err).find("0 (all points) or an integer >= 10") != std::string::npos);
}

TEST_CASE("cli: curves observed past the schedule's rate of 0 are warned of, the forecast still given") {
  // TOTAL in epochs on curves in steps: the rate is 0 from step 100 while the curves rise to step 400,
  // and the model, which holds a curve flat at rate 0, cannot follow them (a silent low forecast before).
  const Result epochs = run("--input {in} --at 1600 --lr-schedule cosine:100 --json", kTwoCurves);
  REQUIRE(epochs.status == 0);
  const nlohmann::json e = nlohmann::json::parse(epochs.out);
  CHECK(e["predictions"].size() == 2);
  REQUIRE(e["warnings"].size() == 2);  // one per curve
  CHECK(e["warnings"][0].get<std::string>().find(
            "curve 0 is observed up to step 400, past step 100 where --lr-schedule cosine:100 reaches a rate of 0") !=
        std::string::npos);
  CHECK(e["warnings"][1].get<std::string>().find("curve 1 is observed up to step 400") != std::string::npos);
  CHECK(epochs.err.find("adaprec-predict: warning: curve 0 is observed up to step 400, past step 100") !=
        std::string::npos);
  const Result poly = run("--input {in} --at 1600 --lr-schedule poly:399:2", kTwoCurves);
  CHECK(poly.err.find("past step 399") != std::string::npos);
  // Curves that end at the rate's first 0 (an evaluation after the last update), or before it, or a
  // schedule that never reaches 0, say nothing.
  for (const char* spec : {"cosine:400", "cosine:1600:50", "poly:1600:1", "step:0.1:200", "constant"}) {
    const Result fits = run(std::string("--input {in} --at 1600 --lr-schedule ") + spec, kTwoCurves);
    INFO(spec << ": " << fits.err);
    CHECK(fits.status == 0);
    CHECK(fits.err.empty());
  }
}

TEST_CASE("cli: --lr-schedule feeds the schedule-aware model; malformed specs exit 2 with one line") {
  const Result plain = run("--input {in} --at 1600", kTwoCurves);
  const Result cosine = run("--input {in} --at 1600 --lr-schedule cosine:1600", kTwoCurves);
  REQUIRE(plain.status == 0);
  REQUIRE(cosine.status == 0);
  CHECK(countLines(cosine.out) == 3);
  CHECK(cosine.out != plain.out);  // the annealing ahead changes the forecast
  const Result constant = run("--input {in} --at 1600 --lr-schedule constant", kTwoCurves);
  REQUIRE(constant.status == 0);
  CHECK(countLines(constant.out) == 3);
  // An annealing schedule's predictions go through the default map (named in the JSON), narrower than
  // the model's own (--no-schedule-map); a constant schedule has none.
  const Result mapped = run("--input {in} --at 1600 --lr-schedule cosine:1600 --json", kTwoCurves);
  const Result own = run("--input {in} --at 1600 --lr-schedule cosine:1600 --json --no-schedule-map", kTwoCurves);
  const Result flat = run("--input {in} --at 1600 --lr-schedule constant --json", kTwoCurves);
  REQUIRE((mapped.status == 0 && own.status == 0 && flat.status == 0));
  const nlohmann::json jm = nlohmann::json::parse(mapped.out), jo = nlohmann::json::parse(own.out);
  CHECK(jm["recalibration_source"] == "schedule default");
  CHECK(jm["recalibration_points_per_run"] == 30);
  CHECK(jm["recalibration"].size() == 2);
  CHECK_FALSE(jo.contains("recalibration"));
  CHECK_FALSE(nlohmann::json::parse(flat.out).contains("recalibration"));
  for (std::size_t c = 0; c < 2; ++c) {
    const auto width = [c](const nlohmann::json& j) {
      return j["predictions"][c]["q95"].get<double>() - j["predictions"][c]["q05"].get<double>();
    };
    CHECK(width(jm) < width(jo));
  }
  for (const char* spec : {"cosine:0", "step:0.1:500,200", "poly:1600", "linear", "file:/nonexistent.csv"}) {
    const Result bad = run(std::string("--input {in} --at 1600 --lr-schedule ") + spec, kTwoCurves);
    INFO(spec << ": " << bad.err);
    CHECK(bad.status == 2);
    CHECK(countLines(bad.err) == 1);
    CHECK(bad.err.find(std::string("lr schedule '") + spec + "'") != std::string::npos);
  }
  // A step the schedule's areas cannot reach is refused before the fit and before any output (the
  // rows before it used to be printed, then status 2).
  const Result far = run("--input {in} --at 1600,2e9 --lr-schedule cosine:1600", kTwoCurves);
  INFO(far.err);
  CHECK(far.status == 2);
  CHECK(far.out.empty());
  CHECK(far.err.find("--at: with --lr-schedule steps must be at most") != std::string::npos);
  // Just past the limit, the message tells the two apart.
  const Result just = run("--input {in} --at 1000000001 --lr-schedule cosine:1600", kTwoCurves);
  CHECK(just.status == 2);
  CHECK(just.err.find("at most 1000000000, got 1000000001") != std::string::npos);
}
