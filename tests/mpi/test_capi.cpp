// C API: AdaPrec_Allreduce called directly. With ADAPREC_FORMAT=fp8 / ADAPREC_ALGO=twoshot /
// ADAPREC_MIN_BYTES=1024 (set before the first call): float sums are compressed and within the
// documented bound, in place and out of place; other datatypes/ops and small messages equal
// PMPI_Allreduce bit for bit; mismatched counts return an MPI error on every rank (communicator with
// MPI_ERRORS_RETURN) instead of hanging; the Communicator cached on a communicator is freed with it;
// counters add up.
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adaprec/adaprec_mpi.h"
#include "engine_check.hpp"
#include "mpi_verdict.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

int run() {
  int rank = 0;
  int p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Verdict verdict(MPI_COMM_WORLD);
  const std::size_t count = 30000;
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < p; ++r) inputs.push_back(makeInput(r, count, false));
  const int q = detail::quantizationsPerValue(Algorithm::kTwoShot, Format::kFp8, p, p);

  // Out of place and MPI_IN_PLACE float sums: compressed, within the bound.
  std::vector<float> out(count);
  verdict.check(AdaPrec_Allreduce(inputs[rank].data(), out.data(), static_cast<int>(count), MPI_FLOAT,
                                  MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
                "out-of-place call succeeds");
  std::string failure = checkResults(inputs, std::vector(p, out), Format::kFp8, q, false, false);
  verdict.check(failure.empty(), "out of place: " + failure);
  std::vector<float> inplace = inputs[rank];
  AdaPrec_Allreduce(MPI_IN_PLACE, inplace.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
  verdict.check(std::memcmp(inplace.data(), out.data(), count * sizeof(float)) == 0,
                "MPI_IN_PLACE gives the same bits as out of place");
  if (p > 1) {
    std::vector<float> plain(count);
    PMPI_Allreduce(inputs[rank].data(), plain.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                   MPI_COMM_WORLD);
    verdict.check(std::memcmp(plain.data(), out.data(), count * sizeof(float)) != 0,
                  "the float sum was compressed (differs from PMPI_Allreduce)");
  }

  // Small float sums, other datatypes and ops: exactly PMPI_Allreduce.
  std::vector<float> small(100), smallRef(100);
  AdaPrec_Allreduce(inputs[rank].data(), small.data(), 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Allreduce(inputs[rank].data(), smallRef.data(), 100, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  verdict.check(std::memcmp(small.data(), smallRef.data(), sizeof(float) * 100) == 0,
                "float sum below ADAPREC_MIN_BYTES passes through");
  std::vector<float> mx(count), mxRef(count);
  AdaPrec_Allreduce(inputs[rank].data(), mx.data(), static_cast<int>(count), MPI_FLOAT, MPI_MAX,
                    MPI_COMM_WORLD);
  PMPI_Allreduce(inputs[rank].data(), mxRef.data(), static_cast<int>(count), MPI_FLOAT, MPI_MAX,
                 MPI_COMM_WORLD);
  verdict.check(std::memcmp(mx.data(), mxRef.data(), count * sizeof(float)) == 0, "MPI_MAX passes through");
  std::vector<double> d(count), dRef(count), dIn(count);
  for (std::size_t i = 0; i < count; ++i) dIn[i] = inputs[rank][i];
  AdaPrec_Allreduce(dIn.data(), d.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Allreduce(dIn.data(), dRef.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  verdict.check(std::memcmp(d.data(), dRef.data(), count * sizeof(double)) == 0,
                "MPI_DOUBLE sum passes through");

  // A communicator of its own: the cached Communicator goes away with MPI_Comm_free.
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  std::vector<float> again(count);
  verdict.check(AdaPrec_Allreduce(inputs[rank].data(), again.data(), static_cast<int>(count), MPI_FLOAT,
                                  MPI_SUM, dup) == MPI_SUCCESS &&
                    std::memcmp(again.data(), out.data(), count * sizeof(float)) == 0,
                "same result on a duplicate communicator");
  if (p > 1) {
    // The last rank passes one element fewer: every rank gets an error code back.
    const int n = static_cast<int>(count) - (rank == p - 1 ? 1 : 0);
    const int rc = AdaPrec_Allreduce(inputs[rank].data(), again.data(), n, MPI_FLOAT, MPI_SUM, dup);
    int errorClass = MPI_SUCCESS;
    MPI_Error_class(rc, &errorClass);
    verdict.check(errorClass == MPI_ERR_COUNT, "count mismatch returns MPI_ERR_COUNT, got " +
                                                   std::to_string(rc));
  }
  {
    // Erroneous buffers (recvbuf MPI_IN_PLACE; sendbuf == recvbuf) get MPI's own answer, as without
    // AdaPrec: the first crashed the process (SIGSEGV), the second was taken for an in-place sum.
    const auto errorClassOf = [](int rc) {
      int errorClass = MPI_SUCCESS;
      MPI_Error_class(rc, &errorClass);
      return errorClass;
    };
    // Open MPI 4.1 reports these on MPI_COMM_WORLD's error handler, whatever the communicator.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const int n = static_cast<int>(count);
    const int inPlaceRecv = AdaPrec_Allreduce(inputs[rank].data(), MPI_IN_PLACE, n, MPI_FLOAT, MPI_SUM, dup);
    const int inPlaceRecvRef = PMPI_Allreduce(inputs[rank].data(), MPI_IN_PLACE, n, MPI_FLOAT, MPI_SUM, dup);
    verdict.check(inPlaceRecv != MPI_SUCCESS && errorClassOf(inPlaceRecv) == errorClassOf(inPlaceRecvRef),
                  "recvbuf MPI_IN_PLACE returns MPI's error: " + std::to_string(inPlaceRecv) + " (MPI: " +
                      std::to_string(inPlaceRecvRef) + ")");
    const int aliased = AdaPrec_Allreduce(again.data(), again.data(), n, MPI_FLOAT, MPI_SUM, dup);
    const int aliasedRef = PMPI_Allreduce(again.data(), again.data(), n, MPI_FLOAT, MPI_SUM, dup);
    verdict.check(errorClassOf(aliased) == errorClassOf(aliasedRef),
                  "sendbuf == recvbuf returns what MPI returns: " + std::to_string(aliased) + " (MPI: " +
                      std::to_string(aliasedRef) + ")");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  }
  MPI_Comm_free(&dup);

  {
    // A count whose byte size wraps (2^62 x 4) is refused, not accepted as a tiny state.
    AdaPrec_Comm handle = nullptr;
    AdaPrec_CommCreate(MPI_COMM_WORLD, &handle);
    const float one = 1.0f;
    const int rc = AdaPrec_CommSetFeedback(handle, "k", "ring", std::uint64_t{1} << 62, 1, &one);
    verdict.check(rc == ADAPREC_ERR_INVALID_ARGUMENT && std::string(AdaPrec_LastError()).find("too large") !=
                                                            std::string::npos,
                  "SetFeedback with count 2^62 is refused: rc " + std::to_string(rc) + " " + AdaPrec_LastError());
    // With count 0 the product bounds nothing: 2^40 slots threw std::bad_alloc as an internal error.
    const int slotsRc = AdaPrec_CommSetFeedback(handle, "k", "ring", 0, std::uint64_t{1} << 40, nullptr);
    verdict.check(slotsRc == ADAPREC_ERR_INVALID_ARGUMENT &&
                      std::string(AdaPrec_LastError()).find("slots (at most 64)") != std::string::npos,
                  "SetFeedback with 2^40 slots is refused: rc " + std::to_string(slotsRc) + " " + AdaPrec_LastError());
    AdaPrec_CommFree(handle);
  }
  if (p > 1) {
    // An intercommunicator is refused with an error code (it crashed in MPI_Comm_split_type).
    MPI_Comm half = MPI_COMM_NULL, inter = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - rank % 2, 78, &inter);
    AdaPrec_Comm handle = nullptr;
    const int rc = AdaPrec_CommCreate(inter, &handle);
    verdict.check(rc == ADAPREC_ERR_INVALID_ARGUMENT && handle == nullptr &&
                      std::string(AdaPrec_LastError()).find("intercommunicator") != std::string::npos,
                  "an intercommunicator is refused: rc " + std::to_string(rc) + " " + AdaPrec_LastError());
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }

  AdaPrec_Stats stats;
  AdaPrec_GetStats(&stats);
  // Intercepted: out of place, in place, duplicate communicator (the mismatched call fails).
  verdict.check(stats.intercepted == 3, "intercepted " + std::to_string(stats.intercepted));
  // Passed through: below the minimum, MPI_MAX, MPI_DOUBLE and the two erroneous buffer pairs.
  verdict.check(stats.passedThrough == 5, "passed through " + std::to_string(stats.passedThrough));
  verdict.check(p == 1 || (stats.wireBytes > 0 && stats.wireBytes * 3 < stats.fp32Bytes),
                "fp8 sends about a quarter of the fp32 bytes: " + std::to_string(stats.wireBytes) +
                    " of " + std::to_string(stats.fp32Bytes));
  AdaPrec_ResetStats();
  AdaPrec_GetStats(&stats);
  verdict.check(stats.intercepted == 0 && stats.wireBytes == 0, "reset clears the counters");
  return verdict.finish("test_capi");
}

}  // namespace

int main(int argc, char** argv) {
  setenv("ADAPREC_FORMAT", "fp8", 1);
  setenv("ADAPREC_ALGO", "twoshot", 1);
  setenv("ADAPREC_MIN_BYTES", "1024", 1);
  return mpiTestMain(&argc, &argv, "test_capi", run);
}
