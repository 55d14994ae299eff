// AdaPrec_CommAllreduceDevice on a real GPU (what tests/mpi/test_capi_device.cpp proves on the CPU
// stand-in): cudaMalloc'd buffers, the input uploaded on the caller's non-blocking stream and not
// synchronized before the call (the call must order itself after it), every rank's result bit for bit
// AdaPrec_CommAllreduce's on host memory, "+ef" residuals equal, the legacy default stream (null), and
// host memory through the device entry refused before the round. Under mpirun, ranks share the GPUs
// round-robin. Exits 77 (skipped) when no CUDA device is visible.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "adaprec/adaprec_mpi.h"
#include "engine_check.hpp"
#include "mpi_verdict.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

bool ok(cudaError_t status, Verdict& verdict, const char* what) {
  verdict.check(status == cudaSuccess, std::string(what) + ": " + cudaGetErrorString(status));
  return status == cudaSuccess;
}

int run(int rank) {
  Verdict verdict(MPI_COMM_WORLD);
  cudaStream_t stream = nullptr;
  ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), verdict, "stream");
  AdaPrec_Comm dev = nullptr;
  AdaPrec_Comm host = nullptr;
  AdaPrec_CommCreate(MPI_COMM_WORLD, &dev);
  AdaPrec_CommCreate(MPI_COMM_WORLD, &host);
  const std::size_t count = 65539;
  const std::size_t bytes = count * sizeof(float);
  float* in = nullptr;
  float* out = nullptr;
  ok(cudaMalloc(&in, bytes), verdict, "cudaMalloc");
  ok(cudaMalloc(&out, bytes), verdict, "cudaMalloc");
  std::vector<float> got(count);
  for (const char* algo : {"auto", "ring", "twoshot", "hierarchical"}) {
    for (const char* format : {"fp32", "bf16", "fp8s", "table4", "table2+ef"}) {
      const bool ef = std::string(format).find("+ef") != std::string::npos;
      if (ef && std::string(algo) == "auto") continue;  // auto's native fallback has no residuals
      const std::string key = std::string("k-") + algo;
      for (int step = 0; step < (ef ? 3 : 1); ++step) {
        const bool outOfPlace = step % 2 == 1;
        const std::vector<float> input = makeInput(rank, count, std::string(format) == "fp32", kSeed + step);
        cudaMemcpyAsync(in, input.data(), bytes, cudaMemcpyHostToDevice, stream);  // not synchronized
        AdaPrec_CallStats stats{};
        const int rc = AdaPrec_CommAllreduceDevice(dev, outOfPlace ? in : nullptr, outOfPlace ? out : in,
                                                   static_cast<std::int64_t>(count), format, algo, 1,
                                                   ef ? key.c_str() : nullptr, ADAPREC_CHECK_AGREEMENT, &stats, stream);
        const std::string what = std::string(algo) + " " + format + " step " + std::to_string(step);
        verdict.check(rc == ADAPREC_OK, what + ": " + AdaPrec_LastError());
        ok(cudaMemcpy(got.data(), outOfPlace ? out : in, bytes, cudaMemcpyDeviceToHost), verdict, "download");
        std::vector<float> want = input;
        // What auto resolved to (its calibration is timed per communicator; its native fallback sends fp32).
        const std::string resolved = stats.algorithm;
        const std::string sent = ef ? std::string(format) : std::string(stats.format);
        const int hostRc = AdaPrec_CommAllreduce(host, nullptr, want.data(), static_cast<std::int64_t>(count),
                                                 sent.c_str(), resolved.c_str(), 1, ef ? key.c_str() : nullptr,
                                                 ADAPREC_CHECK_AGREEMENT, nullptr);
        verdict.check(hostRc == ADAPREC_OK && std::memcmp(got.data(), want.data(), bytes) == 0,
                      what + ": the GPU result differs from the host call's");
      }
    }
  }
  std::size_t devSize = 0;
  std::size_t hostSize = 0;
  AdaPrec_CommSaveFeedback(dev, nullptr, 0, &devSize);
  AdaPrec_CommSaveFeedback(host, nullptr, 0, &hostSize);
  std::vector<unsigned char> devBlob(devSize);
  std::vector<unsigned char> hostBlob(hostSize);
  AdaPrec_CommSaveFeedback(dev, devBlob.data(), devSize, &devSize);
  AdaPrec_CommSaveFeedback(host, hostBlob.data(), hostSize, &hostSize);
  verdict.check(devBlob == hostBlob, "+ef residuals on the GPU differ from the host call's");

  // The legacy default stream (null), as torch's default stream hands it over.
  const std::vector<float> input = makeInput(rank, count, true);
  ok(cudaMemcpy(in, input.data(), bytes, cudaMemcpyHostToDevice), verdict, "upload");
  int rc = AdaPrec_CommAllreduceDevice(dev, nullptr, in, static_cast<std::int64_t>(count), "fp32", "ring", 0, nullptr,
                                       ADAPREC_CHECK_AGREEMENT, nullptr, nullptr);
  verdict.check(rc == ADAPREC_OK, std::string("null stream: ") + AdaPrec_LastError());
  // Host memory through the device entry: refused on that rank before the round.
  std::vector<float> hostBuffer = input;
  rc = AdaPrec_CommAllreduceDevice(dev, nullptr, hostBuffer.data(), static_cast<std::int64_t>(count), "fp32", "ring",
                                   0, nullptr, ADAPREC_CHECK_AGREEMENT, nullptr, stream);
  verdict.check(rc == ADAPREC_ERR_INVALID_ARGUMENT, std::string("host memory refused: ") + AdaPrec_LastError());

  AdaPrec_CommFree(dev);
  AdaPrec_CommFree(host);
  cudaFree(in);
  cudaFree(out);
  cudaStreamDestroy(stream);
  return verdict.finish("test_capi_device_real");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (rank == 0) std::printf("no CUDA device visible: skipped\n");
    MPI_Finalize();
    return 77;
  }
  cudaSetDevice(rank % devices);
  const int rc = run(rank);
  MPI_Finalize();
  return rc;
}
