// Invalid curves, options and CSV input fail with adaprec::Error, the right code and a useful message.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "test_support.hpp"

namespace ap = adaprec::predictor;
using adaprec::ErrorCode;

namespace {
using ap::test::codeOf;

ap::CurveTable parse(const std::string& text) {
  std::istringstream in(text);
  return ap::readCurvesCsv(in);
}

void expectCsvError(const std::string& text, const std::string& fragment) {
  std::string message;
  INFO("input:\n" << text);
  CHECK(codeOf([&] { parse(text); }, &message) == ErrorCode::kMalformedInput);
  INFO("message: " << message);
  CHECK(message.find(fragment) != std::string::npos);
}
}  // namespace

TEST_CASE("invalid curves raise kInvalidArgument", "[predictor][errors]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::vector<ap::Curve>> bad = {
      {},                                              // no curves
      {{{}, {}, {}}},                                  // empty curve
      {{{1, 2}, {0.1}, {}}},                           // size mismatch
      {{{2, 1}, {0.1, 0.2}, {}}},                      // unsorted
      {{{1, 1}, {0.1, 0.2}, {}}},                      // repeated step
      {{{-1, 1}, {0.1, 0.2}, {}}},                     // negative step
      {{{1, 2}, {0.1, 1.2}, {}}},                      // value above 1
      {{{1, 2}, {-0.1, 0.2}, {}}},                     // value below 0
      {{{1, 2}, {0.1, nan}, {}}},                      // NaN value
      {{{1, nan}, {0.1, 0.2}, {}}},                    // NaN step
      {{{1, 2}, {0.1, 0.2}, {10}}},                    // count size mismatch
      {{{1, 2}, {0.1, 0.2}, {10, 0}}},                 // count 0
  };
  for (std::size_t k = 0; k < bad.size(); ++k) {
    INFO("case " << k);
    CHECK(codeOf([&] { ap::fitFast(bad[k]); }) == ErrorCode::kInvalidArgument);
    CHECK(codeOf([&] { ap::fitMcmc(bad[k]); }) == ErrorCode::kInvalidArgument);
  }
  std::string message;
  codeOf([&] { ap::fitFast({{{2, 1}, {0.1, 0.2}, {}}}); }, &message);
  CHECK(message.find("steps must increase") != std::string::npos);
}

