// LrSchedule: the spec forms, their values, the annealing areas, and one-line errors for malformed specs.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numbers>
#include <string>
#include <unistd.h>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"

namespace ap = adaprec::predictor;

namespace {
std::string writeFile(const std::string& text) {
  const std::string path = "/tmp/adaprec-lr-schedule-test-" + std::to_string(::getpid()) + ".csv";
  std::ofstream(path) << text;
  return path;
}

// The message of the kInvalidArgument error parse() throws (fails the test if it does not).
std::string parseError(const std::string& spec) {
  try {
    ap::LrSchedule::parse(spec);
  } catch (const adaprec::Error& e) {
    CHECK(e.code() == adaprec::ErrorCode::kInvalidArgument);
    return e.what();
  }
  FAIL("accepted malformed spec '" << spec << "'");
  return "";
}
}  // namespace

TEST_CASE("lr schedule: every form gives the documented rate") {
  CHECK(ap::LrSchedule::parse("constant").lrAt(1234) == 1.0);
  const ap::LrSchedule cosine = ap::LrSchedule::parse("cosine:100");
  CHECK(cosine.lrAt(0) == Approx(1.0));
  CHECK(cosine.lrAt(50) == Approx(0.5));
  CHECK(cosine.lrAt(25) == Approx(0.5 * (1 + std::cos(std::numbers::pi / 4))));
  CHECK(cosine.lrAt(100) == Approx(0.0).margin(1e-15));
  CHECK(cosine.lrAt(150) == Approx(0.0).margin(1e-15));
  const ap::LrSchedule warm = ap::LrSchedule::parse("cosine:110:10");
  CHECK(warm.lrAt(0) == 0.0);
  CHECK(warm.lrAt(5) == Approx(0.5));
  CHECK(warm.lrAt(10) == Approx(1.0));
  CHECK(warm.lrAt(60) == Approx(0.5));
  const ap::LrSchedule poly = ap::LrSchedule::parse("poly:100:2");
  CHECK(poly.lrAt(50) == Approx(0.25));
  CHECK(poly.lrAt(200) == 0.0);
  const ap::LrSchedule step = ap::LrSchedule::parse("step:0.1:30,60");
  CHECK(step.lrAt(29.5) == 1.0);
  CHECK(step.lrAt(30) == Approx(0.1));
  CHECK(step.lrAt(60) == Approx(0.01));
  const std::string path = writeFile("step,lr\n# comment\n0,0.1\n100,0.05\n\n200,0.05\n");
  const ap::LrSchedule file = ap::LrSchedule::parse("file:" + path);
  CHECK(file.lrAt(0) == Approx(0.1));
  CHECK(file.lrAt(50) == Approx(0.075));
  CHECK(file.lrAt(500) == Approx(0.05));
  CHECK_FALSE(file.neverAnneals());
  std::remove(path.c_str());
  CHECK(ap::LrSchedule::parse("constant").neverAnneals());
  CHECK(ap::LrSchedule::parse("step:1:10,20").neverAnneals());  // multiplied by 1: constant, no map
  CHECK_FALSE(ap::LrSchedule::parse("step:0.5:10").neverAnneals());
  CHECK_FALSE(cosine.neverAnneals());
}

