// Runs allreduces over the NCCL transport on the NCCL fake (ranks as threads, one fake shared by them),
// or over the loopback transport, with the same per-rank body, so the two can be compared bit for bit.
// Nothing is asserted inside the threads: outputs, stats and error codes are collected per rank.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "adaprec/transport.hpp"
#include "transport/nccl_fake.hpp"
#include "transport/nccl_transport.hpp"

namespace adaprec::test {

// A generous watchdog: a deadlock in the transport's batching becomes an error naming the peer instead
// of a hang until meson's timeout.
inline constexpr std::chrono::milliseconds kNcclTestTimeout{60000};

struct RunSetup {
  int ranks = 1;
  int ranksPerNode = 2;
  bool stageThroughDevice = false;  // NCCL only: messages copied through "device" scratch
  // The transport's timeout; with one, every allreduce ends with a completion vote. 0: none (the
  // default of a Communicator), so a deadlock hangs until meson's timeout.
  std::chrono::milliseconds timeout = kNcclTestTimeout;
  // The NcclApi each rank's transport calls (default: the shared fake itself), e.g. a decorator that
  // moves a rank's CPU stand-in device memory (stand_in_nccl_api.hpp).
  std::function<std::shared_ptr<detail::NcclApi>(int rank, const std::shared_ptr<detail::NcclFake>& fake)> rankApi =
      nullptr;
};

// Calls body(rank, transport) on one thread per rank with an NCCL transport over a fresh NcclFake. If a
// rank throws, the fake is aborted (so no rank waits forever) and the first error is rethrown after
// the join, lowest rank first, kTransport errors (the abort's echoes) last.
inline void runOnNcclFake(const RunSetup& setup,
                          const std::function<void(int, std::shared_ptr<Transport>)>& body) {
  auto fake = std::make_shared<detail::NcclFake>(detail::NcclFakeOptions{kNcclTestTimeout});
  detail::NcclUniqueId id;
  if (fake->getUniqueId(&id) != detail::NcclResult::kSuccess) throw std::runtime_error("getUniqueId");
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(setup.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < setup.ranks; ++r) {
    threads.emplace_back([&, r] {
      detail::NcclStream stream = nullptr;
      try {
        detail::NcclComm comm = nullptr;
        if (fake->streamCreate(&stream) != detail::NcclResult::kSuccess ||
            fake->commInitRank(&comm, setup.ranks, id, r) != detail::NcclResult::kSuccess)
          throw Error(ErrorCode::kTransport, "NCCL fake init: " + fake->lastError());
        detail::NcclTransportOptions options;
        options.nodeId = setup.ranksPerNode > 0 ? r / setup.ranksPerNode : 0;
        options.stageThroughDevice = setup.stageThroughDevice;
        std::shared_ptr<detail::NcclApi> api = fake;
        if (setup.rankApi) api = setup.rankApi(r, fake);
        auto transport = std::make_shared<detail::NcclTransport>(api, comm, stream, options);
        transport->setTimeout(setup.timeout);
        body(r, transport);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        fake->abort();
      }
      if (stream != nullptr) fake->streamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  std::exception_ptr transportError;
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kTransport) throw;
      // The rank that failed first, not the others' "aborted" echoes.
      const bool echo = std::string(error.what()).find("aborted (another rank failed)") != std::string::npos;
      if (!transportError || !echo) transportError = e;
      if (!echo) break;
    }
  }
  if (transportError) std::rethrow_exception(transportError);
}

inline void runOnLoopback(const RunSetup& setup,
                          const std::function<void(int, std::shared_ptr<Transport>)>& body) {
  LoopbackGroup group(setup.ranks, setup.ranksPerNode);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    transport->setTimeout(setup.timeout);
    body(rank, std::move(transport));
  });
}

struct Outcome {
  // outputs[call][rank]: the result of each allreduce call.
  std::vector<std::vector<std::vector<float>>> outputs;
  std::vector<AllreduceStats> stats;             // of the first call, per rank
  std::vector<AllreduceStats> rank0Calls;        // of every call, on rank 0 (auto may differ per call)
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

// `calls` allreduces of inputs[rank] on one Communicator per rank (in place, or out of place), each
// starting from the input again; with error feedback the later calls use the earlier calls' residuals.
// Call i uses perCall[i] where given (replaying what auto ran, call by call), else `options`.
inline Outcome runAllreduces(bool overNccl, const RunSetup& setup,
                             const std::vector<std::vector<float>>& inputs,
                             const AllreduceOptions& options, bool outOfPlace, int calls,
                             const std::vector<AllreduceOptions>& perCall = {}) {
  Outcome out;
  const auto ranks = static_cast<std::size_t>(setup.ranks);
  out.outputs.assign(static_cast<std::size_t>(calls), std::vector<std::vector<float>>(ranks));
  out.stats.resize(ranks);
  out.rank0Calls.resize(static_cast<std::size_t>(calls));
  out.errors.resize(ranks);
  auto body = [&](int rank, std::shared_ptr<Transport> transport) {
    const auto r = static_cast<std::size_t>(rank);
    try {
      CommunicatorOptions communicatorOptions = CommunicatorOptions::fromEnvironment();
      Communicator comm(std::move(transport), communicatorOptions);
      for (int call = 0; call < calls; ++call) {
        const std::vector<float>& in = inputs[r];
        std::vector<float> result(in.size());
        const AllreduceOptions& callOptions = perCall.empty() ? options : perCall[static_cast<std::size_t>(call)];
        AllreduceStats stats;
        if (outOfPlace) {
          stats = comm.allreduce(in.data(), result.data(), in.size(), callOptions);
        } else {
          result = in;
          stats = comm.allreduce(result.data(), result.size(), callOptions);
        }
        if (call == 0) out.stats[r] = stats;
        if (rank == 0) out.rank0Calls[static_cast<std::size_t>(call)] = stats;
        out.outputs[static_cast<std::size_t>(call)][r] = std::move(result);
      }
    } catch (const Error& e) {
      out.errors[r] = e.code();
      // Raised by every rank together; anything else aborts the run so no rank waits forever.
      if (e.code() != ErrorCode::kMismatch && e.code() != ErrorCode::kUnsupported) throw;
    }
  };
  if (overNccl) {
    runOnNcclFake(setup, body);
  } else {
    runOnLoopback(setup, body);
  }
  return out;
}

}  // namespace adaprec::test
