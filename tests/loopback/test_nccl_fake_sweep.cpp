// The engine sweep over the NCCL transport on the NCCL fake (issue 17): every algorithm (auto too) x
// fp32, bf16, fp8s, table4 x ranks 1..8 and 16 x counts 0, 1, 7, p-1, 1000, 65539, in place and out of
// place, plus error feedback (two calls on one key). Each case must hold the host sweep's properties —
// exact where lossless, within the documented bound where lossy, bit-identical on every rank — and be
// bit-identical to the same run over the loopback transport. The fake is strict (rendezvous sends,
// groups run in stream order, tagless in-order matching), so a batching that could deadlock or pair the
// wrong messages under NCCL fails here, as a timeout naming the peer or a wrong result.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "calibration_directory.hpp"
#include "engine_check.hpp"
#include "nccl_fake_run.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

const char* const kFormats[] = {"fp32", "bf16", "fp8s", "table4", "fp8s+ef", "table4+ef"};

bool sameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t r = 0; r < a.size(); ++r) {
    if (a[r].size() != b[r].size()) return false;
    if (!a[r].empty() && std::memcmp(a[r].data(), b[r].data(), a[r].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

bool ranksAgree(const std::vector<std::vector<float>>& outputs) {
  for (const std::vector<float>& o : outputs)
    if (!sameBits({o}, {outputs[0]})) return false;
  return true;
}

void sweep(Algorithm algorithm, bool stageThroughDevice, std::vector<int> rankCounts) {
  int cases = 0;
  for (const char* spec : kFormats) {
    AllreduceOptions opt;
    opt.format = parseFormatSpec(spec);
    opt.algorithm = algorithm;
    opt.key = "grad";
    const Format format = opt.format.format;
    const int calls = opt.format.errorFeedback ? 2 : 1;
    for (int p : rankCounts) {
      const std::size_t counts[] = {0, 1, 7, static_cast<std::size_t>(p - 1), 1000, 65539};
      for (std::size_t count : counts) {
        for (bool outOfPlace : {false, true}) {
          if (count == 65539 && outOfPlace != ((count + static_cast<std::size_t>(p)) % 2 == 1)) continue;
          const bool integers = isLossless(format);
          std::vector<std::vector<float>> inputs;
          for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, count, integers));
          INFO("algorithm " << algorithmName(algorithm) << " format " << spec << " ranks " << p
                            << " count " << count << " outOfPlace " << outOfPlace << " staged "
                            << stageThroughDevice);
          const RunSetup setup{p, 2, stageThroughDevice};
          const Outcome nccl = runAllreduces(true, setup, inputs, opt, outOfPlace, calls);
          Outcome loop = runAllreduces(false, setup, inputs, opt, outOfPlace, calls);
          if (loop.anyError()) {
            // native refuses lossy formats on every rank, over both transports alike.
            REQUIRE(loop.allErrors(ErrorCode::kUnsupported));
            REQUIRE(nccl.allErrors(ErrorCode::kUnsupported));
            continue;
          }
          REQUIRE_FALSE(nccl.anyError());
          const Algorithm ran = nccl.stats[0].algorithm;
          const Format wire = nccl.stats[0].format;
          bool sameCalls = true;
          for (int call = 0; call < calls; ++call)
            sameCalls = sameCalls && nccl.rank0Calls[call].algorithm == loop.rank0Calls[call].algorithm;
          if (!sameCalls) {
            // auto decides from timings measured on each transport (the model's calibration, its
            // trial's first native call): compare with loopback running, call by call, what auto
            // ran over NCCL.
            REQUIRE(algorithm == Algorithm::kAuto);
            std::vector<AllreduceOptions> replay;
            for (const AllreduceStats& ranCall : nccl.rank0Calls) {
              AllreduceOptions same = opt;
              same.algorithm = ranCall.algorithm;
              // auto's native sends fp32 whatever the format (an explicit native with bf16 would sum
              // in bf16): run what it ran, in the wire format it ran.
              same.format.format = ranCall.format;
              if (isLossless(ranCall.format)) same.format.errorFeedback = false;
              replay.push_back(same);
            }
            loop = runAllreduces(false, setup, inputs, opt, outOfPlace, calls, replay);
            REQUIRE_FALSE(loop.anyError());
          }
          if (algorithm != Algorithm::kAuto) REQUIRE(ran == algorithm);
          const int nodes = (p + 1) / 2;
          const int q = detail::quantizationsPerValue(ran, wire, p, nodes);
          // The first call has no residual yet: the plain bound holds. Later error-feedback calls are
          // checked for identity with loopback only (their error is the residual's, not the bound's).
          const std::string failure =
              checkResults(inputs, nccl.outputs[0], wire, q, integers && isLossless(wire), false);
          INFO("ran " << algorithmName(ran) << " wire " << formatName(wire) << ": " << failure);
          REQUIRE(failure.empty());
          for (int call = 0; call < calls; ++call) {
            INFO("call " << call);
            REQUIRE(sameBits(nccl.outputs[static_cast<std::size_t>(call)],
                             loop.outputs[static_cast<std::size_t>(call)]));
            REQUIRE(ranksAgree(nccl.outputs[static_cast<std::size_t>(call)]));
          }
          ++cases;
        }
      }
    }
  }
  CHECK(cases > 0);
}

const std::vector<int> kRanks = {1, 2, 3, 4, 5, 6, 7, 8, 16};

}  // namespace

TEST_CASE("nccl fake sweep ring", "[nccl_fake][sweep][ring]") { sweep(Algorithm::kRing, false, kRanks); }
TEST_CASE("nccl fake sweep twoshot", "[nccl_fake][sweep][twoshot]") {
  sweep(Algorithm::kTwoShot, false, kRanks);
}
TEST_CASE("nccl fake sweep rabenseifner", "[nccl_fake][sweep][rabenseifner]") {
  sweep(Algorithm::kRabenseifner, false, kRanks);
}
TEST_CASE("nccl fake sweep recursive_doubling", "[nccl_fake][sweep][recursive_doubling]") {
  sweep(Algorithm::kRecursiveDoubling, false, kRanks);
}
TEST_CASE("nccl fake sweep native", "[nccl_fake][sweep][native]") { sweep(Algorithm::kNative, false, kRanks); }
TEST_CASE("nccl fake sweep hierarchical", "[nccl_fake][sweep][hierarchical]") {
  sweep(Algorithm::kHierarchical, false, kRanks);
}
TEST_CASE("nccl fake sweep auto", "[nccl_fake][sweep][auto]") {
  ScopedCalibrationDirectory calibrations("adaprec_nccl_fake_sweep_auto");
  sweep(Algorithm::kAuto, false, kRanks);
}
// What the real NCCL path does with host buffers today: every message and the native sum staged through
// "device" scratch with stream-ordered copies.
TEST_CASE("nccl fake sweep, messages staged through device scratch", "[nccl_fake][sweep][staged]") {
  ScopedCalibrationDirectory calibrations("adaprec_nccl_fake_sweep_staged");
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRabenseifner,
                              Algorithm::kRecursiveDoubling, Algorithm::kNative, Algorithm::kHierarchical,
                              Algorithm::kAuto})
    sweep(algorithm, true, {1, 3, 4, 8});
}
