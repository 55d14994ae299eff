// adaprec-train: data-parallel training of an MLP or a small CNN on Fashion-MNIST (or any MNIST-format
// directory) with gradients summed by AdaPrec. Run as `mpirun -np 4 adaprec-train ...`; a single
// process without mpirun works too. `adaprec-train --help` documents every option.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "adaprec/error.hpp"
#include "trainer/run_options.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  adaprec::trainer::RunOptions options;
  CLI::App app{"Data-parallel training with adaptive-precision gradient allreduce (AdaPrec)."};
  adaprec::trainer::addRunOptions(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parsed the same arguments, so every rank leaves here; only rank 0 speaks.
    int code = 0;
    if (rank == 0) {
      code = app.exit(e);
    } else {
      code = e.get_exit_code();
    }
    MPI_Finalize();
    return code;
  }
  try {
    adaprec::trainer::runTraining(options, MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "adaprec-train: rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  MPI_Finalize();
  return 0;
}
