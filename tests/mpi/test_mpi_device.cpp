// Device buffers under MPI: every rank (a process) has its buffers on its own CPU stand-in of a device
// (tests/loopback/cpu_device.hpp: kernels/ functors, deferred stream). Run twice: staged, every encoded
// chunk through host memory into MPI and back (lib/algorithm/steps.cpp), and direct, MPI taking the
// device buffers themselves as a CUDA-aware MPI does (device_memory_transport.hpp, which refuses a buffer
// handed over with device work still queued). Each algorithm x formats x counts,
// in and out of place, must give bit for bit what the same call gives on host memory, on every rank
// (a hash agreed by all ranks); an error-feedback sequence must leave the same residuals.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "adaprec/communicator_mpi.hpp"
#include "cpu_device.hpp"
#include "device_memory_transport.hpp"
#include "engine_check.hpp"
#include "mpi_verdict.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

std::size_t testCopyBytes = 0;  // what onDevice itself copied between host and device

// The call on device memory: input up, allreduce, result down.
std::vector<float> onDevice(Communicator& comm, CpuStandInDevice& device, const std::vector<float>& input,
                            const AllreduceOptions& opt, bool outOfPlace, AllreduceStats* stats = nullptr) {
  const std::size_t bytes = input.size() * sizeof(float);
  auto* in = static_cast<float*>(device.allocate(bytes));
  auto* out = outOfPlace ? static_cast<float*>(device.allocate(bytes)) : in;
  device.copyToDevice(in, input.data(), bytes);
  device.synchronize();
  testCopyBytes += 2 * bytes;
  const AllreduceStats s = comm.allreduce(in, out, input.size(), opt);
  if (stats != nullptr) *stats = s;
  std::vector<float> result(input.size());
  device.copyToHost(result.data(), out, bytes);
  device.release(in);
  if (out != in) device.release(out);
  device.synchronize();
  return result;
}

// Every algorithm x formats x counts on `dev` (buffers on `device`), each against `host`, then error
// feedback; `mode` names the run in messages.
void sweep(Verdict& verdict, Communicator& host, Communicator& dev, CpuStandInDevice* device, const std::string& mode) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Format formats[] = {Format::kFp32, Format::kBf16, Format::kFp8s, Format::kTable1, Format::kTable4,
                            Format::kTable3z};
  for (Algorithm algorithm : allAlgorithms()) {
    for (Format format : formats) {
      if (algorithm == Algorithm::kNative && !(format == Format::kFp32 || format == Format::kBf16)) continue;
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65539}}) {
        const bool outOfPlace = count % 2 == 1;
        AllreduceOptions opt;
        opt.format.format = format;
        opt.algorithm = algorithm;
        opt.average = count == 1000;
        const std::vector<float> input = makeInput(rank, count, isLossless(format));
        AllreduceStats ran;
        const std::vector<float> got = onDevice(dev, *device, input, opt, outOfPlace, &ran);
        // The host path with what the device call resolved (auto's calibration is timed per communicator).
        AllreduceOptions hostOpt = opt;
        hostOpt.algorithm = ran.algorithm;
        hostOpt.format.format = ran.format;
        std::vector<float> want = input;
        host.allreduce(want.data(), count, hostOpt);
        std::ostringstream what;
        what << mode << ": " << algorithmName(algorithm) << " " << formatName(format) << " count " << count;
        verdict.check(count == 0 || std::memcmp(got.data(), want.data(), count * sizeof(float)) == 0,
                      what.str() + ": device result differs from the host path");
        verdict.check(agreed(hashBytes(got.data(), count * sizeof(float))), what.str() + ": ranks differ");
      }
    }
  }
  // Error feedback: four averaged steps, then the residuals themselves.
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kHierarchical}) {
    AllreduceOptions opt;
    opt.format = parseFormatSpec("table2+ef");
    opt.algorithm = algorithm;
    opt.average = true;
    opt.key = std::string("ef-") + std::string(algorithmName(algorithm));
    bool same = true;
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> input = makeInput(rank, 5001, false, kSeed + 7u * step);
      std::vector<float> want = input;
      host.allreduce(want.data(), want.size(), opt);
      const std::vector<float> got = onDevice(dev, *device, input, opt, step % 2 == 1);
      same = same && std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0;
    }
    verdict.check(same, mode + ": " + std::string(algorithmName(algorithm)) + " +ef: device results differ from the host path");
    verdict.check(host.saveErrorFeedback() == dev.saveErrorFeedback(),
                  mode + ": " + std::string(algorithmName(algorithm)) + " +ef: device residuals differ from the host path");
  }
}

int run() {
  Verdict verdict(MPI_COMM_WORLD);
  auto device = std::make_shared<CpuStandInDevice>();
  {
    // Staged: MPI gets host memory only (what Debian's Open MPI, not CUDA-aware, needs).
    Communicator host = makeMpiCommunicator(MPI_COMM_WORLD);
    Communicator dev = makeMpiCommunicator(MPI_COMM_WORLD);
    dev.setDevice(device);
    sweep(verdict, host, dev, device.get(), "staged");
  }
  // The bytes the library itself copied between host and device in each mode (rank 0's sweep).
  const std::size_t stagedCopies = device->hostDeviceCopyBytes() - testCopyBytes;
  testCopyBytes = 0;
  {
    // Direct: MPI takes the device buffers themselves, as a CUDA-aware MPI does (MPIX_Query_cuda_support),
    // through the stand-in's translating transport; no message is staged through the host.
    Communicator host = makeMpiCommunicator(MPI_COMM_WORLD);
    auto direct = std::make_shared<DeviceMemoryTransport>(makeMpiTransport(MPI_COMM_WORLD), *device);
    Communicator dev(direct, CommunicatorOptions::fromEnvironment());
    dev.setDevice(device);
    const std::size_t copiedBefore = device->hostDeviceCopyBytes();
    sweep(verdict, host, dev, device.get(), "direct");
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    verdict.check(size == 1 || direct->deviceMessages() > 0, "direct: no message went to MPI in device memory");
    const std::size_t directCopies = device->hostDeviceCopyBytes() - copiedBefore - testCopyBytes;
    // Direct copies only received chunks' headers and native's 16-bit sums (rounded on the host).
    verdict.check(size == 1 || directCopies * 10 < stagedCopies, "direct: copied nearly as much as staged");
    if (rank == 0 && size > 1)
      std::printf("library's host<->device copies over the sweep (rank 0): staged %zu bytes, direct %zu bytes "
                  "(%zu messages in device memory)\n", stagedCopies, directCopies, direct->deviceMessages());
  }
  return verdict.finish("test_mpi_device");
}

}  // namespace

int main(int argc, char** argv) { return mpiTestMain(&argc, &argv, "test_mpi_device", run); }
