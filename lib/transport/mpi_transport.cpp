// MPI transport: non-blocking byte messages on a private duplicate of the user's communicator, with
// MPI_ERRORS_RETURN so failures become adaprec::Error instead of aborting inside MPI. Collectives go
// through PMPI_ so they are never routed back into AdaPrec when libadaprec-preload.so intercepts
// MPI_Allreduce.
//
// With a timeout set (Transport::setTimeout), waits poll MPI_Test with a short backoff instead of
// blocking in MPI_Wait, allreduceMax uses the point-to-point dissemination (so a timeout names the rank
// that did not answer) and the native allreduce is MPI_Iallreduce + the same polling loop.
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "codec/half_sum.hpp"
#include "transport/eager_message.hpp"
#include "transport/internal_tags.hpp"
#include "transport/timeout.hpp"

namespace adaprec {
namespace {

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void checkMpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  int errorClass = code;
  MPI_Error_class(code, &errorClass);
  const ErrorCode adaprecCode =
      errorClass == MPI_ERR_TRUNCATE ? ErrorCode::kMismatch : ErrorCode::kTransport;
  ADAPREC_FAIL(adaprecCode, what << " failed: " << mpiErrorText(code));
}

bool mpiAlive() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized == 0;
}

// Polls `request` with MPI_Test until it completes or `timeout` passes (false then). Spins for the
// first ~50 us (small messages complete within that), then sleeps 10 us, doubling up to 1 ms.
bool pollUntil(MPI_Request& request, MPI_Status* status, std::chrono::milliseconds timeout,
               int& code) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  std::chrono::microseconds pause{10};
  for (;;) {
    int flag = 0;
    code = MPI_Test(&request, &flag, status);
    if (code != MPI_SUCCESS || flag != 0) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (now - start < std::chrono::microseconds(50)) continue;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request request, bool isSend, std::size_t bytes, int peer, int worldPeer, int tag,
             std::chrono::milliseconds timeout)
      : request_(request), isSend_(isSend), bytes_(bytes), peer_(peer), worldPeer_(worldPeer),
        tag_(tag), timeout_(timeout) {}

  ~MpiRequest() override {
    if (request_ == MPI_REQUEST_NULL || !mpiAlive()) return;
    // Abandoned during error unwinding: a pending receive must not write into freed memory later.
    if (!isSend_) MPI_Cancel(&request_);
    if (timeout_.count() == 0) {
      MPI_Wait(&request_, MPI_STATUS_IGNORE);
      return;
    }
    // A send to a silent peer may never complete: after the timeout it is left to MPI (freed, not
    // waited for). The transport is unusable after a timeout anyway.
    int code = MPI_SUCCESS;
    if (!pollUntil(request_, MPI_STATUS_IGNORE, timeout_, code)) MPI_Request_free(&request_);
  }

  std::size_t wait() override {
    if (request_ == MPI_REQUEST_NULL) return bytes_;
    MPI_Status status;
    int code = MPI_SUCCESS;
    if (timeout_.count() == 0) {
      code = MPI_Wait(&request_, &status);
    } else if (!pollUntil(request_, &status, timeout_, code)) {
      detail::throwWaitTimeout(timeout_, isSend_, peer_, worldPeer_, tag_);
    }
    request_ = MPI_REQUEST_NULL;
    checkMpi(code, isSend_ ? "MPI_Isend" : "MPI_Irecv");
    if (!isSend_) {
      int got = 0;
      checkMpi(MPI_Get_count(&status, MPI_BYTE, &got), "MPI_Get_count");
      bytes_ = static_cast<std::size_t>(got);
    }
    return bytes_;
  }

  bool done() const override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int flag = 0;
    MPI_Request copy = request_;
    MPI_Request_get_status(copy, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  }

 private:
  MPI_Request request_;
  bool isSend_;
  std::size_t bytes_;
  int peer_;
  int worldPeer_;
  int tag_;
  std::chrono::milliseconds timeout_;
};

// MPI user ops for the native 16-bit allreduce: inout = in + inout with the codec's 16-bit
// arithmetic (codec/half_sum.hpp: add in fp32, round back after every addition).
template <Format kFormat>
void halfSumOp(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* b = static_cast<std::uint16_t*>(inout);
  detail::addHalf(kFormat, static_cast<const std::uint16_t*>(in), b, b, static_cast<std::size_t>(*len));
}

