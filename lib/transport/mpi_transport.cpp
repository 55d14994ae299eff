// MPI transport: non-blocking byte messages on a private duplicate of the user's communicator, with
// MPI_ERRORS_RETURN so failures become adaprec::Error instead of aborting inside MPI. Collectives go
// through PMPI_ so they are never routed back into AdaPrec when libadaprec-preload.so intercepts
// MPI_Allreduce.
#include <mpi.h>

#include <climits>
#include <optional>
#include <string>

#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "transport/half_convert.hpp"
#include "transport/internal_tags.hpp"

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

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request request, bool isSend, std::size_t bytes)
      : request_(request), isSend_(isSend), bytes_(bytes) {}

  ~MpiRequest() override {
    if (request_ == MPI_REQUEST_NULL || !mpiAlive()) return;
    // Abandoned during error unwinding: a pending receive must not write into freed memory later.
    if (!isSend_) MPI_Cancel(&request_);
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

  std::size_t wait() override {
    if (request_ == MPI_REQUEST_NULL) return bytes_;
    MPI_Status status;
    const int code = MPI_Wait(&request_, &status);
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
};

// MPI user ops for the native 16-bit allreduce: add in fp32, round back after every addition.
void bf16SumOp(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = detail::floatToBf16(detail::bf16ToFloat(a[i]) + detail::bf16ToFloat(b[i]));
}

void fp16SumOp(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = detail::floatToFp16(detail::fp16ToFloat(a[i]) + detail::fp16ToFloat(b[i]));
}

class MpiTransport final : public Transport {
 public:
  // Takes ownership of `comm` (already a private communicator). `node`: this rank's node label when
  // inherited from a parent transport (labels only need to be equal for ranks sharing a node).
  explicit MpiTransport(MPI_Comm comm, std::optional<int> node = std::nullopt) : comm_(comm) {
    checkMpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    checkMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    checkMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
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

  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override {
    checkArgs(peer, bytes, tag);
    MPI_Request request = MPI_REQUEST_NULL;
    checkMpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &request),
             "MPI_Isend");
    return std::make_unique<MpiRequest>(request, true, bytes);
  }

  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override {
    checkArgs(peer, capacityBytes, tag);
    MPI_Request request = MPI_REQUEST_NULL;
    checkMpi(MPI_Irecv(data, static_cast<int>(capacityBytes), MPI_BYTE, peer, tag, comm_, &request),
             "MPI_Irecv");
    return std::make_unique<MpiRequest>(request, false, 0);
  }

  void allreduceMax(std::uint64_t* values, std::size_t count) override {
    if (size_ == 1 || count == 0) return;
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
      checkMpi(PMPI_Allreduce(MPI_IN_PLACE, recv, n, MPI_FLOAT, MPI_SUM, comm_), "PMPI_Allreduce");
      return;
    }
    MPI_Op& op = type == NativeType::kBf16 ? bf16Op_ : fp16Op_;
    if (op == MPI_OP_NULL)
      checkMpi(MPI_Op_create(type == NativeType::kBf16 ? bf16SumOp : fp16SumOp, 1, &op),
               "MPI_Op_create");
    checkMpi(PMPI_Allreduce(MPI_IN_PLACE, recv, n, MPI_UINT16_T, op, comm_), "PMPI_Allreduce(16)");
  }

  void nativeAllreduceOutOfPlace(const void* send, void* recv, std::size_t count,
                                 NativeType type) override {
    if (send == recv || type != NativeType::kFp32 || size_ == 1 || count == 0) {
      Transport::nativeAllreduceOutOfPlace(send, recv, count, type);
      return;
    }
    ADAPREC_CHECK_ARG(count <= static_cast<std::size_t>(INT_MAX),
                      "native allreduce of " << count << " elements exceeds MPI's int count");
    checkMpi(PMPI_Allreduce(send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_),
             "PMPI_Allreduce");
  }

  std::unique_ptr<Transport> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    checkMpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return std::make_unique<MpiTransport>(sub, node_);
  }

  int nodeId() const override { return node_; }

 private:
  void checkArgs(int peer, std::size_t bytes, int tag) const {
    ADAPREC_CHECK_ARG(peer >= 0 && peer < size_ && peer != rank_,
                      "MPI peer " << peer << " invalid for rank " << rank_ << " of " << size_);
    ADAPREC_CHECK_ARG(tag >= 0 && tag < kMaxAlgorithmTag, "tag " << tag << " out of range");
    ADAPREC_CHECK_ARG(bytes <= static_cast<std::size_t>(INT_MAX),
                      "message of " << bytes << " bytes exceeds MPI's int count");
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int node_ = 0;
  MPI_Op bf16Op_ = MPI_OP_NULL;
  MPI_Op fp16Op_ = MPI_OP_NULL;
};

}  // namespace

std::shared_ptr<Transport> makeMpiTransport(MPI_Comm comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  checkMpi(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return std::make_shared<MpiTransport>(dup);
}

}  // namespace adaprec
