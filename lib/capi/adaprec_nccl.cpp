// adaprecNcclAllReduce (include/adaprec/adaprec_nccl.h): ncclAllReduce's signature over the NCCL
// transport. Compiled only in a build with NCCL. Float sums at or above ADAPREC_MIN_BYTES go through a
// Communicator kept per ncclComm_t, on the caller's device buffers: the codec runs on the caller's
// stream (a CudaDeviceCodec per stream) and the encoded messages go to NCCL in device memory, with no
// copy through the host (docs/gpu.md, "Device memory straight to the transport"); only the library's
// own few control messages (agreement, votes) are staged. Everything else is ncclAllReduce itself.
// Nothing here runs without a GPU — tests/gpu/test_nccl_real.cpp checks it where one exists; the same
// path (device seam + NCCL transport taking device memory) is tested on the CPU over the NCCL fake
// (tests/loopback/test_nccl_fake_device.cpp).
#include "adaprec/adaprec_nccl.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "communicator/signature_hash.hpp"
#include "gpu/cuda_caller.hpp"
#include "transport/nccl_transport.hpp"

namespace {

using adaprec::Communicator;
using adaprec::EnvironmentConfig;

struct CommState {
  // What the communicator was when this state was made: a call whose ncclComm_t no longer matches
  // starts afresh (stateFor), not on the old communicator's split channels.
  int ranks = -1, rank = -1, device = -1;
  bool agreed = false;
  std::shared_ptr<adaprec::detail::NcclTransport> transport;
  std::unique_ptr<Communicator> communicator;
  // The device codec of each stream the caller has used (kept until adaprecNcclCommFree).
  std::map<cudaStream_t, std::shared_ptr<adaprec::detail::DeviceCodec>> codecs;
};

std::mutex& statesMutex() {
  static std::mutex m;
  return m;
}
std::map<ncclComm_t, std::unique_ptr<CommState>>& states() {
  static std::map<ncclComm_t, std::unique_ptr<CommState>> s;
  return s;
}

// One line to stderr: "adaprec: ...".
void report(const std::string& message) {
  std::fprintf(stderr, "adaprec: %s\n", message.c_str());
  std::fflush(stderr);
}

// AdaPrec's state of `comm`, made on its first use. State is kept per ncclComm_t value until
// adaprecNcclCommFree: a communicator destroyed without it leaves its state behind, and NCCL may hand
// its address to a later communicator. Where that one differs in size, rank or device, the old
// communicator is gone for sure: its state is set aside (never freed: destroying its split
// communicators could wait on ranks that are gone) and the call starts afresh, agreement included, as
// every rank of the new communicator then does (one line says so). One alike in all three cannot be
// told apart (the header asks for adaprecNcclCommFree).
ncclResult_t stateFor(ncclComm_t comm, CommState*& out) {
  int ranks = -1, rank = -1, device = -1;
  if (ncclCommCount(comm, &ranks) != ncclSuccess || ncclCommUserRank(comm, &rank) != ncclSuccess ||
      ncclCommCuDevice(comm, &device) != ncclSuccess) {
    report("adaprecNcclAllReduce: ncclCommCount, ncclCommUserRank or ncclCommCuDevice failed on this communicator");
    return ncclInvalidArgument;
  }
  static std::vector<std::unique_ptr<CommState>> setAside;  // states of destroyed communicators
  std::lock_guard lock(statesMutex());
  std::unique_ptr<CommState>& state = states()[comm];
  if (state && (state->ranks != ranks || state->rank != rank || state->device != device)) {
    report("adaprecNcclAllReduce: this ncclComm_t (" + std::to_string(ranks) + " ranks, rank " + std::to_string(rank) +
           ", device " + std::to_string(device) + ") had the state of a destroyed communicator (" +
           std::to_string(state->ranks) + " ranks, rank " + std::to_string(state->rank) + ", device " +
           std::to_string(state->device) + "), never freed: call adaprecNcclCommFree(comm) before "
           "ncclCommDestroy(comm). Starting afresh");
    setAside.push_back(std::move(state));
  }
  if (!state) {
    state = std::make_unique<CommState>();
    state->ranks = ranks;
    state->rank = rank;
    state->device = device;
  }
  out = state.get();
  return ncclSuccess;
}

// The environment, read once; nullptr (after one line on stderr) when a value is invalid.
const EnvironmentConfig* config() {
  static std::once_flag once;
  static std::unique_ptr<EnvironmentConfig> parsed;
  std::call_once(once, [] {
    try {
      parsed = std::make_unique<EnvironmentConfig>(EnvironmentConfig::fromEnvironment());
    } catch (const adaprec::Error& e) {
      report(adaprec::messageForUsers(e));
    }
  });
  return parsed.get();
}

#define ADAPREC_CUDA_OR_RETURN(call)                                                            \
  do {                                                                                         \
    const cudaError_t adaprec_err_ = (call);                                                   \
    if (adaprec_err_ != cudaSuccess) {                                                         \
      report(std::string("adaprecNcclAllReduce: ") + #call + ": " + cudaGetErrorString(adaprec_err_)); \
      return ncclUnhandledCudaError;                                                           \
    }                                                                                          \
  } while (0)

// What a rank whose ADAPREC_* environment is invalid (config() is null) offers to the agreement: no
// valid rank's settings read so, so they all see a disagreement.
constexpr const char* kInvalidSettings = "an invalid ADAPREC_* environment (see its line)";

// Every rank must take the same branch (pass-through or AdaPrec) for the same call, so before the
// first float sum on a communicator the ranks compare their ADAPREC_* settings: one ncclAllReduce
// (max) of the settings' hash and its complement. cfg null: this rank's environment is invalid; it
// still takes part (a rank that returned at once left the others waiting in this very allreduce) and
// its call fails whatever the others hold.
ncclResult_t agreeSettings(ncclComm_t comm, cudaStream_t stream, CommState& state,
                           const EnvironmentConfig* cfg) {
  if (state.agreed) return ncclSuccess;
  const std::string settings = cfg != nullptr ? cfg->agreedSettings() : kInvalidSettings;
  const std::uint64_t signature = adaprec::detail::hashSignatureText(settings);
  std::uint64_t values[2] = {signature, ~signature};
  std::uint64_t* device = nullptr;
  ADAPREC_CUDA_OR_RETURN(cudaMalloc(reinterpret_cast<void**>(&device), sizeof values));
  ncclResult_t rc = ncclSuccess;
  if (cudaMemcpyAsync(device, values, sizeof values, cudaMemcpyHostToDevice, stream) != cudaSuccess) {
    rc = ncclUnhandledCudaError;
  } else {
    rc = ncclAllReduce(device, device, 2, ncclUint64, ncclMax, comm, stream);
  }
  if (rc == ncclSuccess &&
      (cudaMemcpyAsync(values, device, sizeof values, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
       cudaStreamSynchronize(stream) != cudaSuccess))
    rc = ncclUnhandledCudaError;
  cudaFree(device);
  if (rc != ncclSuccess) return rc;
  if (cfg == nullptr) return ncclInvalidArgument;  // its line was printed when the environment was read
  if (values[0] != signature || values[1] != ~signature) {
    report("ranks disagree on the ADAPREC_* settings (this rank: " + settings +
           "); set the same values on every rank");
    return ncclInvalidArgument;
  }
  state.agreed = true;
  return ncclSuccess;
}

ncclResult_t resultFor(adaprec::ErrorCode code) {
  switch (code) {
    case adaprec::ErrorCode::kInvalidArgument:
    case adaprec::ErrorCode::kMismatch: return ncclInvalidArgument;
    case adaprec::ErrorCode::kCuda: return ncclUnhandledCudaError;
    case adaprec::ErrorCode::kTransport: return ncclSystemError;
    default: return ncclInternalError;
  }
}

}  // namespace

extern "C" ncclResult_t adaprecNcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                             cudaStream_t stream) {
  // Calls AdaPrec never takes are ncclAllReduce's, whatever the environment holds: every rank passes
  // them through alike, so none waits for another.
  if (datatype != ncclFloat32 || op != ncclSum || comm == nullptr || count == 0)
    return ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  const EnvironmentConfig* cfg = config();
  CommState* found = nullptr;
  if (const ncclResult_t rc = stateFor(comm, found); rc != ncclSuccess) return rc;
  CommState& state = *found;
  // Agreed before anything else, an invalid environment included: one invalid on some ranks only fails
  // the call on every rank (ncclInvalidArgument) instead of leaving the valid ones waiting.
  if (const ncclResult_t rc = agreeSettings(comm, stream, state, cfg); rc != ncclSuccess) return rc;
  // Default fp32 + auto means "behave exactly like NCCL": the very same ncclAllReduce call.
  const bool plainFp32 = cfg->format.selection == adaprec::Selection::kFixed &&
                         cfg->format.format == adaprec::Format::kFp32 &&
                         cfg->algorithm == adaprec::Algorithm::kAuto;
  if (count * sizeof(float) < cfg->minBytes || plainFp32)
    return ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);

