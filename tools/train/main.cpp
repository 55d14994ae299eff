// adaprec-train: data-parallel training of an MLP or a small CNN on Fashion-MNIST (or any MNIST-format
// directory) with gradients summed by AdaPrec. Run as `mpirun -np 4 adaprec-train ...`; a single
// process without mpirun works too. `adaprec-train --help` documents every option.
//
// Exit status: 0 success; 1 an error (every rank fails: an error all ranks agreed on ends MPI normally
// on every rank, any other aborts the job); CLI11's codes (> 100) for options it cannot parse or that are
// out of range; 3 (kDivergedExitCode) the training loss became NaN or infinite.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "adaprec/error.hpp"
#include "trainer/run_options.hpp"

namespace {

// Ends the job with `code` on every rank: one failing rank must not leave its peers waiting in a
// collective. A single process has no peers, and MPI_Abort would only add Open MPI's banner.
[[noreturn]] void endJob(int size, int code) {
  std::fflush(stderr);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  std::exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  // Serialized: --reduction overlap / double-buffering reduce on a communication thread, which is the
  // only thread inside MPI while a reduction is in flight (lib/trainer/reduction_pipeline.hpp).
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  adaprec::trainer::RunOptions options;
  CLI::App app{"Data-parallel training with adaptive-precision gradient allreduce (AdaPrec)."};
  adaprec::trainer::addRunOptions(app, options);
  std::optional<CLI::ParseError> parseError;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    parseError = e;
  }
  // A rank whose command line cannot be used (--help included) stops every rank: its arguments may
  // differ from the others' (an MPMD launch; a file: schedule missing on one node), and a rank that
  // left alone hung the others in their first collective. The lowest such rank speaks.
  int first = parseError ? rank : size;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first < size) {
    int code = rank == first ? app.exit(*parseError) : 0;
    MPI_Bcast(&code, 1, MPI_INT, first, MPI_COMM_WORLD);
    if (rank == 0 && first != 0)
      std::fprintf(stderr, "adaprec-train: rank %d could not use its command line (see its message); no rank "
                           "starts\n", first);
    MPI_Finalize();
    return code;
  }
  try {
    adaprec::trainer::agreeOnCommandLine(app, MPI_COMM_WORLD);
    adaprec::trainer::runTraining(options, MPI_COMM_WORLD);
  } catch (const adaprec::trainer::TrainingDiverged& e) {
    std::fprintf(stderr, "adaprec-train: %s\n", adaprec::messageForUsers(e).c_str());
    endJob(size, adaprec::trainer::kDivergedExitCode);
  } catch (const adaprec::trainer::AgreedError& e) {
    // Every rank is here with its own message: end normally, so that none is cut off by an abort.
    std::fprintf(stderr, "adaprec-train: rank %d: error: %s\n", rank, adaprec::messageForUsers(e).c_str());
    std::fflush(stderr);
    MPI_Finalize();
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec-train: rank %d: error: %s\n", rank, adaprec::messageForUsers(e).c_str());
    endJob(size, 1);
  }
  // Rank 0's setup, progress and final-accuracy lines went to a full disk: the job must not look fine.
  const bool written = adaprec::standardStreamsComplete();
  MPI_Finalize();
  if (!written) {
    std::fprintf(stderr, "adaprec-train: rank %d: cannot write to standard output or error\n", rank);
    return 1;
  }
  return 0;
}
