// libFuzzer harness: the predictor's learning-curve CSV reader (readCurvesCsv, adaprec-predict's input).
//
// Findings besides crashes and sanitizer reports: an exception other than adaprec::Error; an accepted
// table that breaks what predictor.hpp promises of it: one id and run per curve, runs ascending and
// (run, curve) pairs strictly increasing, every curve non-empty with strictly increasing steps >= 0,
// values in [0, 1], and sample counts either absent or one per step and > 0, all finite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include "adaprec/error.hpp"
#include "adaprec/predictor.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace adaprec;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  predictor::CurveTable table;
  try {
    table = predictor::readCurvesCsv(in);
  } catch (const Error& e) {
    FUZZ_REQUIRE(e.code() == ErrorCode::kMalformedInput);
    return 0;
  }
  FUZZ_REQUIRE(!table.curves.empty());
  FUZZ_REQUIRE(table.ids.size() == table.curves.size() && table.runs.size() == table.curves.size());
  bool withCounts = !table.curves[0].sampleCounts.empty();
  for (std::size_t c = 0; c < table.curves.size(); ++c) {
    const predictor::Curve& curve = table.curves[c];
    FUZZ_REQUIRE(table.ids[c] >= 0 && table.runs[c] >= 0);
    if (c > 0) {
      FUZZ_REQUIRE(std::pair(table.runs[c - 1], table.ids[c - 1]) < std::pair(table.runs[c], table.ids[c]));
    }
    FUZZ_REQUIRE(!curve.steps.empty() && curve.values.size() == curve.steps.size());
    FUZZ_REQUIRE(curve.sampleCounts.empty() != withCounts);
    FUZZ_REQUIRE(curve.sampleCounts.empty() || curve.sampleCounts.size() == curve.steps.size());
    for (std::size_t i = 0; i < curve.steps.size(); ++i) {
      FUZZ_REQUIRE(std::isfinite(curve.steps[i]) && curve.steps[i] >= 0);
      FUZZ_REQUIRE(i == 0 || curve.steps[i] > curve.steps[i - 1]);
      FUZZ_REQUIRE(std::isfinite(curve.values[i]) && curve.values[i] >= 0 && curve.values[i] <= 1);
      if (withCounts) FUZZ_REQUIRE(std::isfinite(curve.sampleCounts[i]) && curve.sampleCounts[i] > 0);
    }
  }
  std::size_t curves = 0;
  for (const auto& run : predictor::curvesByRun(table)) curves += run.size();
  FUZZ_REQUIRE(curves == table.curves.size());
  return 0;
}
