#include "sweep.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "bench_data.hpp"
#include "result_check.hpp"

namespace adaprec::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kGB = 1e9;
constexpr const char* kErrorFeedbackKey = "adaprec-bench";

// One call of op after a barrier: this rank's time.
double timeOneCall(RankCollectives& ranks, const std::function<void()>& op) {
  ranks.barrier();
  const auto start = Clock::now();
  op();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// This rank's times of `iterations` calls of op, each after a barrier.
std::vector<double> timeCalls(RankCollectives& ranks, int iterations, const std::function<void()>& op) {
  std::vector<double> seconds(static_cast<std::size_t>(iterations));
  for (auto& s : seconds) s = timeOneCall(ranks, op);
  return seconds;
}

// The row's time: the median over iterations of the slowest rank's time of each (collective).
double medianOfSlowest(RankCollectives& ranks, std::vector<double> seconds) {
  ranks.maxOverRanks(seconds);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

struct SizeBuffers {
  std::vector<float> send;
  std::vector<float> recv;
  std::vector<float> scratch;  // rank 0's result, for the bit-identity check
  // --device: send and recv on the device, what the collectives get; otherwise the vectors above.
  std::unique_ptr<detail::DeviceScratch> deviceSend, deviceRecv;
  const float* sendArg = nullptr;
  float* recvArg = nullptr;
};

// The buffers of one size: send filled with this rank's input, recv zero, on the host or the device.
void prepareBuffers(const SweepContext& context, const BenchData& data, std::size_t count, SizeBuffers& buffers) {
  buffers.send.resize(count);
  data.fill(context.ranks.rank(), buffers.send.data(), 0, count);
  buffers.recv.assign(count, 0.0f);
  if (context.options.check) buffers.scratch.resize(count);
  buffers.sendArg = buffers.send.data();
  buffers.recvArg = buffers.recv.data();
  if (detail::DeviceCodec* device = context.device) {
    const std::size_t bytes = count * sizeof(float);
    buffers.deviceSend = std::make_unique<detail::DeviceScratch>(*device);
    buffers.deviceRecv = std::make_unique<detail::DeviceScratch>(*device);
    buffers.sendArg = static_cast<const float*>(buffers.deviceSend->get(bytes));
    buffers.recvArg = static_cast<float*>(buffers.deviceRecv->get(bytes));
    device->copyToDevice(buffers.deviceSend->get(bytes), buffers.send.data(), bytes);
    device->fillZero(buffers.recvArg, bytes);
    device->synchronize();
  }
}

BenchRow baseRow(const SweepContext& context, std::size_t count, int nodes) {
  BenchRow row;
  row.count = count;
  row.sizeBytes = count * sizeof(float);
  row.ranks = context.ranks.size();
  row.nodes = nodes;
  row.transport = context.transportName;
  return row;
}

void fillTiming(BenchRow& row, double seconds, double wireBytes, double baselineSeconds) {
  const int p = row.ranks;
  row.timeUs = seconds * 1e6;
  row.algbw = static_cast<double>(row.sizeBytes) / seconds / kGB;
  row.busbw = row.algbw * (p > 1 ? 2.0 * (p - 1) / p : 0.0);
  row.wirebw = wireBytes / seconds / kGB;
  row.speedup = baselineSeconds / seconds;
}

// Checks the result of one more call of the row. recv is poisoned first (quiet NaN, which the check
// counts wrong): every row writes into the size's one recv buffer, so a call that left it untouched
// would otherwise be checked on the previous row's correct sum (a hostile pass's shim: fp8 rows that
// wrote nothing read #wrong 0).
void fillCheck(SweepContext& context, BenchRow& row, const BenchData& data, SizeBuffers& buffers,
               const std::function<void()>& call, Format format, bool errorFeedback) {
  if (!context.options.check) return;
  const std::size_t bytes = row.count * sizeof(float);
  std::fill(buffers.recv.begin(), buffers.recv.end(), std::numeric_limits<float>::quiet_NaN());
  if (context.device != nullptr) {
    context.device->copyToDevice(buffers.recvArg, buffers.recv.data(), bytes);
    context.device->synchronize();
  }
  call();
  if (context.device != nullptr) {
    context.device->copyToHost(buffers.recv.data(), buffers.recvArg, bytes);
    context.device->synchronize();
  }
  const CheckResult check = checkResult(context.ranks, data, buffers.recv.data(), buffers.scratch.data(), row.count,
                                        format, errorFeedback);
  row.maxerr = check.maxError;
  row.wrong = check.wrong;
}

void emit(SweepContext& context, std::vector<BenchRow>& rows, BenchRow row) {
  if (context.ranks.rank() == 0 && context.onRow) context.onRow(row);
  rows.push_back(std::move(row));
}

// One row of a size: its call, how it is warmed up and checked, and what completes it once timed.
struct RowRun {
  BenchRow row;                   // everything but the timing columns
  std::function<void()> call;     // one collective call into the size's buffers
  int warmup = 0;                 // untimed calls before the timed ones
  double wireBytes = 0;           // bytes sent per rank (for wirebw)
  Format checkFormat = Format::kFp32;
  bool errorFeedback = false;
  std::function<void(BenchRow&)> afterTiming;  // collective, after the timed calls (may be empty)
  std::vector<double> seconds;    // this rank's timed calls
};

// Finishes a row from its timed calls (collective) and emits it. The first row finished is the
// baseline: baselineSeconds 0 takes its time.
void finishRow(SweepContext& context, std::vector<BenchRow>& rows, RowRun& run, double& baselineSeconds) {
  const double seconds = medianOfSlowest(context.ranks, run.seconds);
  if (baselineSeconds == 0) baselineSeconds = seconds;
  fillTiming(run.row, seconds, run.wireBytes, baselineSeconds);
  if (run.afterTiming) run.afterTiming(run.row);
  emit(context, rows, std::move(run.row));
}

}  // namespace

std::vector<BenchRow> runSweep(SweepContext& context) {
  const BenchOptions& options = context.options;
  const BenchData data(options.seed);
  const int p = context.ranks.size();
  const int nodes = context.ranks.nodeCount();
  std::vector<BenchRow> rows;
  // Device buffers: the device's codec and, unless the transport takes device memory, the staging.
  const detail::Placement placement{context.device != nullptr,
                                    detail::deviceDirect(context.comm.transport(), context.device)};
  // One rank moves nothing between ranks: the model has no link to predict with.
  const bool predict = context.model != nullptr && p > 1;

  for (std::size_t count : sweepCounts(options)) {
    SizeBuffers buffers;
    prepareBuffers(context, data, count, buffers);
    context.comm.resetErrorFeedback();
    // Each row of this size, in the order they are printed. Sequential: each row is warmed up, checked
    // and timed before the next one starts. Interleaved (--interleave): every row is warmed up and
    // checked first, then the timed calls go round the rows, one call each per round, so that a change
    // of the machine's load during the size's measurement reaches every row alike.
    // The baseline comes first: every other row's speedup is relative to it.
    std::vector<RowRun> runs;
    double baselineSeconds = 0;
    auto measure = [&](RowRun run) {
      for (int i = 0; i < run.warmup; ++i) run.call();
      // Checked before the timed calls, so that the row's breakdown is a timed call's.
      fillCheck(context, run.row, data, buffers, run.call, run.checkFormat, run.errorFeedback);
      if (!options.interleave) run.seconds = timeCalls(context.ranks, options.iterations, run.call);
      runs.push_back(std::move(run));
      if (!options.interleave) finishRow(context, rows, runs.back(), baselineSeconds);
    };

    RowRun native;
    native.row = baseRow(context, count, nodes);
    native.row.format = "fp32";
    native.row.algo = context.baseline.name;
    native.call = [&] { context.baseline.allreduce(buffers.sendArg, buffers.recvArg, count); };
    native.warmup = std::max(options.warmup, 1);
    // What a ring would send: the baseline's own bytes are not observable.
    native.wireBytes = p > 1 ? 2.0 * (p - 1) / p * native.row.sizeBytes : 0.0;
    if (predict)
      native.row.predictedUs =
          detail::predictSeconds(*context.model, Algorithm::kNative, Format::kFp32, count, placement) * 1e6;
    measure(std::move(native));

    // The other baselines, timed and checked as the fp32 one; the bytes a ring of their format sends.
    for (const Baseline& more : context.moreBaselines) {
      RowRun run;
      run.row = baseRow(context, count, nodes);
      run.row.format = std::string(formatName(more.format));
      run.row.algo = more.name;
      run.call = [&] { more.allreduce(buffers.sendArg, buffers.recvArg, count); };
      run.warmup = std::max(options.warmup, 1);
      const double bits = bitsPerElement(more.format);
      run.wireBytes = p > 1 ? 2.0 * (p - 1) / p * count * bits / 8 : 0.0;
      run.row.ratio = 32.0 / bits;
      run.row.quantizations = more.quantizations;
      run.checkFormat = more.format;
      measure(std::move(run));
    }

    for (const FormatSpec& spec : options.formats) {
      for (Algorithm requested : options.algorithms) {
        // Sequential rows start from no residuals (and free the previous row's); interleaved ones keep
        // their own keys' until the size is done.
        if (!options.interleave) context.comm.resetErrorFeedback();
        AllreduceOptions allreduceOptions;
        allreduceOptions.format = spec;
        allreduceOptions.algorithm = requested;
        // Its own error-feedback key per row: interleaved rows would otherwise share the residuals.
        if (spec.errorFeedback) allreduceOptions.key = std::string(kErrorFeedbackKey) + "-" + std::to_string(runs.size());

        // One untimed call first: learns what ran and the bytes sent, and rejects combinations the
        // engine does not serve (e.g. native with fp8) on every rank alike. auto's trial calls come
        // before it, so the row shows (and times) what auto settled on.
        AllreduceStats stats;
        std::string rejection;
        try {
          const int untimed = requested == Algorithm::kAuto ? kAutoTrialCalls + 1 : 1;
          for (int call = 0; call < untimed; ++call)
            stats = context.comm.allreduce(buffers.sendArg, buffers.recvArg, count, allreduceOptions);
        } catch (const Error& e) {
          if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kUnsupported) throw;
          rejection = messageForUsers(e);
        }
        if (context.ranks.anyRank(!rejection.empty())) {
          if (context.ranks.rank() == 0 && context.onNote) {
            context.onNote("skipped " + toString(spec) + " x " + std::string(algorithmName(requested)) + " at " +
                           std::to_string(count) + " elements: " + rejection);
          }
          continue;
        }

        RowRun run;
        run.row = baseRow(context, count, nodes);
        run.row.format = toString(spec);
        if (spec.selection == Selection::kFastest) run.row.format += ":" + std::string(formatName(stats.format));
        run.row.algo = std::string(algorithmName(requested));
        if (requested == Algorithm::kAuto) run.row.algo += ":" + std::string(algorithmName(stats.algorithm));
        // The breakdown of the row's last timed call.
        auto last = std::make_shared<AllreduceStats>();
        run.call = [&context, &buffers, count, allreduceOptions, last] {
          *last = context.comm.allreduce(buffers.sendArg, buffers.recvArg, count, allreduceOptions);
        };
        run.warmup = std::max(options.warmup - 1, 0);
        run.afterTiming = [&context, last](BenchRow& row) {
          std::vector<double> breakdown{last->encodeSeconds * 1e6, last->decodeSeconds * 1e6,
                                        last->transferSeconds * 1e6};
          context.ranks.maxOverRanks(breakdown);
          row.encodeUs = breakdown[0];
          row.decodeUs = breakdown[1];
          row.transferUs = breakdown[2];
        };
        run.wireBytes = context.ranks.maxOverRanks(static_cast<double>(stats.wireBytes));
        const double fp32Bytes = context.ranks.maxOverRanks(static_cast<double>(stats.fp32Bytes));
        run.row.ratio = run.wireBytes > 0 ? fp32Bytes / run.wireBytes : 1.0;
        run.row.quantizations =
            isLossless(stats.format) ? 0 : detail::quantizationsPerValue(stats.algorithm, stats.format, run.row.ranks, nodes);
        run.checkFormat = stats.format;
        run.errorFeedback = spec.errorFeedback;
        if (predict)
          run.row.predictedUs =
              detail::predictSeconds(*context.model, stats.algorithm, stats.format, count, placement) * 1e6;
        measure(std::move(run));
      }
    }

    if (options.interleave) {
      // Each round starts one row later, so no row always follows the same one (a row timed right
      // after MPI_Allreduce read 1-8 % slower than in its other positions).
      for (int round = 0; round < options.iterations; ++round)
        for (std::size_t i = 0; i < runs.size(); ++i) {
          RowRun& run = runs[(static_cast<std::size_t>(round) + i) % runs.size()];
          run.seconds.push_back(timeOneCall(context.ranks, run.call));
        }
      for (RowRun& run : runs) finishRow(context, rows, run, baselineSeconds);
    }
  }
  return rows;
}

}  // namespace adaprec::bench
