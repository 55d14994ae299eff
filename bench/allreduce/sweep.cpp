#include "sweep.hpp"

#include <algorithm>
#include <chrono>
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

double timeCollective(RankCollectives& ranks, int warmup, int iterations, const std::function<void()>& op) {
  for (int i = 0; i < warmup; ++i) op();
  std::vector<double> seconds(static_cast<std::size_t>(iterations));
  for (auto& s : seconds) {
    ranks.barrier();
    const auto start = Clock::now();
    op();
    s = std::chrono::duration<double>(Clock::now() - start).count();
  }
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

void fillCheck(SweepContext& context, BenchRow& row, const BenchData& data, SizeBuffers& buffers, Format format,
               bool errorFeedback) {
  if (!context.options.check) return;
  if (context.device != nullptr) {
    context.device->copyToHost(buffers.recv.data(), buffers.recvArg, row.count * sizeof(float));
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

}  // namespace

std::vector<BenchRow> runSweep(SweepContext& context) {
  const BenchOptions& options = context.options;
  const BenchData data(options.seed);
  const int p = context.ranks.size();
  const int nodes = context.ranks.nodeCount();
  std::vector<BenchRow> rows;

  for (std::size_t count : sweepCounts(options)) {
    SizeBuffers buffers;
    prepareBuffers(context, data, count, buffers);

    // Baseline first: every other row's speedup is relative to it.
    BenchRow native = baseRow(context, count, nodes);
    native.format = "fp32";
    native.algo = context.baseline.name;
    const double baselineSeconds = timeCollective(context.ranks, std::max(options.warmup, 1), options.iterations,
                                                  [&] { context.baseline.allreduce(buffers.sendArg, buffers.recvArg, count); });
    // What a ring would send: the baseline's own bytes are not observable.
    fillTiming(native, baselineSeconds, p > 1 ? 2.0 * (p - 1) / p * native.sizeBytes : 0.0, baselineSeconds);
    fillCheck(context, native, data, buffers, Format::kFp32, false);
    // One rank moves nothing between ranks: the model has no link to predict with.
    const bool predict = context.model != nullptr && p > 1;
    // Device buffers: the device's codec and, unless the transport takes device memory, the staging.
    const detail::Placement placement{context.device != nullptr,
                                      detail::deviceDirect(context.comm.transport(), context.device)};
    if (predict)
      native.predictedUs =
          detail::predictSeconds(*context.model, Algorithm::kNative, Format::kFp32, count, placement) * 1e6;
    emit(context, rows, std::move(native));

    // The other baselines, timed and checked as the fp32 one; the bytes a ring of their format sends.
    for (const Baseline& more : context.moreBaselines) {
      BenchRow row = baseRow(context, count, nodes);
      row.format = std::string(formatName(more.format));
      row.algo = more.name;
      const double seconds = timeCollective(context.ranks, std::max(options.warmup, 1), options.iterations,
                                            [&] { more.allreduce(buffers.sendArg, buffers.recvArg, count); });
      const double bits = bitsPerElement(more.format);
      fillTiming(row, seconds, p > 1 ? 2.0 * (p - 1) / p * count * bits / 8 : 0.0, baselineSeconds);
      row.ratio = 32.0 / bits;
      row.quantizations = more.quantizations;
      fillCheck(context, row, data, buffers, more.format, false);
      emit(context, rows, std::move(row));
    }

    for (const FormatSpec& spec : options.formats) {
      for (Algorithm requested : options.algorithms) {
        AllreduceOptions allreduceOptions;
        allreduceOptions.format = spec;
        allreduceOptions.algorithm = requested;
        if (spec.errorFeedback) allreduceOptions.key = kErrorFeedbackKey;
        context.comm.resetErrorFeedback();

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
          rejection = e.what();
        }
        if (context.ranks.anyRank(!rejection.empty())) {
          if (context.ranks.rank() == 0 && context.onNote) {
            context.onNote("skipped " + toString(spec) + " x " + std::string(algorithmName(requested)) + " at " +
                           std::to_string(count) + " elements: " + rejection);
          }
          continue;
        }

        BenchRow row = baseRow(context, count, nodes);
        row.format = toString(spec);
        if (spec.selection == Selection::kFastest) row.format += ":" + std::string(formatName(stats.format));
        row.algo = std::string(algorithmName(requested));
        if (requested == Algorithm::kAuto) row.algo += ":" + std::string(algorithmName(stats.algorithm));
        AllreduceStats last;
        const double seconds = timeCollective(context.ranks, std::max(options.warmup - 1, 0), options.iterations, [&] {
          last = context.comm.allreduce(buffers.sendArg, buffers.recvArg, count, allreduceOptions);
        });
        std::vector<double> breakdown{last.encodeSeconds * 1e6, last.decodeSeconds * 1e6, last.transferSeconds * 1e6};
        context.ranks.maxOverRanks(breakdown);
        row.encodeUs = breakdown[0];
        row.decodeUs = breakdown[1];
        row.transferUs = breakdown[2];
        const double wireBytes = context.ranks.maxOverRanks(static_cast<double>(stats.wireBytes));
        const double fp32Bytes = context.ranks.maxOverRanks(static_cast<double>(stats.fp32Bytes));
        fillTiming(row, seconds, wireBytes, baselineSeconds);
        row.ratio = wireBytes > 0 ? fp32Bytes / wireBytes : 1.0;
        row.quantizations =
            isLossless(stats.format) ? 0 : detail::quantizationsPerValue(stats.algorithm, stats.format, row.ranks, nodes);
        fillCheck(context, row, data, buffers, stats.format, spec.errorFeedback);
        if (predict)
          row.predictedUs = detail::predictSeconds(*context.model, stats.algorithm, stats.format, count, placement) * 1e6;
        emit(context, rows, std::move(row));
      }
    }
  }
  return rows;
}

}  // namespace adaprec::bench
