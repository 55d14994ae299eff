// The explicit-communicator C API (AdaPrec_Comm*): what language bindings call. Every entry point
// catches everything, stores a one-line message for AdaPrec_LastError and returns a code, so no C++
// exception and no MPI error handler ever reaches a binding.
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "adaprec/adaprec_mpi.h"
#include "adaprec/communicator.hpp"
#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "adaprec/format.hpp"
#include "algorithm/device_codec.hpp"
#include "capi/capi_device.hpp"
#include "capi/capi_guard.hpp"
#include "codec/chunk_header.hpp"
#include "communicator/signature_hash.hpp"
#include "gpu/cuda_caller.hpp"

struct AdaPrec_CommObject {
  // AdaPrec_CommAllreduceDevice's codecs, one per stream the caller gave (created on first use, never
  // dropped: a key's residuals may live in a codec's memory). Declared before the communicator so
  // they outlive the residuals it holds.
  std::map<void*, std::shared_ptr<adaprec::detail::DeviceCodec>> devices;
  adaprec::Communicator communicator;
};

namespace {

using adaprec::Error;
using adaprec::ErrorCode;

thread_local std::string lastError;

// This API's entry points: an exception becomes its code and this API's message (capi_guard.hpp).
template <typename Body>
int guarded(const char* function, Body&& body) {
  return adaprec::detail::guardedCall(lastError, function, std::forward<Body>(body));
}

adaprec::Communicator& communicatorOf(AdaPrec_Comm comm) {
  ADAPREC_CHECK_ARG(comm != nullptr, "null AdaPrec_Comm");
  return comm->communicator;
}

std::string textOf(const char* text, const char* what) {
  ADAPREC_CHECK_ARG(text != nullptr, what << " must not be NULL");
  return text;
}

void copyName(char* out, std::size_t capacity, std::string_view name) {
  const std::size_t n = std::min(name.size(), capacity - 1);
  std::memcpy(out, name.data(), n);
  out[n] = '\0';
}

// Is the call the same on every rank, and is every rank's input usable? One allreduce (max) of
// {signature, ~signature, size - first bad rank}.
void checkAgreement(adaprec::Communicator& communicator, bool localInvalid, std::uint64_t signature,
                    const std::string& description) {
  const int rank = communicator.rank();
  std::uint64_t values[3] = {signature, ~signature,
                             localInvalid ? static_cast<std::uint64_t>(communicator.size() - rank) : 0};
  communicator.transport().allreduceMax(values, 3);
  if (values[2] != 0 && !localInvalid) {
    const std::uint64_t badRank = static_cast<std::uint64_t>(communicator.size()) - values[2];
    throw Error(static_cast<ErrorCode>(ADAPREC_ERR_PEER_INVALID),
                "rank " + std::to_string(badRank) +
                    " passed invalid input (see its error); nothing was reduced on any rank");
  }
  ADAPREC_CHECK(localInvalid || (values[0] == signature && values[1] == ~signature), ErrorCode::kMismatch,
                "ranks disagree on the allreduce (this rank: " << description << "); nothing was reduced");
}

// Calls that talk to MPI return an error instead of letting MPI abort the process when it is not
// (or no longer) initialized. MPI_Initialized and MPI_Finalized may be called at any time.
void requireMpi() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  ADAPREC_CHECK(finalized == 0, ErrorCode::kTransport, "MPI has been finalized (MPI_Finalize was called)");
  ADAPREC_CHECK(initialized != 0, ErrorCode::kTransport, "MPI is not initialized");
}

}  // namespace

extern "C" const char* AdaPrec_LastError(void) { return lastError.c_str(); }

extern "C" int AdaPrec_CommCreate(MPI_Comm comm, AdaPrec_Comm* out) {
  return guarded("AdaPrec_CommCreate", [&] {
    ADAPREC_CHECK_ARG(out != nullptr, "out must not be NULL");
    *out = nullptr;
    ADAPREC_CHECK_ARG(comm != MPI_COMM_NULL, "MPI_COMM_NULL");
    requireMpi();
    *out = new AdaPrec_CommObject{{}, adaprec::makeMpiCommunicator(comm)};
  });
}

