// Reference for the Python module test: runs every case of reference_cases.txt through the C++ API
// (adaprec::Communicator over MPI) on the deterministic input of python_module_check.py and writes
// each rank's result to OUT/<case index>.rank<r>.f32.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/communicator_mpi.hpp"
#include "adaprec/format.hpp"

namespace {

constexpr std::size_t kCount = 100003;  // odd: uneven chunks in every algorithm

// Exactly representable values, the same formula as referenceInput in python_module_check.py.
std::vector<float> referenceInput(int rank) {
  std::vector<float> x(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    const std::uint64_t v = (static_cast<std::uint64_t>(i) * 2654435761ull + static_cast<std::uint64_t>(rank) * 40503ull) % 65536;
    const float unit = static_cast<float>(static_cast<std::int64_t>(v) - 32768) / 32768.0f;
    x[i] = unit * std::ldexp(1.0f, static_cast<int>(i % 13) - 6);
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    if (argc != 3) throw std::runtime_error("usage: cpp_reference CASES_FILE OUT_DIR");
    adaprec::Communicator comm = adaprec::makeMpiCommunicator(MPI_COMM_WORLD);
    std::ifstream cases(argv[1]);
    std::string line;
    int index = 0;
    while (std::getline(cases, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::string format, algorithm;
      int average = 0, calls = 0;
      fields >> format >> algorithm >> average >> calls;
      adaprec::AllreduceOptions options;
      options.format = adaprec::parseFormatSpec(format);
      options.algorithm = adaprec::parseAlgorithm(algorithm);
      options.average = average != 0;
      options.key = "case" + std::to_string(index);
      std::vector<float> x = referenceInput(rank);
      for (int c = 0; c < calls; ++c) comm.allreduce(x.data(), x.size(), options);
      const std::string path = std::string(argv[2]) + "/" + std::to_string(index) + ".rank" + std::to_string(rank) + ".f32";
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
      if (!out) throw std::runtime_error("cannot write " + path);
      ++index;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_reference: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