TEST_CASE("invalid options and queries raise kInvalidArgument", "[predictor][errors]") {
  const std::vector<ap::Curve> ok = {{{1, 2, 3}, {0.1, 0.2, 0.25}, {}}};
  ap::ModelOptions model;
  model.families = {};
  CHECK(codeOf([&] { ap::fitFast(ok, model); }) == ErrorCode::kInvalidArgument);
  model = {};
  model.noiseMin = 0.5;
  CHECK(codeOf([&] { ap::fitFast(ok, model); }) == ErrorCode::kInvalidArgument);
  for (const std::vector<double>& shared : {std::vector<double>{}, std::vector<double>{-0.01},
                                           std::vector<double>{0.0, 0.01, 0.01}}) {
    model = {};
    model.sharedNoiseSds = shared;
    CHECK(codeOf([&] { ap::fitFast(ok, model); }) == ErrorCode::kInvalidArgument);
  }
  for (double headroomSd : {-0.1, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    model = {};
    model.gainHeadroomSd = headroomSd;
    CHECK(codeOf([&] { ap::fitFast(ok, model); }) == ErrorCode::kInvalidArgument);
    CHECK(codeOf([&] { ap::fitMcmc(ok, model); }) == ErrorCode::kInvalidArgument);
  }
  model = {};
  ap::FastOptions fast;
  fast.grid2d = 1;
  CHECK(codeOf([&] { ap::fitFast(ok, {}, fast); }) == ErrorCode::kInvalidArgument);
  ap::McmcOptions mcmc;
  mcmc.method = ap::McmcMethod::kEnsemble;
  mcmc.walkers = 3;  // the stretch move needs an even split of the ensemble
  CHECK(codeOf([&] { ap::fitMcmc(ok, {}, mcmc); }) == ErrorCode::kInvalidArgument);
  mcmc = {};
  mcmc.method = ap::McmcMethod::kEnsemble;  // the default model has several tau values: not for the ensemble
  CHECK(codeOf([&] { ap::fitMcmc(ok, {}, mcmc); }) == ErrorCode::kInvalidArgument);
  mcmc = {};
  mcmc.walkers = -1;
  CHECK(codeOf([&] { ap::fitMcmc(ok, {}, mcmc); }) == ErrorCode::kInvalidArgument);
  mcmc = {};
  mcmc.burnIn = mcmc.iterations;
  CHECK(codeOf([&] { ap::fitMcmc(ok, {}, mcmc); }) == ErrorCode::kInvalidArgument);
  const ap::Posterior post = ap::fitFast(ok);
  CHECK(codeOf([&] { post.predict(1, 10); }) == ErrorCode::kInvalidArgument);
  CHECK(codeOf([&] { post.predict(0, -1); }) == ErrorCode::kInvalidArgument);
  CHECK(codeOf([&] { post.predictive(0, 10).quantile(1.0); }) == ErrorCode::kInvalidArgument);
  CHECK(codeOf([&] { ap::familyFromName("pow4"); }) == ErrorCode::kInvalidArgument);
  CHECK(ap::familyFromName("weibull") == ap::Family::kWeibull);
}

TEST_CASE("CSV: columns in any order, several curves, counts, comments", "[predictor][csv]") {
  const ap::CurveTable t = parse("# a comment\nn, value ,CURVE,step\r\n100,0.5,1,10\n100,0.2,0,10\n\n100,0.6,1,20\n50,0.3,0,20\n");
  REQUIRE(t.curves.size() == 2);
  CHECK(t.ids == std::vector<long>{0, 1});
  CHECK(t.curves[0].steps == std::vector<double>{10, 20});
  CHECK(t.curves[0].values == std::vector<double>{0.2, 0.3});
  CHECK(t.curves[0].sampleCounts == std::vector<double>{100, 50});
  CHECK(t.curves[1].values == std::vector<double>{0.5, 0.6});
  const ap::CurveTable single = parse("step,value\n0,0.1\n5,2e-1\n");
  REQUIRE(single.curves.size() == 1);
  CHECK(single.ids == std::vector<long>{0});
  CHECK(single.curves[0].sampleCounts.empty());
  CHECK(single.curves[0].values[1] == 0.2);
  // TensorBoard's CSV export: its wall-time column is accepted and not read.
  const ap::CurveTable board = parse("Wall time,Step,Value\n1700000000.5,10,0.5\n1700000012.25,20,0.6\n");
  REQUIRE(board.curves.size() == 1);
  CHECK(board.curves[0].steps == std::vector<double>{10, 20});
  CHECK(board.curves[0].values == std::vector<double>{0.5, 0.6});
  expectCsvError("wall time,step,value,wall_time\n1,1,0.5,1\n", "column 'wall_time' appears twice");
}

TEST_CASE("CSV errors name the line", "[predictor][csv]") {
  expectCsvError("", "no header");
  expectCsvError("step,accuracy\n1,0.5\n", "line 1: unknown column 'accuracy'");
  expectCsvError("step,curve\n1,0\n", "line 1: the header must name");
  expectCsvError("step,value,step\n", "line 1: column 'step' appears twice");
  expectCsvError("step,value\n", "no data rows");
  expectCsvError("step,value\n1,0.5\n2,abc\n", "line 3: column 'value' is not a finite number");
  expectCsvError("step,value\n1,0.5\n2,nan\n", "line 3");
  expectCsvError("step,value\n1,0.5\n2\n", "line 3: 1 fields, the header has 2");
  expectCsvError("step,value\n1,0.5\n2,1.5\n", "line 3: value must be in [0, 1]");
  expectCsvError("step,value\n-1,0.5\n", "line 2: step must be >= 0");
  expectCsvError("step,value\n1,0.5\n\n5,0.6\n3,0.7\n", "line 5: step 3 of curve 0 does not follow step 5 (line 4)");
  expectCsvError("step,value,curve\n1,0.5,0.5\n", "line 2: curve must be a non-negative integer");
  expectCsvError("step,value,n\n1,0.5,0\n", "line 2: n must be > 0");
}
