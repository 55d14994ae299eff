// ReductionPipeline and CommThread with a fake reducer (no MPI): which calls run on which thread and
// when, what double buffering hands back, that every reduction is counted once, and that a failing
// reduction reaches the training thread. Also built under ThreadSanitizer (tools/test --tsan), where
// it checks that the training thread and the communication thread share no unsynchronized memory.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "adaprec/error.hpp"
#include "trainer/comm_thread.hpp"
#include "trainer/reduction_pipeline.hpp"
#include "trainer/reduction_tuner.hpp"

using namespace adaprec;
using namespace adaprec::trainer;

namespace {

// "Reduces" a bucket by doubling it and adding 1 (so that a bucket reduced twice, or not at all,
// shows); one bucket per layer. Records the calls and the thread that made them.
class FakeReducer final : public GradientReducer {
 public:
  std::string name() const override { return "fake"; }
  std::vector<Bucket> buckets(const std::vector<LayerRange>& layers) const override {
    std::vector<Bucket> out;
    for (std::size_t i = 0; i < layers.size(); ++i) out.push_back({i, i + 1});
    return out;
  }
  ReduceStats reduceBucket(std::span<float> grads, const std::vector<LayerRange>& layers, Bucket b) override {
    if (failAt == static_cast<int>(b.first)) throw std::runtime_error("peer gone");
    const LayerRange& r = layers[b.first];
    for (std::int64_t i = r.offset; i < r.offset + r.count; ++i) grads[static_cast<std::size_t>(i)] = 2 * grads[static_cast<std::size_t>(i)] + 1;
    std::lock_guard lock(mutex);
    calls.push_back(b.first);
    threads.push_back(std::this_thread::get_id());
    ReduceStats s;
    s.wireBytes = static_cast<std::uint64_t>(r.count);
    s.fp32Bytes = 4 * static_cast<std::uint64_t>(r.count);
    s.seconds = 0.001;
    return s;
  }
  std::vector<std::string> layerFormats() const override { return {}; }
  void setFormats(const std::vector<FormatSpec>&) override {}
  std::vector<FormatSpec> formats() const override { return {}; }

  std::mutex mutex;
  std::vector<std::size_t> calls;
  std::vector<std::thread::id> threads;
  int failAt = -1;
};

const std::vector<LayerRange> kLayers = {{"a", 0, 3}, {"b", 3, 2}, {"c", 5, 4}};

std::vector<float> ramp(float start) {
  std::vector<float> v(9);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return v;
}

std::vector<float> reducedRamp(float start) {
  std::vector<float> v = ramp(start);
  for (float& x : v) x = 2 * x + 1;
  return v;
}

}  // namespace

TEST_CASE("comm thread: jobs run in order on one other thread; wait rethrows the first failure once", "[pipeline]") {
  CommThread thread;
  std::vector<int> order;
  std::atomic<bool> otherThread{true};
  const auto main = std::this_thread::get_id();
  for (int i = 0; i < 100; ++i)
    thread.post([&, i] {
      order.push_back(i);
      if (std::this_thread::get_id() == main) otherThread = false;
    });
  thread.wait();
  CHECK(thread.idle());
  CHECK(otherThread);
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
  bool ranAfterFailure = false;
  thread.post([] { throw std::runtime_error("first"); });
  thread.post([&] { ranAfterFailure = true; });
  CHECK_THROWS_WITH(thread.wait(), "first");
  CHECK_FALSE(ranAfterFailure);
  CHECK_NOTHROW(thread.wait());
}

TEST_CASE("overlap posts each bucket when backward has finished it, on the communication thread", "[pipeline]") {
  FakeReducer reducer;
  ReductionPipeline pipeline(reducer, ReductionMode::kOverlap);
  std::vector<float> grads = ramp(1);
  pipeline.begin(grads, kLayers);
  // Backward finishes layer c (offset 5): only bucket c may be posted, and it may run now.
  pipeline.gradientsFinalFrom(5);
  pipeline.drain();
  {
    std::lock_guard lock(reducer.mutex);
    REQUIRE(reducer.calls == std::vector<std::size_t>{2});
  }
  pipeline.gradientsFinalFrom(3);
  pipeline.gradientsFinalFrom(0);
  const ReduceStats s = pipeline.finish();
  CHECK(reducer.calls == std::vector<std::size_t>{2, 1, 0});  // backward order
  for (const auto& id : reducer.threads) CHECK(id != std::this_thread::get_id());
  CHECK(grads == reducedRamp(1));
  CHECK(s.wireBytes == 9);
  CHECK(s.fp32Bytes == 36);
  CHECK(s.seconds == Approx(0.003));
  CHECK(s.exposedSeconds >= 0);
  // finish() posts what backward never announced; sequential gives the same gradients.
  std::vector<float> again = ramp(1);
  pipeline.begin(again, kLayers);
  pipeline.finish();
  CHECK(again == grads);
  FakeReducer reference;
  ReductionPipeline sequential(reference, ReductionMode::kSequential);
  std::vector<float> sequentialGrads = ramp(1);
  sequential.begin(sequentialGrads, kLayers);
  sequential.gradientsFinalFrom(0);
  CHECK(reference.calls.empty());  // sequential reduces in finish(), on the training thread
  const ReduceStats t = sequential.finish();
  CHECK(sequentialGrads == grads);
  CHECK(reference.calls == std::vector<std::size_t>{0, 1, 2});
  CHECK(reference.threads.front() == std::this_thread::get_id());
  CHECK(t.exposedSeconds == t.seconds);
}

