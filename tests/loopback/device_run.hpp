// Runs allreduces on a fresh loopback group with every rank's buffers on its own device behind the
// seam (the CPU stand-in, cpu_device.hpp, or CUDA in tests/gpu): ranks are threads, each with its own
// device and stream. The counterpart of loopback_run.hpp's host run, with the same outcome record, so
// the two can be compared bit for bit.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "algorithm/device_codec.hpp"
#include "loopback_run.hpp"

namespace adaprec::test {

struct DeviceRunOptions {
  // Each rank's device (required for runDeviceAllreduce), and how to make everything it was given
  // happen before a result is read (default: synchronize; the stand-in's tests drain it instead,
  // whatever a hook skipped).
  std::function<std::shared_ptr<detail::DeviceCodec>(int rank)> makeDevice;
  std::function<void(detail::DeviceCodec&)> flush;
  bool outOfPlace = false;
  int repetitions = 1;     // as runLoopbackAllreduce: input restored before each, results averaged
  double timeoutSeconds = 0;     // CommunicatorOptions::timeoutSeconds (for runs that may fail)
  // Called on each rank's device before repetition `rep` (test hooks such as skipSynchronize).
  std::function<void(detail::DeviceCodec&, int rep)> beforeRepetition;
  // Inputs of repetitions after the first (default: the same as the first).
  const std::vector<std::vector<float>>* laterInputs = nullptr;
  // What each rank's Communicator runs over, given the rank's transport and device (default: the
  // transport itself; device_memory_transport.hpp: one that takes the device's memory as it is).
  std::function<std::shared_ptr<Transport>(std::shared_ptr<Transport>, detail::DeviceCodec&)> wrapTransport;
  // Called on each rank after its calls, with its device and the transport its Communicator used.
  std::function<void(int rank, detail::DeviceCodec&, Transport&)> inspect;
  // Runs body(rank, transport) on one thread per rank (default: a loopback group of `ranks` with
  // `ranksPerNode`; nccl_fake_run.hpp: the NCCL transport over the NCCL fake). Must rethrow a rank's error.
  std::function<void(int ranks, int ranksPerNode, const std::function<void(int, std::shared_ptr<Transport>)>& body)>
      runRanks;
};

struct DeviceOutcome : LoopbackOutcome {
  std::vector<std::vector<std::byte>> feedbackState;  // per rank: saveErrorFeedback() at the end
};

// Each rank: its own stand-in device and Communicator (setDevice); input copied up, allreduce on device
// memory, result copied down. saveErrorFeedback (residuals read back from the device) is kept too.
inline DeviceOutcome runDeviceAllreduce(int ranksPerNode, const std::vector<std::vector<float>>& inputs,
                                        const std::vector<AllreduceOptions>& options,
                                        const DeviceRunOptions& run = {}) {
  const int p = static_cast<int>(inputs.size());
  DeviceOutcome out;
  out.outputs.resize(p);
  out.stats.resize(p);
  out.errors.resize(p);
  out.feedbackState.resize(p);
  auto body = [&](int rank, std::shared_ptr<Transport> transport) {
    const std::shared_ptr<detail::DeviceCodec> device = run.makeDevice(rank);
    auto flush = [&] {
      if (run.flush) {
        run.flush(*device);
      } else {
        device->synchronize();
      }
    };
    try {
      CommunicatorOptions copt = CommunicatorOptions::fromEnvironment();
      copt.timeoutSeconds = run.timeoutSeconds;
      const std::shared_ptr<Transport> used = run.wrapTransport ? run.wrapTransport(transport, *device) : transport;
      Communicator comm(used, copt);
      comm.setDevice(device);
      const std::size_t n = inputs[rank].size();
      const std::size_t bytes = n * sizeof(float);
      auto* in = static_cast<float*>(device->allocate(bytes));
      auto* result = run.outOfPlace ? static_cast<float*>(device->allocate(bytes)) : in;
      std::vector<float> host(n);
      std::vector<double> mean(n, 0.0);
      for (int rep = 0; rep < run.repetitions; ++rep) {
        const std::vector<float>& input = rep > 0 && run.laterInputs != nullptr ? (*run.laterInputs)[rank] : inputs[rank];
        device->copyToDevice(in, input.data(), bytes);
        device->synchronize();
        if (run.beforeRepetition) run.beforeRepetition(*device, rep);
        out.stats[rank] = comm.allreduce(in, result, n, options[rank]);
        device->copyToHost(host.data(), result, bytes);
        flush();
        for (std::size_t i = 0; i < n; ++i) mean[i] += host[i];
      }
      if (run.repetitions > 1)
        for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(mean[i] / run.repetitions);
      out.outputs[rank] = std::move(host);
      out.feedbackState[rank] = comm.saveErrorFeedback();
      device->release(in);
      if (result != in) device->release(result);
      device->synchronize();
      if (run.inspect) run.inspect(rank, *device, *used);
    } catch (const Error& e) {
      out.errors[rank] = e.code();
      flush();
      if (e.code() != ErrorCode::kMismatch && e.code() != ErrorCode::kUnsupported && run.timeoutSeconds == 0) throw;
    }
  };
  if (run.runRanks) {
    run.runRanks(p, ranksPerNode, body);
  } else {
    LoopbackGroup group(p, ranksPerNode);
    runLoopback(group, body);
  }
  return out;
}

// The host run of the same inputs (Communicator on host memory), with the feedback state too.
inline DeviceOutcome runHostAllreduce(int ranksPerNode, const std::vector<std::vector<float>>& inputs,
                                      const std::vector<AllreduceOptions>& options, const DeviceRunOptions& run = {}) {
  const int p = static_cast<int>(inputs.size());
  LoopbackGroup group(p, ranksPerNode);
  DeviceOutcome out;
  out.outputs.resize(p);
  out.stats.resize(p);
  out.errors.resize(p);
  out.feedbackState.resize(p);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    try {
      Communicator comm(transport);
      const std::size_t n = inputs[rank].size();
      std::vector<float> in(n);
      std::vector<float> result(n);
      std::vector<double> mean(n, 0.0);
      for (int rep = 0; rep < run.repetitions; ++rep) {
        const std::vector<float>& input = rep > 0 && run.laterInputs != nullptr ? (*run.laterInputs)[rank] : inputs[rank];
        in = input;
        if (run.outOfPlace) {
          out.stats[rank] = comm.allreduce(in.data(), result.data(), n, options[rank]);
        } else {
          out.stats[rank] = comm.allreduce(in.data(), n, options[rank]);
          result = in;
        }
        for (std::size_t i = 0; i < n; ++i) mean[i] += result[i];
      }
      if (run.repetitions > 1)
        for (std::size_t i = 0; i < n; ++i) result[i] = static_cast<float>(mean[i] / run.repetitions);
      out.outputs[rank] = std::move(result);
      out.feedbackState[rank] = comm.saveErrorFeedback();
    } catch (const Error& e) {
      out.errors[rank] = e.code();
      if (e.code() != ErrorCode::kMismatch && e.code() != ErrorCode::kUnsupported) throw;
    }
  });
  return out;
}

