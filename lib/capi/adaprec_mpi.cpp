// The C API: AdaPrec_Allreduce with MPI_Allreduce's exact signature. Float sums at or above
// ADAPREC_MIN_BYTES go through a Communicator cached on the MPI communicator as an attribute (so it
// is freed with the communicator); everything else goes to PMPI_Allreduce untouched. No exception
// crosses this file's functions: errors go through the communicator's MPI error handler, like MPI's own.
#include "adaprec/adaprec_mpi.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "adaprec/communicator.hpp"
#include "adaprec/communicator_mpi.hpp"
#include "adaprec/error.hpp"
#include "capi/capi_config.hpp"
#include "communicator/signature_hash.hpp"

namespace {

using adaprec::AllreduceOptions;
using adaprec::AllreduceStats;
using adaprec::Communicator;

struct Counters {
  std::atomic<std::uint64_t> intercepted{0};
  std::atomic<std::uint64_t> passedThrough{0};
  std::atomic<std::uint64_t> fp32Bytes{0};
  std::atomic<std::uint64_t> wireBytes{0};
  std::atomic<std::uint64_t> nanoseconds{0};
  // Intercepted calls per algorithm that ran (auto resolved), indexed by the Algorithm value.
  std::array<std::atomic<std::uint64_t>, 8> byAlgorithm{};
};

Counters& counters() {
  static Counters c;
  return c;
}

std::mutex& keyvalMutex() {
  static std::mutex m;
  return m;
}
int stateKeyval = MPI_KEYVAL_INVALID;

// What AdaPrec keeps on an MPI communicator (as an attribute, so it is freed with the communicator):
// whether the ranks agreed that their ADAPREC_* environments are valid and on the settings, and the
// Communicator once one is needed.
struct CommState {
  bool configValid = false;  // the ranks agreed every environment is valid (detail::agreeOnConfig)
  bool agreed = false;
  std::unique_ptr<Communicator> communicator;
};

int deleteState(MPI_Comm, int, void* value, void*) {
  delete static_cast<CommState*>(value);
  return MPI_SUCCESS;
}

CommState& stateFor(MPI_Comm comm) {
  {
    std::lock_guard lock(keyvalMutex());
    if (stateKeyval == MPI_KEYVAL_INVALID)
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, deleteState, &stateKeyval, nullptr);
  }
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, stateKeyval, &value, &found);
  if (found) return *static_cast<CommState*>(value);
  auto* created = new CommState;
  MPI_Comm_set_attr(comm, stateKeyval, created);
  return *created;
}

// Every rank of `comm` must decide pass-through or AdaPrec the same way for the same call, so before
// the first float sum on a communicator the ranks compare their ADAPREC_* settings (one tiny allreduce,
// once per communicator). A mismatch is one line on every rank and the communicator's error handler
// (fatal by default), never a hang. Returns the MPI error code, MPI_SUCCESS when they agree.
int agreeSettings(MPI_Comm comm, CommState& state, const adaprec::EnvironmentConfig& config) {
  if (state.agreed) return MPI_SUCCESS;
  const std::string settings = config.agreedSettings();
  const std::uint64_t signature = adaprec::detail::hashSignatureText(settings);
  std::uint64_t values[2] = {signature, ~signature};
  const int rc = PMPI_Allreduce(MPI_IN_PLACE, values, 2, MPI_UINT64_T, MPI_MAX, comm);
  if (rc != MPI_SUCCESS) return rc;
  if (values[0] != signature || values[1] != ~signature) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    std::fprintf(stderr,
                 "adaprec: rank %d: ranks disagree on the ADAPREC_* settings (this rank: %s); set the same "
                 "values on every rank\n",
                 rank, settings.c_str());
    std::fflush(stderr);
    MPI_Comm_call_errhandler(comm, MPI_ERR_ARG);
    return MPI_ERR_ARG;
  }
  state.agreed = true;
  return MPI_SUCCESS;
}