TEST_CASE("double buffering hands back the previous step's reduced gradients, each counted once", "[pipeline]") {
  FakeReducer reducer;
  ReductionPipeline pipeline(reducer, ReductionMode::kDoubleBuffering);
  const std::vector<float> g0 = ramp(0), g1 = ramp(10), g2 = ramp(20);
  CHECK(pipeline.exchange(g0, kLayers).empty());  // step 0: nothing to apply
  CHECK(pipeline.takeStats().wireBytes == 0);     // g0's reduction is in flight, not counted yet
  const std::span<const float> r0 = pipeline.exchange(g1, kLayers);
  CHECK(std::vector<float>(r0.begin(), r0.end()) == reducedRamp(0));
  CHECK(pipeline.takeStats().wireBytes == 9);  // g0's
  // A snapshot: drain counts g1's reduction, pending() holds it; a later exchange does not count it again.
  const std::vector<float> pending = pipeline.pending();
  CHECK(pending == reducedRamp(10));
  CHECK(pipeline.takeStats().wireBytes == 9);
  const std::span<const float> r1 = pipeline.exchange(g2, kLayers);
  CHECK(std::vector<float>(r1.begin(), r1.end()) == reducedRamp(10));
  CHECK(pipeline.takeStats().wireBytes == 0);
  // Restoring the snapshot into a fresh pipeline (resume): the next exchange applies it, uncounted.
  FakeReducer other;
  ReductionPipeline resumed(other, ReductionMode::kDoubleBuffering);
  resumed.setPending(pending);
  const std::span<const float> r2 = resumed.exchange(g2, kLayers);
  CHECK(std::vector<float>(r2.begin(), r2.end()) == reducedRamp(10));
  CHECK(resumed.takeStats().wireBytes == 0);
  CHECK(resumed.pending() == reducedRamp(20));
  resumed.setPending({});
  CHECK(resumed.exchange(g0, kLayers).empty());
  pipeline.drain();
}

TEST_CASE("a failed reduction reaches the training thread", "[pipeline]") {
  FakeReducer reducer;
  reducer.failAt = 1;
  ReductionPipeline pipeline(reducer, ReductionMode::kOverlap);
  std::vector<float> grads = ramp(1);
  pipeline.begin(grads, kLayers);
  pipeline.gradientsFinalFrom(3);
  CHECK_THROWS_WITH(pipeline.finish(), "peer gone");
  FakeReducer failing;
  failing.failAt = 0;
  ReductionPipeline doubled(failing, ReductionMode::kDoubleBuffering);
  doubled.exchange(grads, kLayers);
  CHECK_THROWS_WITH(doubled.exchange(grads, kLayers), "peer gone");
}

namespace {

// Each measured pair's time ratio (overlapped / sequential).
std::vector<double> pairRatios(const ReductionTuner& tuner) {
  std::vector<double> ratios;
  for (const double r : tuner.logRatios()) ratios.push_back(std::exp(r));
  return ratios;
}

bool allNear(const std::vector<double>& values, double expected) {
  return std::all_of(values.begin(), values.end(), [&](double v) { return v == Approx(expected); });
}

// One measured pair of format `key`: a block of sequential steps of `sequential` seconds, then a block of
// overlapped ones of `overlap`, each block's first step (untimed) 5x slower; optionally a pause in which
// no step runs before every step (the controller's hook).
void feedPair(ReductionTuner& tuner, double sequential, double overlap, const std::string& key = "",
              bool pauses = false) {
  for (const auto& [mode, seconds] : {std::pair{ReductionMode::kSequential, sequential},
                                      std::pair{ReductionMode::kOverlap, overlap}}) {
    for (std::size_t i = 0; i < ReductionTuner::kBlockSteps; ++i) {
      if (pauses) {
        tuner.pause(true);
        tuner.pause(false);
      }
      CHECK(tuner.nextMode(key) == mode);
      tuner.record(i == 0 ? 5 * seconds : seconds, key);
    }
  }
}

std::vector<double> logsOf(const std::vector<double>& ratios) {
  std::vector<double> logs;
  for (const double r : ratios) logs.push_back(std::log(r));
  return logs;
}

}  // namespace