// Whether this MPI moves CUDA device memory: Open MPI's MPIX_Query_cuda_support, asked at run time
// (the library loaded may not be the one compiled against; Debian's answers 0). Other MPIs: no.
bool mpiMovesCudaMemory() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  static const bool aware = MPIX_Query_cuda_support() == 1;
  return aware;
#else
  return false;
#endif
}

class MpiTransport final : public Transport {
 public:
  // Takes ownership of `comm` (already a private communicator). `node`: this rank's node label when
  // inherited from a parent transport (labels only need to be equal for ranks sharing a node).
  explicit MpiTransport(MPI_Comm comm, std::optional<int> node = std::nullopt) : comm_(comm) {
    checkMpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    checkMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    checkMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    worldRanks_ = worldRanksOf(comm_, size_);
    if (node) {
      node_ = *node;
      return;
    }
    const int perNode = detail::ranksPerNodeOverride();
    if (perNode > 0) {
      node_ = rank_ / perNode;
    } else {
      // Node id = lowest rank of this communicator sharing memory with us.
      MPI_Comm shared = MPI_COMM_NULL;
      checkMpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared),
               "MPI_Comm_split_type");
      checkMpi(PMPI_Allreduce(&rank_, &node_, 1, MPI_INT, MPI_MIN, shared), "PMPI_Allreduce(node)");
      MPI_Comm_free(&shared);
    }
  }

  ~MpiTransport() override {
    if (!mpiAlive()) return;
    if (bf16Op_ != MPI_OP_NULL) MPI_Op_free(&bf16Op_);
    if (fp16Op_ != MPI_OP_NULL) MPI_Op_free(&fp16Op_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "mpi"; }
  // A CUDA-aware MPI takes device buffers itself (docs/gpu.md, "Device memory straight to the transport").
  bool acceptsDeviceMemory(std::string_view memorySpace) const override {
    return memorySpace == "cuda" && mpiMovesCudaMemory();
  }

  std::size_t interNodeMessageBytes() const override { return detail::kEagerMessageBytes; }

  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override {
    checkArgs(peer, bytes, tag);
    MPI_Request request = MPI_REQUEST_NULL;
    checkMpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &request),
             "MPI_Isend");
    return std::make_unique<MpiRequest>(request, true, bytes, peer, worldRanks_[peer], tag, timeout());
  }

  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override {
    checkArgs(peer, capacityBytes, tag);
    MPI_Request request = MPI_REQUEST_NULL;
    checkMpi(MPI_Irecv(data, static_cast<int>(capacityBytes), MPI_BYTE, peer, tag, comm_, &request),
             "MPI_Irecv");
    return std::make_unique<MpiRequest>(request, false, 0, peer, worldRanks_[peer], tag, timeout());
  }

  void allreduceMax(std::uint64_t* values, std::size_t count) override {
    if (size_ == 1 || count == 0) return;
    if (timeout().count() != 0) {
      // A few values: the dissemination costs the same ceil(log2 p) rounds and its waits name the peer.
      Transport::allreduceMax(values, count);
      return;
    }
    checkMpi(PMPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(count), MPI_UINT64_T, MPI_MAX,
                            comm_),
             "PMPI_Allreduce(max)");
  }

  void nativeAllreduce(void* recv, std::size_t count, NativeType type) override {
    if (size_ == 1 || count == 0) return;
    ADAPREC_CHECK_ARG(count <= static_cast<std::size_t>(INT_MAX),
                      "native allreduce of " << count << " elements exceeds MPI's int count");
    const int n = static_cast<int>(count);
    if (type == NativeType::kFp32) {
      allreduce(MPI_IN_PLACE, recv, n, MPI_FLOAT, MPI_SUM, "PMPI_Allreduce");
      return;
    }
    MPI_Op& op = type == NativeType::kBf16 ? bf16Op_ : fp16Op_;
    if (op == MPI_OP_NULL)
      checkMpi(MPI_Op_create(type == NativeType::kBf16 ? halfSumOp<Format::kBf16> : halfSumOp<Format::kFp16>, 1, &op),
               "MPI_Op_create");
    allreduce(MPI_IN_PLACE, recv, n, MPI_UINT16_T, op, "PMPI_Allreduce(16)");
  }

  void nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                 NativeType type) override {
    // One rank: the default copies with memmove, which a device buffer (CUDA-aware) cannot take.
    if (send == recv || type != NativeType::kFp32 || count == 0 || (size_ == 1 && !mpiMovesCudaMemory())) {
      Transport::nativeAllreduceOutOfPlace(send, recv, count, type);
      return;
    }
    ADAPREC_CHECK_ARG(count <= static_cast<std::size_t>(INT_MAX),
                      "native allreduce of " << count << " elements exceeds MPI's int count");
    allreduce(send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, "PMPI_Allreduce");
  }

  std::unique_ptr<Transport> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    checkMpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    auto transport = std::make_unique<MpiTransport>(sub, node_);
    transport->setTimeout(timeout());
    return transport;
  }

  int nodeId() const override { return node_; }
  int jobRank() const override { return worldRanks_[static_cast<std::size_t>(rank_)]; }

 private:
  void checkArgs(int peer, std::size_t bytes, int tag) const {
    ADAPREC_CHECK_ARG(peer >= 0 && peer < size_ && peer != rank_,
                      "MPI peer " << peer << " invalid for rank " << rank_ << " of " << size_);
    ADAPREC_CHECK_ARG(tag >= 0 && tag < kMaxAlgorithmTag, "tag " << tag << " out of range");
    ADAPREC_CHECK_ARG(bytes <= static_cast<std::size_t>(INT_MAX),
                      "message of " << bytes << " bytes exceeds MPI's int count");
  }

  // PMPI_Allreduce, or with a timeout MPI_Iallreduce polled until it completes or times out.
  void allreduce(const void* send, void* recv, int n, MPI_Datatype type, MPI_Op op, const char* what) {
    if (timeout().count() == 0) {
      checkMpi(PMPI_Allreduce(send, recv, n, type, op, comm_), what);
      return;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    checkMpi(PMPI_Iallreduce(send, recv, n, type, op, comm_, &request), "PMPI_Iallreduce");
    int code = MPI_SUCCESS;
    if (!pollUntil(request, MPI_STATUS_IGNORE, timeout(), code)) {
      // A pending collective can be neither cancelled nor freed (MPI 3.1, 5.12): it is abandoned, and
      // with it this transport (the reason it must not be used after a timeout).
      ADAPREC_FAIL(ErrorCode::kTransport,
                   "timed out after " << detail::secondsText(timeout()) << " in MPI_Iallreduce over "
                                      << size_ << " ranks (MPI cannot say which rank is missing) — "
                                      << "is every rank alive and in the same allreduce?");
    }
    checkMpi(code, "PMPI_Iallreduce");
  }

  static std::vector<int> worldRanksOf(MPI_Comm comm, int size) {
    std::vector<int> ranks(static_cast<std::size_t>(size));
    std::vector<int> world(static_cast<std::size_t>(size));
    for (int i = 0; i < size; ++i) ranks[static_cast<std::size_t>(i)] = i;
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Group worldGroup = MPI_GROUP_NULL;
    checkMpi(MPI_Comm_group(comm, &group), "MPI_Comm_group");
    checkMpi(MPI_Comm_group(MPI_COMM_WORLD, &worldGroup), "MPI_Comm_group(world)");
    checkMpi(MPI_Group_translate_ranks(group, size, ranks.data(), worldGroup, world.data()),
             "MPI_Group_translate_ranks");
    MPI_Group_free(&group);
    MPI_Group_free(&worldGroup);
    return world;
  }

  MPI_Comm comm_;
  std::vector<int> worldRanks_;  // rank in MPI_COMM_WORLD of every rank, for timeout messages
  int rank_ = 0;
  int size_ = 1;
  int node_ = 0;
  MPI_Op bf16Op_ = MPI_OP_NULL;
  MPI_Op fp16Op_ = MPI_OP_NULL;
};

}  // namespace

std::shared_ptr<Transport> makeMpiTransport(MPI_Comm comm) {
  // An intercommunicator has two groups and no shared-memory split: MPI_Comm_split_type crashed on it.
  int inter = 0;
  checkMpi(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter");
  ADAPREC_CHECK_ARG(inter == 0, "an intercommunicator cannot carry AdaPrec's allreduce (its two groups have no "
                                "common rank order); give an intracommunicator");
  MPI_Comm dup = MPI_COMM_NULL;
  checkMpi(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return std::make_shared<MpiTransport>(dup);
}

}  // namespace adaprec