// The Communicator cached on `comm`, created (collectively) on first use.
Communicator& communicatorFor(MPI_Comm comm, CommState& state, const adaprec::EnvironmentConfig& config) {
  if (!state.communicator)
    state.communicator = std::make_unique<Communicator>(adaprec::makeMpiCommunicator(comm, config.communicator));
  return *state.communicator;
}

int passThrough(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                MPI_Comm comm) {
  counters().passedThrough.fetch_add(1, std::memory_order_relaxed);
  return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int errorClassFor(adaprec::ErrorCode code) {
  switch (code) {
    case adaprec::ErrorCode::kMismatch: return MPI_ERR_COUNT;
    case adaprec::ErrorCode::kInvalidArgument: return MPI_ERR_ARG;
    case adaprec::ErrorCode::kTransport: return MPI_ERR_OTHER;
    default: return MPI_ERR_INTERN;
  }
}

}  // namespace

extern "C" int AdaPrec_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                                 MPI_Op op, MPI_Comm comm) {
  int inter = 0;
  if (comm != MPI_COMM_NULL) MPI_Comm_test_inter(comm, &inter);
  // A program calling the C API directly (no preload library, whose MPI_Init agrees on it for the
  // whole job) agrees at its first call on each communicator, whatever the call: an invalid value on
  // rank 3 only stops the job at once, instead of 30 s later (rank 3 could not know whether rank 0
  // had seen it too). One tiny allreduce per communicator; an intercommunicator has no such agreement.
  // The communicator's state is looked up once per call (an attribute lookup), and only where it is read.
  const bool intracomm = comm != MPI_COMM_NULL && !inter;
  const bool agreeHere = intracomm && !adaprec::detail::configAgreedOnWorld();
  // recvbuf MPI_IN_PLACE, and a sendbuf that is recvbuf itself, are erroneous (MPI 4.0, 6.9.3): MPI's own
  // argument check reports them (MPI_ERR_BUFFER), as for any program without AdaPrec; read as buffers
  // here, the first crashed the process.
  const bool validBuffers = recvbuf != MPI_IN_PLACE && sendbuf != recvbuf;
  const bool floatSum = datatype == MPI_FLOAT && op == MPI_SUM && count > 0 && validBuffers;
  CommState* const stateOrNull = agreeHere || (intracomm && floatSum) ? &stateFor(comm) : nullptr;
  if (agreeHere && !stateOrNull->configValid) {
    adaprec::detail::agreeOnConfig(comm);
    stateOrNull->configValid = true;
  }
  const adaprec::EnvironmentConfig& config = adaprec::detail::capiConfigOrAbort();
  if (!intracomm || !floatSum) return passThrough(sendbuf, recvbuf, count, datatype, op, comm);
  CommState& state = *stateOrNull;
  if (const int rc = agreeSettings(comm, state, config); rc != MPI_SUCCESS) return rc;
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
  // Default fp32 + auto means "behave exactly like MPI": the very same PMPI_Allreduce call.
  const bool plainFp32 = config.format.selection == adaprec::Selection::kFixed &&
                         config.format.format == adaprec::Format::kFp32 &&
                         config.algorithm == adaprec::Algorithm::kAuto;
  if (bytes < config.minBytes || plainFp32) return passThrough(sendbuf, recvbuf, count, datatype, op, comm);

  try {
    Communicator& communicator = communicatorFor(comm, state, config);
    AllreduceOptions options;
    options.format = config.format;
    options.algorithm = config.algorithm;
    // Error feedback needs a tensor identity; unmodified programs reuse their gradient buffers.
    if (options.format.errorFeedback)
      options.key = std::to_string(reinterpret_cast<std::uintptr_t>(recvbuf)) + ":" +
                    std::to_string(count);
    float* recv = static_cast<float*>(recvbuf);
    const float* send = sendbuf == MPI_IN_PLACE ? recv : static_cast<const float*>(sendbuf);
    const AllreduceStats stats =
        communicator.allreduce(send, recv, static_cast<std::size_t>(count), options);
    Counters& c = counters();
    c.intercepted.fetch_add(1, std::memory_order_relaxed);
    c.byAlgorithm[static_cast<std::size_t>(stats.algorithm) % c.byAlgorithm.size()].fetch_add(
        1, std::memory_order_relaxed);
    c.fp32Bytes.fetch_add(stats.fp32Bytes, std::memory_order_relaxed);
    c.wireBytes.fetch_add(stats.wireBytes, std::memory_order_relaxed);
    c.nanoseconds.fetch_add(static_cast<std::uint64_t>(stats.totalSeconds * 1e9),
                            std::memory_order_relaxed);
    return MPI_SUCCESS;
  } catch (const adaprec::Error& e) {
    std::fprintf(stderr, "adaprec: AdaPrec_Allreduce failed: %s\n", adaprec::withoutMessagePrefix(e).c_str());
    const int code = errorClassFor(e.code());
    MPI_Comm_call_errhandler(comm, code);
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec: AdaPrec_Allreduce failed: %s\n", adaprec::withoutMessagePrefix(e).c_str());
    MPI_Comm_call_errhandler(comm, MPI_ERR_INTERN);
    return MPI_ERR_INTERN;
  }
}