  try {
    if (!state.communicator) {
      adaprec::detail::NcclTransportOptions options;
      options.ownsComm = false;           // the caller's communicator
      // Encoded messages are device memory and go as they are; the few host ones (agreement, votes,
      // auto's calibration) are copied through device scratch.
      options.stageThroughDevice = true;
      state.transport = std::make_shared<adaprec::detail::NcclTransport>(
          adaprec::detail::makeRealNcclApi(), reinterpret_cast<adaprec::detail::NcclComm>(comm),
          reinterpret_cast<adaprec::detail::NcclStream>(stream),
          options);
      state.communicator = std::make_unique<Communicator>(state.transport, cfg->communicator);
    }
    const std::size_t bytes = count * sizeof(float);
    adaprec::detail::checkCudaCall(stream, sendbuff, recvbuff, bytes);  // device memory of this GPU
    std::shared_ptr<adaprec::detail::DeviceCodec>& codec = state.codecs[stream];
    if (!codec) codec = adaprec::detail::makeCudaCallerCodec(stream);
    state.transport->setStream(reinterpret_cast<adaprec::detail::NcclStream>(stream));
    state.communicator->setDevice(codec);
    adaprec::AllreduceOptions options;
    options.format = cfg->format;
    options.algorithm = cfg->algorithm;
    if (options.format.errorFeedback)
      options.key = std::to_string(reinterpret_cast<std::uintptr_t>(recvbuff)) + ":" + std::to_string(count);
    // Queued after the caller's work on `stream`; returns once the result is in recvbuff (the
    // communicator synchronizes the stream), unlike ncclAllReduce, which only enqueues.
    state.communicator->allreduce(static_cast<const float*>(sendbuff), static_cast<float*>(recvbuff), count, options);
    return ncclSuccess;
  } catch (const adaprec::Error& e) {
    report("adaprecNcclAllReduce failed: " + adaprec::withoutMessagePrefix(e));
    return resultFor(e.code());
  } catch (const std::exception& e) {
    report("adaprecNcclAllReduce failed: " + adaprec::withoutMessagePrefix(e));
    return ncclInternalError;
  }
}

extern "C" ncclResult_t adaprecNcclCommFree(ncclComm_t comm) {
  std::unique_ptr<CommState> state;
  {
    std::lock_guard lock(statesMutex());
    auto it = states().find(comm);
    if (it == states().end()) return ncclSuccess;
    state = std::move(it->second);
    states().erase(it);
  }
  try {
    state.reset();  // communicator, transport (its channels), device codecs
  } catch (...) {
    return ncclInternalError;
  }
  return ncclSuccess;
}
