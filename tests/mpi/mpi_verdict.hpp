// A multi-rank verdict for plain MPI test mains: each rank records its failures, then all ranks
// agree on the total before the process exits, so one failing rank cannot leave the others waiting.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

namespace adaprec::test {

class Verdict {
 public:
  explicit Verdict(MPI_Comm comm) : comm_(comm) { MPI_Comm_rank(comm, &rank_); }

  void check(bool ok, const std::string& what) {
    ++checks_;
    if (ok) return;
    ++failures_;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank_, what.c_str());
  }

  // Collective: the summed failures of all ranks; rank 0 prints the summary. Returns the exit code.
  int finish(const char* name) {
    int total = 0;
    int checks = 0;
    PMPI_Allreduce(&failures_, &total, 1, MPI_INT, MPI_SUM, comm_);
    PMPI_Allreduce(&checks_, &checks, 1, MPI_INT, MPI_SUM, comm_);
    if (rank_ == 0)
      std::printf("%s: %d checks over all ranks, %d failed\n", name, checks, total);
    return total == 0 ? 0 : 1;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int checks_ = 0;
  int failures_ = 0;
};

// FNV-1a of `bytes` bytes: results compared across ranks or runs by one word.
inline std::uint64_t hashBytes(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Collective over MPI_COMM_WORLD: whether every rank holds the same value.
inline bool agreed(std::uint64_t value) {
  std::uint64_t v[2] = {value, ~value};
  PMPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return v[0] == value && v[1] == ~value;
}

// The main of an MPI test program: MPI_Init, run(), MPI_Finalize; an exception escaping run() is
// printed and aborts the job, so one failing rank cannot leave the others waiting.
template <typename Run>
int mpiTestMain(int* argc, char*** argv, const char* name, Run run) {
  MPI_Init(argc, argv);
  int rc = 1;
  try {
    rc = run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return rc;
}

}  // namespace adaprec::test