extern "C" int AdaPrec_CommFree(AdaPrec_Comm comm) {
  return guarded("AdaPrec_CommFree", [&] { delete comm; });
}

extern "C" int AdaPrec_CommRank(AdaPrec_Comm comm, int* rank) {
  return guarded("AdaPrec_CommRank", [&] {
    ADAPREC_CHECK_ARG(rank != nullptr, "rank must not be NULL");
    *rank = communicatorOf(comm).rank();
  });
}

extern "C" int AdaPrec_CommSize(AdaPrec_Comm comm, int* size) {
  return guarded("AdaPrec_CommSize", [&] {
    ADAPREC_CHECK_ARG(size != nullptr, "size must not be NULL");
    *size = communicatorOf(comm).size();
  });
}

namespace {

// The communicator's buffers live on `device` for one call (host memory again afterwards, also when
// the call throws).
class DeviceForCall {
 public:
  DeviceForCall(adaprec::Communicator& communicator, std::shared_ptr<adaprec::detail::DeviceCodec> device)
      : communicator_(communicator), active_(device != nullptr) {
    if (active_) communicator_.setDevice(std::move(device));
  }
  ~DeviceForCall() {
    if (active_) communicator_.setDevice(nullptr);
  }
  DeviceForCall(const DeviceForCall&) = delete;
  DeviceForCall& operator=(const DeviceForCall&) = delete;

 private:
  adaprec::Communicator& communicator_;
  bool active_;
};

// AdaPrec_CommAllreduce, and with onDevice AdaPrec_CommAllreduceDevice on `stream`.
int allreduceCall(const char* function, AdaPrec_Comm comm, const float* send, float* recv, int64_t count,
                  const char* format, const char* algo, int average, const char* key, int flags,
                  AdaPrec_CallStats* stats, bool onDevice, void* stream) {
  return guarded(function, [&] {
    adaprec::Communicator& communicator = communicatorOf(comm);
    requireMpi();
    const bool check = (flags & (ADAPREC_CHECK_AGREEMENT | ADAPREC_LOCAL_INVALID)) != 0;
    ADAPREC_CHECK_ARG((flags & ~(ADAPREC_CHECK_AGREEMENT | ADAPREC_LOCAL_INVALID)) == 0,
                      "unknown flags " << flags);
    // Everything local is validated first; with the agreement check a local failure is reported to
    // the other ranks before this rank throws, so nobody waits for it. Whether this rank can reach
    // its device is such a local check: a machine without a GPU fails here, not inside the round.
    adaprec::AllreduceOptions options;
    std::optional<Error> localError;
    std::shared_ptr<adaprec::detail::DeviceCodec> device;
    if ((flags & ADAPREC_LOCAL_INVALID) != 0) {
      localError.emplace(ErrorCode::kInvalidArgument, "this rank's input is invalid (ADAPREC_LOCAL_INVALID)");
    } else {
      try {
        ADAPREC_CHECK_ARG(count >= 0, "count " << count << " is negative");
        ADAPREC_CHECK_ARG(count == 0 || recv != nullptr, "null receive buffer for " << count << " elements");
        options.format = adaprec::parseFormatSpec(textOf(format, "format"));
        options.algorithm = adaprec::parseAlgorithm(textOf(algo, "algo"));
        options.average = average != 0;
        options.key = key != nullptr ? key : "";
        ADAPREC_CHECK_ARG(!options.format.errorFeedback || !options.key.empty(),
                          "format '" << format << "' uses error feedback and needs a key naming the tensor");
        if (onDevice) {
          const adaprec::detail::CapiDeviceBackend& backend = adaprec::detail::capiDeviceBackend();
          backend.check(stream, send, recv, static_cast<std::size_t>(count) * sizeof(float));
          std::shared_ptr<adaprec::detail::DeviceCodec>& cached = comm->devices[stream];
          if (!cached) cached = backend.make(stream);
          device = cached;
        }
      } catch (const Error& e) {
        localError = e;
      } catch (const std::exception& e) {  // bad_alloc making a codec, say: still this rank's alone
        localError.emplace(ErrorCode::kInternal, e.what());
      }
    }
    if (!check && localError) throw *localError;
    if (check) {
      const std::string spec = localError ? "" : adaprec::toString(options.format);
      const std::string algorithm = localError ? "" : std::string(adaprec::algorithmName(options.algorithm));
      using adaprec::detail::hashSignatureText;
      const std::uint64_t signature = adaprec::detail::signatureOf(
          hashSignatureText(spec), hashSignatureText(algorithm), count, options.average, options.key.empty());
      checkAgreement(communicator, localError.has_value(), signature,
                     "count=" + std::to_string(count) + " format=" + spec + " algo=" + algorithm +
                         " average=" + std::to_string(options.average) +
                         " key=" + (options.key.empty() ? "none" : "given"));
      if (localError) throw *localError;
    } else {
      // Unchecked: no round for local problems, but the call itself is still agreed on every path,
      // the native MPI_Allreduce too (different counts there corrupt the heap inside MPI).
      options.checkEveryPath = true;
    }
    const float* source = send != nullptr ? send : recv;
    const DeviceForCall onItsDevice(communicator, std::move(device));
    const adaprec::AllreduceStats s =
        communicator.allreduce(source, recv, static_cast<std::size_t>(count), options);
    if (stats != nullptr) {
      copyName(stats->algorithm, sizeof stats->algorithm, adaprec::algorithmName(s.algorithm));
      copyName(stats->format, sizeof stats->format, adaprec::formatName(s.format));
      stats->count = s.count;
      stats->wireBytes = s.wireBytes;
      stats->fp32Bytes = s.fp32Bytes;
      stats->encodeSeconds = s.encodeSeconds;
      stats->decodeSeconds = s.decodeSeconds;
      stats->transferSeconds = s.transferSeconds;
      stats->totalSeconds = s.totalSeconds;
    }
  });
}

}  // namespace