// The host run of the same inputs with what a device run resolved to (auto's algorithm and its wire
// format depend on timings): the reference a device run must equal bit for bit.
inline DeviceOutcome runHostAsRan(int ranksPerNode, const std::vector<std::vector<float>>& inputs, AllreduceOptions opt,
                                  const DeviceOutcome& ran, const DeviceRunOptions& run = {}) {
  opt.algorithm = ran.stats[0].algorithm;
  opt.format.format = ran.stats[0].format;
  return runHostAllreduce(ranksPerNode, inputs, std::vector<AllreduceOptions>(inputs.size(), opt), run);
}

// Empty when every rank's output is bit-identical in a and b; else the first difference.
inline std::string firstDifference(const LoopbackOutcome& a, const LoopbackOutcome& b) {
  for (std::size_t r = 0; r < a.outputs.size(); ++r) {
    if (a.outputs[r].size() != b.outputs[r].size()) return "rank " + std::to_string(r) + ": sizes differ";
    for (std::size_t i = 0; i < a.outputs[r].size(); ++i)
      if (std::memcmp(&a.outputs[r][i], &b.outputs[r][i], sizeof(float)) != 0)
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": " + std::to_string(a.outputs[r][i]) +
               " vs " + std::to_string(b.outputs[r][i]);
  }
  return {};
}

}  // namespace adaprec::test
