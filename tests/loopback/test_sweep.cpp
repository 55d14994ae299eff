// Loopback sweep: every algorithm x every format x ranks {1,2,3,4,5,7,8,16} x counts
// {0,1,2,7,ranks-1,1000,2^16+3}: lossless formats exact on integer inputs, lossy ones within the
// documented bound vs an fp64 reference, all ranks bit-identical. Ranks are grouped two per emulated
// node so hierarchical (and auto's choice of it) crosses nodes.
#include <catch2/catch.hpp>

#include <string>

#include "calibration_directory.hpp"
#include "engine_check.hpp"
#include "loopback_run.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

constexpr int kRanksPerNode = 2;

void sweep(Algorithm algorithm) {
  const int rankCounts[] = {1, 2, 3, 4, 5, 7, 8, 16};
  int cases = 0;
  for (Format format : allFormats()) {
    for (int p : rankCounts) {
      const std::size_t counts[] = {0, 1, 2, 7, static_cast<std::size_t>(p - 1), 1000, 65539};
      for (std::size_t count : counts) {
        const bool integers = isLossless(format);
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, count, integers));
        AllreduceOptions opt;
        opt.format.format = format;
        opt.algorithm = algorithm;
        const bool outOfPlace = (count + static_cast<std::size_t>(p)) % 2 == 1;
        INFO("algorithm " << algorithmName(algorithm) << " format " << formatName(format) << " ranks "
                          << p << " count " << count << " outOfPlace " << outOfPlace << " seed "
                          << kSeed);
        std::vector<AllreduceOptions> options(p, opt);
        const LoopbackOutcome got = runLoopbackAllreduce(kRanksPerNode, inputs, options, outOfPlace);
        if (got.anyError()) {
          // The one documented refusal: native carries only fp32/bf16/fp16 (all ranks refuse).
          const bool expected = algorithm == Algorithm::kNative && format != Format::kFp32 &&
                                format != Format::kBf16 && format != Format::kFp16;
          REQUIRE(expected);
          REQUIRE(got.allErrors(ErrorCode::kUnsupported));
          continue;
        }
        const Algorithm ran = got.stats[0].algorithm;
        const Format wire = got.stats[0].format;
        if (algorithm != Algorithm::kAuto) REQUIRE(ran == algorithm);
        const int nodes = (p + kRanksPerNode - 1) / kRanksPerNode;
        const int q = detail::quantizationsPerValue(ran, wire, p, nodes);
        const std::string failure =
            checkResults(inputs, got.outputs, wire, q, integers && isLossless(wire), false);
        INFO("ran " << algorithmName(ran) << " wire " << formatName(wire) << ": " << failure);
        REQUIRE(failure.empty());
        ++cases;
      }
    }
  }
  CHECK(cases > 0);
}

}  // namespace

TEST_CASE("sweep ring", "[sweep][ring]") { sweep(Algorithm::kRing); }
TEST_CASE("sweep twoshot", "[sweep][twoshot]") { sweep(Algorithm::kTwoShot); }
TEST_CASE("sweep rabenseifner", "[sweep][rabenseifner]") { sweep(Algorithm::kRabenseifner); }
TEST_CASE("sweep recursive_doubling", "[sweep][recursive_doubling]") {
  sweep(Algorithm::kRecursiveDoubling);
}
TEST_CASE("sweep native", "[sweep][native]") { sweep(Algorithm::kNative); }
TEST_CASE("sweep hierarchical", "[sweep][hierarchical]") { sweep(Algorithm::kHierarchical); }
TEST_CASE("sweep auto", "[sweep][auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_sweep_auto");
  sweep(Algorithm::kAuto);
}