extern "C" int AdaPrec_CommAllreduce(AdaPrec_Comm comm, const float* send, float* recv, int64_t count,
                                     const char* format, const char* algo, int average, const char* key,
                                     int flags, AdaPrec_CallStats* stats) {
  return allreduceCall("AdaPrec_CommAllreduce", comm, send, recv, count, format, algo, average, key, flags, stats,
                       false, nullptr);
}

extern "C" int AdaPrec_CommAllreduceDevice(AdaPrec_Comm comm, const float* send, float* recv, int64_t count,
                                           const char* format, const char* algo, int average, const char* key,
                                           int flags, AdaPrec_CallStats* stats, void* stream) {
  return allreduceCall("AdaPrec_CommAllreduceDevice", comm, send, recv, count, format, algo, average, key, flags,
                       stats, true, stream);
}

extern "C" int AdaPrec_HasCuda(void) {
  if (adaprec::detail::cudaBuilt()) {
    lastError.clear();
    return 1;
  }
  lastError = std::string("AdaPrec_HasCuda: ") + adaprec::detail::kBuildWithCuda;
  return 0;
}

extern "C" int AdaPrec_CommSaveFeedback(AdaPrec_Comm comm, void* out, size_t capacity, size_t* size) {
  return guarded("AdaPrec_CommSaveFeedback", [&] {
    ADAPREC_CHECK_ARG(size != nullptr, "size must not be NULL");
    const std::vector<std::byte> blob = communicatorOf(comm).saveErrorFeedback();
    *size = blob.size();
    if (out != nullptr && capacity >= blob.size()) std::memcpy(out, blob.data(), blob.size());
  });
}

extern "C" int AdaPrec_CommLoadFeedback(AdaPrec_Comm comm, const void* bytes, size_t size) {
  return guarded("AdaPrec_CommLoadFeedback", [&] {
    ADAPREC_CHECK_ARG(bytes != nullptr || size == 0, "null bytes for " << size << " bytes");
    communicatorOf(comm).loadErrorFeedback({static_cast<const std::byte*>(bytes), size});
  });
}

