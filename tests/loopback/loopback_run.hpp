// Runs one allreduce on a fresh loopback group: each rank's thread builds a Communicator, reduces its
// input and stores result, stats or the error code; nothing is asserted inside the threads.
#pragma once

#include <optional>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "adaprec/transport.hpp"

namespace adaprec::test {

struct LoopbackOutcome {
  std::vector<std::vector<float>> outputs;
  std::vector<AllreduceStats> stats;
  std::vector<std::optional<ErrorCode>> errors;  // per rank, when it threw adaprec::Error

  bool anyError() const {
    for (const auto& e : errors)
      if (e) return true;
    return false;
  }
  bool allErrors(ErrorCode code) const {
    for (const auto& e : errors)
      if (!e || *e != code) return false;
    return true;
  }
};

// options[r] are rank r's options (ranks may be given different ones to test mismatches);
// repetitions > 1 runs the allreduce that many times on the same Communicator (input restored before
// each run) and keeps the mean of the results.
inline LoopbackOutcome runLoopbackAllreduce(int ranksPerNode,
                                            const std::vector<std::vector<float>>& inputs,
                                            const std::vector<AllreduceOptions>& options,
                                            bool outOfPlace, int repetitions = 1) {
  const int p = static_cast<int>(inputs.size());
  LoopbackGroup group(p, ranksPerNode);
  LoopbackOutcome out;
  out.outputs.resize(p);
  out.stats.resize(p);
  out.errors.resize(p);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    try {
      Communicator comm(transport);
      const std::vector<float>& in = inputs[rank];
      std::vector<float> result(in.size());
      std::vector<double> mean(in.size(), 0.0);
      for (int rep = 0; rep < repetitions; ++rep) {
        if (outOfPlace) {
          out.stats[rank] = comm.allreduce(in.data(), result.data(), in.size(), options[rank]);
        } else {
          result = in;
          out.stats[rank] = comm.allreduce(result.data(), result.size(), options[rank]);
        }
        for (std::size_t i = 0; i < result.size(); ++i) mean[i] += result[i];
      }
      if (repetitions > 1)
        for (std::size_t i = 0; i < result.size(); ++i)
          result[i] = static_cast<float>(mean[i] / repetitions);
      out.outputs[rank] = std::move(result);
    } catch (const Error& e) {
      out.errors[rank] = e.code();
      // kMismatch/kUnsupported are raised by every rank together; anything else aborts the group so
      // no other rank waits forever (if a collective error reached only some ranks, the test hangs
      // and meson's timeout fails it).
      if (e.code() != ErrorCode::kMismatch && e.code() != ErrorCode::kUnsupported) throw;
    }
  });
  return out;
}

}  // namespace adaprec::test
