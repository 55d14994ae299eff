// adaprec-predict as a user runs it: CSV and JSON output, stdin, and error messages naming the line.
#include <catch2/catch.hpp>
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

// Runs adaprec-predict with `args`, feeding `input` as the file named by {in} (or stdin with '-').
Result run(const std::string& args, const std::string& input) {
  const char* exe = std::getenv("ADAPREC_PREDICT");
  REQUIRE(exe != nullptr);
  const fs::path dir = fs::temp_directory_path() / ("adaprec-cli-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.csv") << input;
  std::string a = args;
  const auto pos = a.find("{in}");
  if (pos != std::string::npos) a.replace(pos, 4, (dir / "in.csv").string());
  const std::string command = std::string(exe) + " " + a + " < " + (dir / "in.csv").string() + " > " +
                              (dir / "out").string() + " 2> " + (dir / "err").string();
  const int raw = std::system(command.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = slurp(dir / "out");
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
  const Result missing = run("--input /nonexistent/file.csv --at 5", "");
  CHECK(missing.status == 1);
  CHECK(missing.err.find("cannot open") != std::string::npos);
}
