// The real NcclApi: each call is the NCCL or CUDA runtime call of the same name. Compiled against NCCL
// only in a build where meson found it (ADAPREC_HAVE_NCCL); elsewhere makeRealNcclApi() returns nullptr.
// Nothing here runs on a machine without a GPU: tests/gpu/test_nccl_real.cpp exercises it where one is.
#include "transport/nccl_api.hpp"

#ifdef ADAPREC_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace adaprec::detail {
namespace {

static_assert(sizeof(NcclUniqueId) == sizeof(ncclUniqueId), "ncclUniqueId is 128 bytes");

thread_local std::string tlsCudaError;

ncclComm_t native(NcclComm comm) { return reinterpret_cast<ncclComm_t>(comm); }
cudaStream_t native(NcclStream stream) { return reinterpret_cast<cudaStream_t>(stream); }

NcclResult fromNccl(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return NcclResult::kSuccess;
    case ncclUnhandledCudaError: return NcclResult::kUnhandledCudaError;
    case ncclSystemError: return NcclResult::kSystemError;
    case ncclInternalError: return NcclResult::kInternalError;
    case ncclInvalidArgument: return NcclResult::kInvalidArgument;
    case ncclInvalidUsage: return NcclResult::kInvalidUsage;
    case ncclRemoteError: return NcclResult::kRemoteError;
    case ncclInProgress: return NcclResult::kInProgress;
    default: return NcclResult::kInternalError;
  }
}

NcclResult fromCuda(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return NcclResult::kSuccess;
  tlsCudaError = std::string(call) + ": " + cudaGetErrorString(error);
  return NcclResult::kUnhandledCudaError;
}

// ncclFloat8e5m2 came with NCCL 2.24 (nccl.h). Its sum runs on sm_90 and newer only: NCCL itself
// returns ncclInvalidArgument below ("FP8 reduction support begins with sm90 capable devices",
// taskAppend in src/enqueue.cc).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
#define ADAPREC_NCCL_HAS_FP8 1
#else
#define ADAPREC_NCCL_HAS_FP8 0
#endif

ncclDataType_t ncclType(NcclDataType type) {
  switch (type) {
    case NcclDataType::kUint8: return ncclUint8;
    case NcclDataType::kFloat32: return ncclFloat32;
    case NcclDataType::kBfloat16: return ncclBfloat16;
    case NcclDataType::kFloat16: return ncclFloat16;
#if ADAPREC_NCCL_HAS_FP8
    case NcclDataType::kFloat8e5m2: return ncclFloat8e5m2;
#else
    case NcclDataType::kFloat8e5m2: return ncclUint8;  // the same bytes: right for send/recv, not a sum
#endif
  }
  return ncclUint8;
}

