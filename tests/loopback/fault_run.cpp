#include "fault_run.hpp"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "adaprec/error.hpp"
#include "engine_check.hpp"

namespace adaprec::test {

const char* outcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kCorrect: return "correct";
    case Outcome::kErrorEverywhere: return "error everywhere";
    case Outcome::kSilentWrong: return "SILENT WRONG SUM";
    case Outcome::kMixed: return "MIXED (error on some ranks, result on others)";
    case Outcome::kHang: return "HANG";
    case Outcome::kNotApplicable: return "n/a";
  }
  return "?";
}

FaultRun runFaultScenario(const FaultScenario& sc) {
  using Clock = std::chrono::steady_clock;
  const int p = sc.ranks;
  LoopbackGroup group(p, sc.ranksPerNode);
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, sc.count, true));
  std::vector<std::vector<float>> outputs(p);
  std::vector<double> seconds(p, 0.0);
  std::vector<std::shared_ptr<FaultState>> states;
  for (int r = 0; r < p; ++r) states.push_back(std::make_shared<FaultState>());
  FaultRun run;
  run.errors.resize(p);
  run.againErrors.resize(p);

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<bool> finished(p, false);
  const bool stops = sc.fault.fault == Fault::kStop;
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      std::optional<std::string> error;
      Clock::time_point start = Clock::now();
      try {
        FaultConfig config = sc.fault;
        if (r != config.rank) config.fault = Fault::kNone;
        // The faulty link sits below everything the library adds: the options below are what
        // ADAPREC_CHECKSUM and ADAPREC_TIMEOUT set (checksum over it, timeout forwarded into it).
        CommunicatorOptions communicatorOptions = CommunicatorOptions::fromEnvironment();
        communicatorOptions.checksum = sc.checksum;
        communicatorOptions.timeoutSeconds = std::chrono::duration<double>(sc.timeout).count();
        Communicator comm(std::make_shared<FaultyTransport>(group.transport(r), config, states[r]),
                          communicatorOptions);
        AllreduceOptions options;
        options.format = parseFormatSpec(sc.format);
        options.algorithm = sc.algorithm;
        std::vector<float> buf = inputs[r];
        start = Clock::now();
        try {
          comm.allreduce(buf.data(), buf.size(), options);
        } catch (const Error&) {
          if (sc.callAgain) {
            std::vector<float> again = inputs[r];
            try {
              comm.allreduce(again.data(), again.size(), options);
            } catch (const Error& e) {
              std::lock_guard lock(mutex);
              run.againErrors[r] = e.what();
            }
          }
          throw;
        }
        outputs[r] = std::move(buf);
      } catch (const Error& e) {
        error = std::string(errorCodeName(e.code())) + ": " + e.what();
      } catch (const std::exception& e) {
        error = std::string("non-adaprec exception: ") + e.what();
      }
      const double took = std::chrono::duration<double>(Clock::now() - start).count();
      std::lock_guard lock(mutex);
      seconds[r] = took;
      run.errors[r] = std::move(error);
      finished[r] = true;
      changed.notify_all();
    });
  }
  auto liveFinished = [&] {
    for (int r = 0; r < p; ++r)
      if (!finished[r] && !(stops && r == sc.fault.rank)) return false;
    return true;
  };
  bool hang = false;
  {
    std::unique_lock lock(mutex);
    hang = !changed.wait_for(lock, sc.watchdog, liveFinished);
  }
  for (auto& s : states) s->releaseStopped();
  if (hang) group.abort();
  {
    std::unique_lock lock(mutex);
    const bool all = changed.wait_for(lock, std::chrono::seconds(10), [&] {
      for (int r = 0; r < p; ++r)
        if (!finished[r]) return false;
      return true;
    });
    if (!all) {
      std::fprintf(stderr, "fault test: ranks still blocked 10 s after the watchdog fired and the "
                           "group was aborted; ending the process\n");
      std::_Exit(3);
    }
  }
  for (std::thread& t : threads) t.join();

  for (int r = 0; r < p; ++r) {
    std::lock_guard lock(states[r]->mutex);
    run.fired = run.fired || states[r]->fired;
    run.sent.push_back(states[r]->log);
    if (r == sc.fault.rank && states[r]->faultedTag >= 0) {
      run.faultedPeer = states[r]->faultedPeer;
      run.faultedTag = states[r]->faultedTag;
      run.faultedNumber = states[r]->faultedNumber;
    }
  }
  std::vector<std::vector<float>> liveInputs;
  std::vector<std::vector<float>> liveOutputs;
  int errored = 0;
  int completed = 0;
  for (int r = 0; r < p; ++r) {
    if (stops && r == sc.fault.rank) continue;
    run.seconds = std::max(run.seconds, seconds[r]);
    if (run.errors[r]) {
      ++errored;
      if (run.detail.empty()) run.detail = "rank " + std::to_string(r) + ": " + *run.errors[r];
    } else {
      ++completed;
      liveOutputs.push_back(outputs[r]);
    }
  }
  if (hang) {
    run.outcome = Outcome::kHang;
    return run;
  }
  // Completed ranks must agree bit for bit and be exact: compare each with rank-independent truth.
  std::string wrong;
  if (completed > 0) {
    wrong = checkResults(inputs, std::vector<std::vector<float>>(p, liveOutputs[0]),
                         Format::kFp32, 0, true, false);
    for (std::size_t i = 1; i < liveOutputs.size() && wrong.empty(); ++i)
      if (liveOutputs[i] != liveOutputs[0]) wrong = "completed ranks differ";
  }
  if (!wrong.empty()) {
    run.outcome = Outcome::kSilentWrong;
    run.detail = wrong;
  } else if (errored == 0) {
    run.outcome = Outcome::kCorrect;
  } else {
    run.outcome = completed == 0 ? Outcome::kErrorEverywhere : Outcome::kMixed;
  }
  return run;
}

}  // namespace adaprec::test