extern "C" void AdaPrec_GetStats(AdaPrec_Stats* stats) {
  if (stats == nullptr) return;
  const Counters& c = counters();
  stats->intercepted = c.intercepted.load();
  stats->passedThrough = c.passedThrough.load();
  stats->fp32Bytes = c.fp32Bytes.load();
  stats->wireBytes = c.wireBytes.load();
  stats->seconds = static_cast<double>(c.nanoseconds.load()) * 1e-9;
}

extern "C" void AdaPrec_ResetStats(void) {
  Counters& c = counters();
  c.intercepted = 0;
  c.passedThrough = 0;
  c.fp32Bytes = 0;
  c.wireBytes = 0;
  c.nanoseconds = 0;
  for (auto& n : c.byAlgorithm) n = 0;
}

extern "C" void AdaPrec_PrintStats(void) {
  AdaPrec_Stats mine;
  AdaPrec_GetStats(&mine);
  constexpr int kAlgorithms = 8;
  std::uint64_t local[5 + kAlgorithms] = {mine.intercepted, mine.passedThrough, mine.fp32Bytes, mine.wireBytes,
                                          static_cast<std::uint64_t>(mine.seconds * 1e9)};
  for (int a = 0; a < kAlgorithms; ++a) local[5 + a] = counters().byAlgorithm[static_cast<std::size_t>(a)].load();
  std::uint64_t total[5 + kAlgorithms] = {};
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  PMPI_Reduce(local, total, 5 + kAlgorithms, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  const adaprec::EnvironmentConfig& config = adaprec::detail::capiConfigOrAbort();
  const double ratio = total[3] == 0 ? 0.0 : static_cast<double>(total[2]) / static_cast<double>(total[3]);
  // What ran, summed over ranks ("auto: twoshot 12, native 3"): auto's choices are visible.
  std::string ran;
  for (adaprec::Algorithm a : adaprec::allAlgorithms()) {
    const std::uint64_t n = total[5 + static_cast<int>(a) % kAlgorithms];
    if (a == adaprec::Algorithm::kAuto || n == 0) continue;
    if (!ran.empty()) ran += ',';
    ran += adaprec::algorithmName(a);
    ran += ':';
    ran += std::to_string(n);
  }
  std::fprintf(stderr,
               "adaprec: stats over %d ranks: format=%s algo=%s ran=%s intercepted=%llu passed_through=%llu "
               "fp32_bytes=%llu sent_bytes=%llu compression=%.2fx seconds=%.6f\n",
               size, adaprec::toString(config.format).c_str(),
               std::string(adaprec::algorithmName(config.algorithm)).c_str(), ran.empty() ? "-" : ran.c_str(),
               static_cast<unsigned long long>(total[0]), static_cast<unsigned long long>(total[1]),
               static_cast<unsigned long long>(total[2]), static_cast<unsigned long long>(total[3]),
               ratio, static_cast<double>(total[4]) * 1e-9);
}