TEST_CASE("lr schedule: zeroFrom is the first step of lr 0 for good") {
  const double never = std::numeric_limits<double>::infinity();
  CHECK(ap::LrSchedule::parse("cosine:100").zeroFrom() == 100.0);
  CHECK(ap::LrSchedule::parse("cosine:110:10").zeroFrom() == 110.0);
  CHECK(ap::LrSchedule::parse("poly:250:0.5").zeroFrom() == 250.0);
  CHECK(ap::LrSchedule::parse("constant").zeroFrom() == never);
  CHECK(ap::LrSchedule::parse("step:0.1:30,60").zeroFrom() == never);  // never reaches 0
  CHECK(ap::LrSchedule::fromPoints({0, 100, 200, 300}, {0.1, 0.0, 0.05, 0.0}).zeroFrom() == 300.0);
  CHECK(ap::LrSchedule::fromPoints({0, 100, 200, 300}, {0.1, 0.05, 0.0, 0.0}).zeroFrom() == 200.0);
  CHECK(ap::LrSchedule::fromPoints({0, 100}, {0.1, 0.05}).zeroFrom() == never);
  // At and after it the rate is 0; just before, it is not.
  for (const char* spec : {"cosine:100", "cosine:110:10", "poly:250:0.5"}) {
    const ap::LrSchedule s = ap::LrSchedule::parse(spec);
    CHECK(s.lrAt(s.zeroFrom()) == Approx(0.0).margin(1e-15));
    CHECK(s.lrAt(s.zeroFrom() - 1) > 0);
  }
}

TEST_CASE("lr schedule: a subnormal peak is refused up front") {
  // Only ratios matter, but a peak below double's normal range leaves the areas no scale; the fit
  // then failed with an internal error (a hostile pass through AdaPrec_ControllerSetLearningRates).
  CHECK_THROWS_WITH(ap::LrSchedule::fromPoints({0, 10}, {1e-310, 5e-311}), Catch::Contains("normal double"));
  const std::string path = writeFile("step,lr\n0,1e-310\n10,1e-311\n");
  parseError("file:" + path);  // the file form reads rates below the normal range as malformed
  std::remove(path.c_str());
  CHECK_NOTHROW(ap::LrSchedule::fromPoints({0, 10}, {std::ldexp(1.0, -1020), 1e-310}));  // normal peak
}

TEST_CASE("lr schedule: forward and annealing areas follow Tissue et al.'s sums") {
  // constant: S1 = step, S2 = 0.
  const auto c = ap::LrSchedule::parse("constant").areas(37.5, 0.999);
  CHECK(c[0] == 37.5);
  CHECK(c[1] == 0.0);
  // step:0.5:10 with momentum 0: S1(s) = sum_{i<s} lr(i); S2(s) = sum_{1<=i<s} (lr(i-1) - lr(i))^+.
  const ap::LrSchedule step = ap::LrSchedule::parse("step:0.5:10");
  auto a = step.areas(10, 0.0);
  CHECK(a[0] == Approx(10.0));
  CHECK(a[1] == 0.0);
  a = step.areas(11, 0.0);  // update 10 was taken at 0.5, after a decrease of 0.5
  CHECK(a[0] == Approx(10.5));
  CHECK(a[1] == Approx(0.5));
  a = step.areas(20, 0.0);
  CHECK(a[0] == Approx(15.0));
  CHECK(a[1] == Approx(0.5));  // momentum 0: the decrease itself, once
  a = step.areas(15.5, 0.0);  // linear between 15 and 16
  CHECK(a[0] == Approx(12.75));
  // With momentum the decrease keeps counting: m_i = 0.5 lambda^(i - 10) (Tissue's lambda near 1: the
  // area between the peak rate and the schedule).
  a = step.areas(13, 0.5);
  CHECK(a[1] == Approx(0.5 * (1 + 0.5 + 0.25)));
  CHECK(step.areas(20, 0.999999)[1] == Approx(0.5 * 10).epsilon(1e-4));
  // Warm-up increases do not count.
  CHECK(ap::LrSchedule::parse("cosine:100:50").areas(50, 0.9)[1] == 0.0);
  // Scaled areas: divided by the largest power of two <= the peak, exactly; finite where the areas are not.
  const ap::LrSchedule points = ap::LrSchedule::fromPoints({0, 10, 20}, {3e-3, 1e-3, 0});
  const auto scaled = points.scaledAreas(15.5, 0.9), plain = points.areas(15.5, 0.9);
  CHECK(plain[0] == std::ldexp(scaled[0], -9));  // 2^-9 <= 3e-3 < 2^-8
  CHECK(plain[1] == std::ldexp(scaled[1], -9));
  CHECK(step.scaledAreas(11, 0.5) == step.areas(11, 0.5));  // analytic forms: peak 1
  // Past a schedule's end at rate 0 nothing moves: the update that reaches 0 counts its decrease, the
  // steps after it add nothing, the momentum's tail included (forecasts there had kept rising).
  for (const char* spec : {"cosine:100", "poly:100:2", "cosine:100:20"}) {
    INFO(spec);
    const ap::LrSchedule ends = ap::LrSchedule::parse(spec);
    const auto atEnd = ends.areas(101, 0.999);
    CHECK(atEnd[1] > ends.areas(100, 0.999)[1]);
    CHECK(ends.areas(150, 0.999) == atEnd);
    CHECK(ends.areas(5000, 0.999) == atEnd);
  }
  const ap::LrSchedule pause = ap::LrSchedule::fromPoints({0, 10, 11, 20, 21}, {1, 0, 0, 0, 1});
  CHECK(pause.areas(20, 0.9) == pause.areas(12, 0.9));  // a pause at rate 0 mid-run: frozen too
  CHECK(pause.areas(23, 0.9)[0] > pause.areas(20, 0.9)[0]);
  const ap::LrSchedule huge = ap::LrSchedule::fromPoints({0, 100}, {1e307, 5e306});
  CHECK(std::isinf(huge.areas(100, 0.999)[0]));
  CHECK(std::isfinite(huge.scaledAreas(100, 0.999)[0]));
}