TEST_CASE("reduction tuner: warm-up, alternating pairs, an outlier left out, a decision that sticks", "[tuner]") {
  ReductionTuner tuner;
  for (std::size_t i = 0; i < ReductionTuner::kWarmupSteps; ++i) {
    CHECK(tuner.nextMode() == ReductionMode::kSequential);
    tuner.record(5.0);  // slow first steps: not part of any pair
  }
  // Overlap 0.8x sequential in every pair but one outlier (a descheduled step), which the test leaves out.
  for (std::size_t pair = 0; pair < ReductionTuner::kPairs; ++pair) {
    CHECK_FALSE(tuner.readyToDecide());
    feedPair(tuner, 0.100, pair == 3 ? 0.900 : 0.080);
  }
  REQUIRE(tuner.readyToDecide());
  const std::vector<double> ratios = pairRatios(tuner);
  REQUIRE(ratios.size() == ReductionTuner::kPairs);
  CHECK(ratios[3] == Approx(9.0));
  CHECK_FALSE(tuner.decided());
  tuner.decide(tuner.logRatios());  // one rank: its own pairs are the agreed ones
  CHECK_FALSE(tuner.readyToDecide());
  REQUIRE(tuner.decided());
  CHECK(*tuner.decided() == ReductionMode::kOverlap);
  CHECK(*tuner.agreedRatio() == Approx(0.8));       // the outlier and the smallest pair left out
  CHECK(*tuner.agreedRatioBound() == Approx(0.8));  // no spread left
  for (int i = 0; i < 5; ++i) {
    CHECK(tuner.nextMode() == ReductionMode::kOverlap);
    tuner.record(10.0);  // ignored after the decision
  }
  CHECK(pairRatios(tuner) == ratios);
}

TEST_CASE("reduction tuner: a pair's steps are of one format; interleaved formats run sequential", "[tuner]") {
  // The controller's probes: one step of each candidate in turn. Paired across formats, the ratio
  // measured the formats (fp16 sequential 0.121 s, fp8s overlapped 0.105 s: "overlap saves 13 %").
  ReductionTuner tuner;
  for (std::size_t i = 0; i < ReductionTuner::kWarmupSteps; ++i) tuner.record(1.0, "fp32");
  const std::vector<std::string> probes = {"fp32", "fp16", "fp8s", "fp32", "fp16", "fp8s", "fp32", "fp16", "fp8s"};
  const std::map<std::string, double> seconds = {{"fp32", 0.16}, {"fp16", 0.12}, {"fp8s", 0.10}};
  for (const std::string& format : probes) {
    CHECK(tuner.nextMode(format) == ReductionMode::kSequential);  // every probe step alike
    tuner.record(seconds.at(format), format);
  }
  // A branch of one format: pairs of its own steps only (sequential, overlap, ...), overlap 10 % faster.
  for (std::size_t pair = 0; pair < ReductionTuner::kPairs; ++pair) {
    CHECK_FALSE(tuner.readyToDecide());
    feedPair(tuner, 0.100, 0.090, "table4");
  }
  REQUIRE(tuner.readyToDecide());
  CHECK(allNear(pairRatios(tuner), 0.9));
  // A format change between the halves of a pair: the pending step is dropped, the new one starts a pair.
  ReductionTuner split;
  for (std::size_t i = 0; i < ReductionTuner::kWarmupSteps; ++i) split.record(1.0);
  for (std::size_t i = 0; i < ReductionTuner::kBlockSteps; ++i) split.record(0.1, "fp16");
  CHECK(split.nextMode("fp16") == ReductionMode::kOverlap);  // fp16's pair would go on overlapped
  for (std::size_t pair = 0; pair < ReductionTuner::kPairs; ++pair) feedPair(split, 0.05, 0.04, "table2");
  REQUIRE(split.readyToDecide());
  CHECK(allNear(pairRatios(split), 0.8));  // no pair holds fp16's step
}

