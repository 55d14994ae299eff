// The measurement loop of adaprec-bench, run by every rank: for each size, the native baseline row (and
// any further baselines) and one row per (format, algorithm), each timed the same way:
//   a barrier, then one allreduce, timed on each rank; repeated -n times after -w untimed ones;
//   time = median over iterations of (max over ranks of that iteration's time).
// Rows run one after another (each warmed up, timed, checked), or with --interleave in rounds: every row
// of a size warmed up and checked first, then one timed call of each row per round, -n rounds.
// Buffers are out of place (send is never modified), so every iteration reduces the same input.
// With a device (--device cuda), send and recv live on it: the baseline and every allreduce get device
// pointers, and recv is copied to the host only for the check, outside the timed region.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "bench_options.hpp"
#include "bench_row.hpp"
#include "algorithm/cost_model.hpp"
#include "algorithm/device_codec.hpp"
#include "rank_collectives.hpp"

namespace adaprec::bench {

// The baseline: the transport's own fp32 allreduce (MPI_Allreduce), outside AdaPrec. Further baselines
// (SweepContext::moreBaselines: NCCL's own fp8 sum) reduce in another format; their rows come right
// after the fp32 one, their speedup is over it, and they are checked with that format's error bound.
struct Baseline {
  std::string name;  // the algo column of the baseline row
  std::function<void(const float* send, float* recv, std::size_t count)> allreduce;
  Format format = Format::kFp32;  // what the values are reduced in (the format column)
  int quantizations = 0;          // times a value is quantized to `format` (the quantizations column)
};

struct SweepContext {
  const BenchOptions& options;
  Communicator& comm;
  RankCollectives& ranks;
  Baseline baseline;
  std::string transportName;
  const detail::Calibration* model = nullptr;        // --model: the library's cost model (auto's)
  std::function<void(const BenchRow&)> onRow;        // called on rank 0 as soon as a row is done
  std::function<void(const std::string&)> onNote;    // rank 0: skipped combinations and the like
  detail::DeviceCodec* device = nullptr;             // --device cuda: where the buffers live (null: host)
  std::vector<Baseline> moreBaselines = {};          // after `baseline`, in this order
};

// Collective. Returns every row (identical on every rank).
std::vector<BenchRow> runSweep(SweepContext& context);

}  // namespace adaprec::bench