TEST_CASE("lr schedule: malformed specs are refused with one clear line") {
  struct Case {
    const char* spec;
    const char* says;
  };
  const Case cases[] = {
      {"", "unknown form"},
      {"linear:100", "unknown form (valid: constant, cosine:TOTAL"},
      {"Cosine:100", "unknown form"},
      {"constant:1", "constant takes no parameters"},
      {"cosine", "expected cosine:TOTAL or cosine:TOTAL:WARMUP"},
      {"cosine:", "TOTAL must be a number > 0"},
      {"cosine:0", "TOTAL must be a number > 0"},
      {"cosine:-5", "TOTAL must be a number > 0"},
      {"cosine:abc", "TOTAL must be a number > 0"},
      {"cosine:100x", "TOTAL must be a number > 0"},
      {"cosine:inf", "TOTAL must be a number > 0"},
      {"cosine:nan", "TOTAL must be a number > 0"},
      {"cosine:0x100", "TOTAL must be a number > 0"},
      {"step:0.5:0x10", "steps must be numbers > 0"},
      {"cosine:100:100", "WARMUP must be a number in [0, TOTAL)"},
      {"cosine:100:-1", "WARMUP must be a number in [0, TOTAL)"},
      {"cosine:100:10:5", "expected cosine:TOTAL or cosine:TOTAL:WARMUP"},
      {"poly:100", "expected poly:TOTAL:POWER"},
      {"poly:100:0", "POWER must be a number > 0"},
      {"poly:0:2", "TOTAL must be a number > 0"},
      {"step:0.1", "expected step:GAMMA:S1,S2,..."},
      {"step:0.1:", "step: needs at least one step"},
      {"step:0:10", "GAMMA must be a number in (0, 1]"},
      {"step:1.5:10", "GAMMA must be a number in (0, 1]"},
      {"step:0.1:10,5", "steps must increase, got 10 then 5"},
      {"step:0.1:10,10", "steps must increase"},
      {"step:0.1:0", "steps must be numbers > 0"},
      {"step:0.1:10,,20", "steps must be numbers > 0, got ''"},
      {"step:0.1:10,", "steps must be numbers > 0, got ''"},
      {"step:0.1: 10", "steps must be numbers > 0"},
      {"file:", "file: needs a PATH"},
      {"file:/nonexistent/lr.csv", "cannot open /nonexistent/lr.csv"},
  };
  for (const Case& c : cases) {
    const std::string message = parseError(c.spec);
    INFO("spec '" << c.spec << "': " << message);
    CHECK(message.find(c.says) != std::string::npos);
    CHECK(message.find("lr schedule '" + std::string(c.spec) + "'") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("lr schedule: a malformed file names its line") {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"step,lr\n0,0.1\n10,0.1\n5,0.05\n", "line 4: steps must increase, got 10 then 5"},
      {"0,0.1\n0,0.1\n", "line 2: steps must increase"},
      {"0,0.1\n10,-0.1\n", "line 2: lr must be >= 0"},
      {"0,0.1\n10,nan\n", "line 2: expected 'step,lr'"},
      {"0,0.1\n10,inf\n", "line 2: expected 'step,lr'"},
      {"-1,0.1\n", "line 1: step must be >= 0"},
      {"0,0.1,3\n", "line 1: expected 'step,lr'"},
      {"0;0.1\n", "line 1: expected 'step,lr'"},
      {"step,lr\n", "has no 'step,lr' rows"},
      {"0,0\n10,0\n", "every lr is 0"},
  };
  for (const Case& c : cases) {
    const std::string path = writeFile(c.text);
    const std::string message = parseError("file:" + path);
    std::remove(path.c_str());
    INFO(message);
    CHECK(message.find(c.says) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("lr schedule: fromPoints is the file form on the same rows") {
  const std::vector<double> steps = {0, 3, 10, 25, 40};
  const std::vector<double> lrs = {0.02, 0.05, 0.05, 0.01, 0.0};
  const std::string path = writeFile("step,lr\n0,0.02\n3,0.05\n10,0.05\n25,0.01\n40,0\n");
  const ap::LrSchedule file = ap::LrSchedule::parse("file:" + path);
  std::remove(path.c_str());
  const ap::LrSchedule points = ap::LrSchedule::fromPoints(steps, lrs);
  CHECK(points.spec() == "points:5");
  CHECK(points.peak() == 0.05);
  CHECK(file.peak() == 0.05);
  CHECK(ap::LrSchedule::parse("cosine:100:10").peak() == 1.0);
  CHECK_FALSE(points.neverAnneals());
  for (double step = 0; step <= 50; step += 0.5) {
    INFO("step " << step);
    CHECK(points.lrAt(step) == file.lrAt(step));
    const auto a = points.areas(step, ap::kAnnealingMomentum), b = file.areas(step, ap::kAnnealingMomentum);
    CHECK(a[0] == b[0]);
    CHECK(a[1] == b[1]);
  }
  CHECK(ap::LrSchedule::fromPoints({0, 1}, {0.1, 0.2}).neverAnneals());
}

TEST_CASE("lr schedule: fromPoints refuses malformed points with one line") {
  struct Case {
    std::vector<double> steps, lrs;
    const char* says;
  };
  const double nan = std::nan("");
  const Case cases[] = {
      {{0, 1}, {0.1}, "2 steps but 1 rates"},
      {{}, {}, "no points"},
      {{0, 1, 1}, {0.1, 0.1, 0.1}, "point 2: steps must increase, got 1 then 1"},
      {{-1}, {0.1}, "point 0: step must be >= 0"},
      {{0, 1}, {0.1, -0.1}, "point 1: lr must be >= 0"},
      {{0, 1}, {0.1, nan}, "point 1: step and lr must be finite"},
      {{0, INFINITY}, {0.1, 0.1}, "point 1: step and lr must be finite"},
      {{0, 1}, {0.0, 0.0}, "every lr is 0"},
  };
  for (const Case& c : cases) {
    std::string message;
    try {
      ap::LrSchedule::fromPoints(c.steps, c.lrs);
      FAIL("accepted " << c.says);
    } catch (const adaprec::Error& e) {
      CHECK(e.code() == adaprec::ErrorCode::kInvalidArgument);
      message = e.what();
    }
    INFO(message);
    CHECK(message.find(c.says) != std::string::npos);
    CHECK(message.find("lr schedule 'points:") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}