TEST_CASE("reduction tuner: the controller's phases are not measured and run alike", "[tuner]") {
  // The first phase's branches: paused, every step sequential whatever its format, none recorded.
  ReductionTuner tuner;
  for (std::size_t i = 0; i < ReductionTuner::kWarmupSteps; ++i) tuner.record(1.0, "fp32");
  // A pair's sequential block, then a phase begins.
  for (std::size_t i = 0; i < ReductionTuner::kBlockSteps; ++i) tuner.record(0.10, "table4");
  CHECK(tuner.nextMode("table4") == ReductionMode::kOverlap);
  tuner.pause(true);
  for (const char* format : {"table4", "table4", "fp16", "fp16", "table2"}) {
    CHECK(tuner.nextMode(format) == ReductionMode::kSequential);
    tuner.record(0.5, format);  // would make overlap look 5x slower if it were a pair's half
  }
  tuner.pause(false);
  // The continuation: pairs of its own steps; the pair pending before the phase was dropped.
  CHECK(tuner.nextMode("table4") == ReductionMode::kSequential);
  for (std::size_t pair = 0; pair < ReductionTuner::kPairs; ++pair) {
    CHECK_FALSE(tuner.readyToDecide());
    feedPair(tuner, 0.100, 0.095, "table4");
  }
  REQUIRE(tuner.readyToDecide());
  CHECK(allNear(pairRatios(tuner), 0.95));
  tuner.decide(tuner.logRatios());  // 5 % faster in every pair: shown
  // After the decision a phase runs in the chosen mode, every candidate alike.
  tuner.pause(true);
  CHECK(tuner.nextMode("fp16") == ReductionMode::kOverlap);
  CHECK(tuner.nextMode("table2") == ReductionMode::kOverlap);
}

TEST_CASE("reduction tuner: a pause in which no step runs keeps the pending pair", "[tuner]") {
  // The controller's hook pauses around its call before every step, and most calls run no phase.
  // Dropping the pending pair at each of those pauses completed no pair: an adaptive run never decided.
  ReductionTuner tuner;
  for (std::size_t i = 0; i < ReductionTuner::kWarmupSteps; ++i) tuner.record(1.0, "table4");
  for (std::size_t pair = 0; pair < ReductionTuner::kPairs; ++pair) feedPair(tuner, 0.100, 0.080, "table4", true);
  REQUIRE(tuner.readyToDecide());
  CHECK(allNear(pairRatios(tuner), 0.8));
}

TEST_CASE("reduction tuner: sequential unless the pairs show overlap 3 % faster at 90 %", "[tuner]") {
  const auto decision = [](const std::vector<double>& ratios) {
    ReductionTuner tuner;
    tuner.decide(logsOf(ratios));
    CHECK(tuner.nextMode() == *tuner.decided());
    return *tuner.decided();
  };
  CHECK(decision(std::vector<double>(ReductionTuner::kPairs, 1.0)) == ReductionMode::kSequential);
  CHECK(decision(std::vector<double>(ReductionTuner::kPairs, 1.2)) == ReductionMode::kSequential);
  // Shown faster, but by less than kMinOverlapGain: a gain a few steps show and a run need not keep.
  CHECK(decision(std::vector<double>(ReductionTuner::kPairs, 0.98)) == ReductionMode::kSequential);
  CHECK(decision(std::vector<double>(ReductionTuner::kPairs, 0.96)) == ReductionMode::kOverlap);
  // Between emulated nodes on 2 cores (2026-12-08): medians of 0.96-0.99 with pairs scattered by
  // +-5 %, after which overlap ran no faster; the median alone took overlap.
  const std::vector<double> noise = {0.93, 1.04, 0.97, 1.02, 0.95, 0.99, 1.05, 0.94};
  CHECK(decision(noise) == ReductionMode::kSequential);
  ReductionTuner noisy;
  noisy.decide(logsOf(noise));
  CHECK(*noisy.agreedRatio() < 1);  // faster on average, not shown faster
  CHECK(*noisy.agreedRatioBound() > 1);
  // A clear gain with the same scatter, and with one descheduled step on either side.
  std::vector<double> gain;
  for (const double r : noise) gain.push_back(0.85 * r);
  CHECK(decision(gain) == ReductionMode::kOverlap);
  gain[2] = 6.0;
  gain[5] = 0.1;
  CHECK(decision(gain) == ReductionMode::kOverlap);
  ReductionTuner wrong;
  CHECK_THROWS_AS(wrong.decide({0.0, 0.0}), Error);  // not kPairs values
}

TEST_CASE("an auto pipeline switches between sequential and overlap, bit-identically", "[pipeline][tuner]") {
  FakeReducer reducer;
  ReductionPipeline pipeline(reducer, ReductionMode::kAuto);
  CHECK(pipeline.mode() == ReductionMode::kSequential);
  for (ReductionMode mode : {ReductionMode::kSequential, ReductionMode::kOverlap, ReductionMode::kSequential}) {
    pipeline.setStepMode(mode);
    CHECK(pipeline.mode() == mode);
    std::vector<float> grads = ramp(1);
    pipeline.begin(grads, kLayers);
    for (std::int64_t offset : {8, 5, 2, 0}) pipeline.gradientsFinalFrom(offset);
    pipeline.finish();
    CHECK(grads == reducedRamp(1));
  }
  CHECK_THROWS(pipeline.setStepMode(ReductionMode::kDoubleBuffering));
  ReductionPipeline fixed(reducer, ReductionMode::kOverlap);
  CHECK_THROWS(fixed.setStepMode(ReductionMode::kSequential));
}
