// The real NCCL path, where only a GPU can check it: NcclApi over libnccl (nccl_real.cpp), the NCCL
// transport over it, and adaprecNcclAllReduce. Exits 77 (skipped) when no CUDA device is visible, as on
// the machines this project is built on; tests/loopback/test_nccl_fake_* check the same transport over
// the host fake. With one GPU: a one-rank communicator (pass-through, compression and staging on one
// rank). With several: one rank per GPU on threads, the transport's channels and the compressed
// allreduce against the host reference.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "adaprec/adaprec_nccl.h"
#include "adaprec/communicator.hpp"
#include "transport/nccl_transport.hpp"

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

// adaprecNcclAllReduce of `count` floats on every rank of `comms` (one thread per GPU); every rank's
// input is rank + 1 + i % 7, so the exact sum is known.
void entryPoint(const std::vector<ncclComm_t>& comms, std::size_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::thread> threads;
  std::vector<int> ok(static_cast<std::size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      cudaStream_t stream = nullptr;
      cudaStreamCreate(&stream);
      std::vector<float> host(count);
      for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<float>(r + 1 + static_cast<int>(i % 7));
      float* device = nullptr;
      cudaMalloc(&device, count * sizeof(float));
      cudaMemcpy(device, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
      const ncclResult_t rc = adaprecNcclAllReduce(device, device, count, ncclFloat32, ncclSum,
                                                   comms[static_cast<std::size_t>(r)], stream);
      cudaMemcpy(host.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost);
      bool exact = rc == ncclSuccess;
      for (std::size_t i = 0; i < count && exact; ++i) {
        const float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
        exact = host[i] == want;
      }
      ok[static_cast<std::size_t>(r)] = exact ? 1 : 0;
      adaprecNcclCommFree(comms[static_cast<std::size_t>(r)]);
      cudaFree(device);
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) expect(ok[static_cast<std::size_t>(r)] == 1, "adaprecNcclAllReduce exact (integers, fp32 wire)");
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  const int n = devices;
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
  std::vector<int> list(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) list[static_cast<std::size_t>(i)] = i;
  if (ncclCommInitAll(comms.data(), n, list.data()) != ncclSuccess) {
    std::fprintf(stderr, "ncclCommInitAll failed\n");
    return 1;
  }
  // fp32 over the compressed path (ring): exact on integer inputs, staged through device scratch.
  setenv("ADAPREC_FORMAT", "fp32", 1);
  setenv("ADAPREC_ALGO", "ring", 1);
  setenv("ADAPREC_MIN_BYTES", "0", 1);
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{65539}}) entryPoint(comms, count);
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  std::printf("%s (%d GPU%s)\n", failures == 0 ? "ok" : "FAILED", n, n == 1 ? "" : "s");
  return failures == 0 ? 0 : 1;
}