class RealNcclApi final : public NcclApi {
 public:
  NcclResult getUniqueId(NcclUniqueId* id) override {
    ncclUniqueId native{};
    const NcclResult r = fromNccl(ncclGetUniqueId(&native));
    std::memcpy(id->bytes, native.internal, sizeof id->bytes);
    return r;
  }
  NcclResult commInitRank(NcclComm* comm, int nranks, const NcclUniqueId& id, int rank) override {
    ncclUniqueId native{};
    std::memcpy(native.internal, id.bytes, sizeof id.bytes);
    ncclComm_t created = nullptr;
    const NcclResult r = fromNccl(ncclCommInitRank(&created, nranks, native, rank));
    *comm = reinterpret_cast<NcclComm>(created);
    return r;
  }
  NcclResult commSplit(NcclComm comm, int color, int key, NcclComm* newComm) override {
    ncclComm_t created = nullptr;
    const NcclResult r = fromNccl(ncclCommSplit(native(comm), color, key, &created, nullptr));
    *newComm = reinterpret_cast<NcclComm>(created);
    return r;
  }
  NcclResult commDestroy(NcclComm comm) override { return fromNccl(ncclCommDestroy(native(comm))); }
  NcclResult commAbort(NcclComm comm) override { return fromNccl(ncclCommAbort(native(comm))); }
  NcclResult commCount(NcclComm comm, int* count) override {
    return fromNccl(ncclCommCount(native(comm), count));
  }
  NcclResult commUserRank(NcclComm comm, int* rank) override {
    return fromNccl(ncclCommUserRank(native(comm), rank));
  }
  NcclResult groupStart() override { return fromNccl(ncclGroupStart()); }
  NcclResult groupEnd() override { return fromNccl(ncclGroupEnd()); }
  NcclResult send(const void* data, std::size_t count, NcclDataType type, int peer, NcclComm comm,
                  NcclStream stream) override {
    lastComm_ = comm;
    return fromNccl(ncclSend(data, count, ncclType(type), peer, native(comm), native(stream)));
  }
  NcclResult recv(void* data, std::size_t count, NcclDataType type, int peer, NcclComm comm,
                  NcclStream stream) override {
    lastComm_ = comm;
    return fromNccl(ncclRecv(data, count, ncclType(type), peer, native(comm), native(stream)));
  }
  NcclResult allReduceSum(const void* send, void* recv, std::size_t count, NcclDataType type,
                          NcclComm comm, NcclStream stream) override {
    lastComm_ = comm;
    if (!ADAPREC_NCCL_HAS_FP8 && type == NcclDataType::kFloat8e5m2) {
      tlsCudaError = "ncclAllReduce: ncclFloat8e5m2 needs NCCL >= 2.24; this build's nccl.h is " +
                     std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
      return NcclResult::kInvalidArgument;
    }
    return fromNccl(ncclAllReduce(send, recv, count, ncclType(type), ncclSum, native(comm), native(stream)));
  }
  NcclResult streamCreate(NcclStream* stream) override {
    cudaStream_t created = nullptr;
    const NcclResult r = fromCuda(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "cudaStreamCreate");
    *stream = reinterpret_cast<NcclStream>(created);
    return r;
  }
  NcclResult streamDestroy(NcclStream stream) override {
    return fromCuda(cudaStreamDestroy(native(stream)), "cudaStreamDestroy");
  }
  // Without a timeout: cudaStreamSynchronize, then the communicator's asynchronous error. With one:
  // polls cudaStreamQuery and ncclCommGetAsyncError (PyTorch's watchdog does the same) and gives up
  // with kTimedOut; NCCL cannot tell which peer is missing, so the message cannot name it.
  NcclResult streamSynchronize(NcclStream stream, NcclComm comm,
                               std::chrono::milliseconds timeout) override {
    lastComm_ = comm;
    if (timeout.count() == 0) {
      const NcclResult r = fromCuda(cudaStreamSynchronize(native(stream)), "cudaStreamSynchronize");
      if (r != NcclResult::kSuccess || comm == nullptr) return r;
      return asyncError(comm);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const cudaError_t state = cudaStreamQuery(native(stream));
      if (state == cudaSuccess) return comm == nullptr ? NcclResult::kSuccess : asyncError(comm);
      if (state != cudaErrorNotReady) return fromCuda(state, "cudaStreamQuery");
      if (comm != nullptr) {
        const NcclResult failed = asyncError(comm);
        if (failed != NcclResult::kSuccess) return failed;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        tlsCudaError = "timed out waiting for the NCCL stream (NCCL cannot say which peer is missing)";
        return NcclResult::kTimedOut;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  NcclResult eventCreate(NcclEvent* event) override {
    cudaEvent_t created = nullptr;
    const NcclResult r = fromCuda(cudaEventCreateWithFlags(&created, cudaEventDisableTiming), "cudaEventCreate");
    *event = reinterpret_cast<NcclEvent>(created);
    return r;
  }
  NcclResult eventDestroy(NcclEvent event) override {
    return fromCuda(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)), "cudaEventDestroy");
  }
  NcclResult eventRecord(NcclEvent event, NcclStream stream) override {
    return fromCuda(cudaEventRecord(reinterpret_cast<cudaEvent_t>(event), native(stream)), "cudaEventRecord");
  }
  // As streamSynchronize, on the event.
  NcclResult eventSynchronize(NcclEvent event, NcclComm comm, std::chrono::milliseconds timeout) override {
    lastComm_ = comm;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const cudaError_t state = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
      if (state == cudaSuccess) return comm == nullptr ? NcclResult::kSuccess : asyncError(comm);
      if (state != cudaErrorNotReady) return fromCuda(state, "cudaEventQuery");
      if (comm != nullptr) {
        const NcclResult failed = asyncError(comm);
        if (failed != NcclResult::kSuccess) return failed;
      }
      if (timeout.count() != 0 && std::chrono::steady_clock::now() > deadline) {
        tlsCudaError = "timed out waiting for an NCCL operation (NCCL cannot say which peer is missing)";
        return NcclResult::kTimedOut;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  NcclResult deviceAlloc(void** ptr, std::size_t bytes) override {
    return fromCuda(cudaMalloc(ptr, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
  NcclResult deviceFree(void* ptr) override { return fromCuda(cudaFree(ptr), "cudaFree"); }
  NcclResult memcpyAsync(void* dst, const void* src, std::size_t bytes, NcclStream stream) override {
    return fromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(stream)), "cudaMemcpyAsync");
  }
  bool movesMemory(std::string_view memorySpace) const override { return memorySpace == "cuda"; }
  bool isDeviceMemory(const void* p) const override {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      cudaGetLastError();  // an unknown pointer is host memory here; clear the sticky-free error
      return false;
    }
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  }
  const char* errorString(NcclResult result) const override {
    if (result == NcclResult::kMismatch || result == NcclResult::kTimedOut) return ncclResultName(result);
    return ncclGetErrorString(static_cast<ncclResult_t>(result));
  }
  std::string lastError() const override {
    if (!tlsCudaError.empty()) {
      std::string text = tlsCudaError;
      tlsCudaError.clear();
      return text;
    }
    const char* text = ncclGetLastError(native(lastComm_));
    return text != nullptr ? text : "";
  }

 private:
  NcclResult asyncError(NcclComm comm) {
    ncclResult_t async = ncclSuccess;
    const NcclResult r = fromNccl(ncclCommGetAsyncError(native(comm), &async));
    return r != NcclResult::kSuccess ? r : fromNccl(async);
  }

  NcclComm lastComm_ = nullptr;
};

}  // namespace

std::shared_ptr<NcclApi> makeRealNcclApi() { return std::make_shared<RealNcclApi>(); }

}  // namespace adaprec::detail

#else

namespace adaprec::detail {
std::shared_ptr<NcclApi> makeRealNcclApi() { return nullptr; }
}  // namespace adaprec::detail

#endif