extern "C" int AdaPrec_CommResetFeedback(AdaPrec_Comm comm, const char* key) {
  return guarded("AdaPrec_CommResetFeedback", [&] {
    if (key == nullptr) {
      communicatorOf(comm).resetErrorFeedback();
    } else {
      communicatorOf(comm).resetErrorFeedback(key);
    }
  });
}

extern "C" int AdaPrec_CommFeedbackInfo(AdaPrec_Comm comm, const char* key, uint64_t* count,
                                        uint64_t* slots, char* algo, size_t algoCapacity) {
  return guarded("AdaPrec_CommFeedbackInfo", [&] {
    ADAPREC_CHECK_ARG(count != nullptr && slots != nullptr, "count and slots must not be NULL");
    const auto state = communicatorOf(comm).errorFeedback(textOf(key, "key"));
    *count = state ? state->count : 0;
    *slots = state ? state->slots.size() : 0;
    if (algo != nullptr && algoCapacity > 0)
      copyName(algo, algoCapacity, state ? adaprec::algorithmName(state->algorithm) : "");
  });
}

extern "C" int AdaPrec_CommGetFeedback(AdaPrec_Comm comm, const char* key, uint64_t slot, float* out,
                                       uint64_t count) {
  return guarded("AdaPrec_CommGetFeedback", [&] {
    const std::string name = textOf(key, "key");
    const auto state = communicatorOf(comm).errorFeedback(name);
    ADAPREC_CHECK_ARG(state.has_value(), "no error-feedback state under key '" << name << "'");
    ADAPREC_CHECK_ARG(slot < state->slots.size(), "key '" << name << "' has " << state->slots.size()
                                                          << " slots, not slot " << slot);
    ADAPREC_CHECK(count == state->count, ErrorCode::kMismatch,
                  "key '" << name << "' holds " << state->count << " floats per slot, not " << count);
    ADAPREC_CHECK_ARG(out != nullptr || count == 0, "null output");
    const std::vector<float>& values = state->slots[slot];
    if (values.empty()) {
      std::fill(out, out + count, 0.0f);
    } else {
      std::memcpy(out, values.data(), values.size() * sizeof(float));
    }
  });
}

extern "C" int AdaPrec_CommSetFeedback(AdaPrec_Comm comm, const char* key, const char* algo,
                                       uint64_t count, uint64_t slots, const float* data) {
  return guarded("AdaPrec_CommSetFeedback", [&] {
    // count x slots floats must be addressable: 2^62 x 4 wrapped to a small product and "succeeded".
    std::uint64_t floats = 0;
    ADAPREC_CHECK_ARG(!__builtin_mul_overflow(count, slots, &floats) && count <= adaprec::codec::kMaxChunkCount &&
                          floats <= std::numeric_limits<std::size_t>::max() / sizeof(float),
                      "count " << count << " x slots " << slots << " floats is too large");
    ADAPREC_CHECK_ARG(data != nullptr || floats == 0, "null data");
    // Before allocating them (with count 0 the product above does not bound them: 2^40 slots threw
    // std::bad_alloc as an internal error).
    ADAPREC_CHECK_ARG(slots <= adaprec::ErrorFeedbackState::kMaxSlots,
                      slots << " slots (at most " << adaprec::ErrorFeedbackState::kMaxSlots << ")");
    adaprec::ErrorFeedbackState state;
    state.count = static_cast<std::size_t>(count);
    state.algorithm = adaprec::parseAlgorithm(textOf(algo, "algo"));
    state.slots.resize(static_cast<std::size_t>(slots));
    for (std::size_t s = 0; s < state.slots.size(); ++s)
      state.slots[s].assign(data + s * count, data + (s + 1) * count);
    communicatorOf(comm).setErrorFeedback(textOf(key, "key"), std::move(state));
  });
}
