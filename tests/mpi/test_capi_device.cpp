// AdaPrec_CommAllreduceDevice, the C entry point for device buffers (include/adaprec/adaprec_mpi.h),
// under MPI without a GPU: the internal backend hook (lib/capi/capi_device.hpp) makes it use the CPU
// stand-in of a device (tests/loopback/cpu_device.hpp: kernels/ functors on a deferred stream, memory
// the host cannot touch), a "stream" being a CpuStandInDevice (one device's one stream). Checked:
//   - every algorithm x fp32, bf16, fp8s, table4 x counts 0..65539, in and out of place, averaged or
//     not, and a "+ef" sequence: the result is bit for bit AdaPrec_CommAllreduce's on host memory (and
//     the saved residuals too), and the same on every rank;
//   - the stream: work the caller queued on it before the call (an upload not yet synchronized) is
//     ordered before the reduction, the call returns with nothing left queued on that stream, another
//     stream is untouched, one codec per communicator and stream (made once, reused);
//   - host calls on the same communicator stay host calls; a rank may pass host memory while the
//     others pass device memory;
//   - errors inside the agreement round: a rank whose device check fails gets that error, the others
//     ADAPREC_ERR_PEER_INVALID, nothing hangs and the next call works; with the real backend (CUDA)
//     this build reports what it is: ADAPREC_ERR_UNSUPPORTED with how to build with CUDA, or in a CUDA
//     build without a GPU ADAPREC_ERR_CUDA with the runtime's reason.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "adaprec/adaprec_mpi.h"
#include "adaprec/error.hpp"
#include "capi/capi_device.hpp"
#include "cpu_device.hpp"
#include "engine_check.hpp"
#include "mpi_verdict.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

// The test backend: a stream is a CpuStandInDevice the test registered.
struct StandInStreams {
  std::set<const void*> known;
  int makes = 0;             // codecs made (once per communicator and stream)
  bool failCheck = false;    // this rank's device check fails as a machine without a GPU does
};
StandInStreams streams;

detail::CapiDeviceBackend standInBackend() {
  return {[](void* stream, const void*, const void*, std::size_t) {
            ADAPREC_CHECK(!streams.failCheck, ErrorCode::kCuda, "no usable CUDA device (test: this rank has none)");
            ADAPREC_CHECK_ARG(streams.known.count(stream) != 0, "not a stand-in stream");
          },
          [](void* stream) -> std::shared_ptr<detail::DeviceCodec> {
            ++streams.makes;
            // The test owns the stand-ins (they outlive the communicators).
            return {static_cast<CpuStandInDevice*>(stream), [](detail::DeviceCodec*) {}};
          }};
}

// Device memory of a stand-in holding `values`; `synchronized` false leaves the upload queued.
float* upload(CpuStandInDevice& device, const std::vector<float>& values, bool synchronized = true) {
  auto* p = static_cast<float*>(device.allocate(values.size() * sizeof(float)));
  device.copyToDevice(p, values.data(), values.size() * sizeof(float));
  if (synchronized) device.synchronize();
  return p;
}

std::vector<float> download(CpuStandInDevice& device, const float* p, std::size_t count) {
  std::vector<float> values(count);
  device.copyToHost(values.data(), p, count * sizeof(float));
  device.synchronize();
  return values;
}

struct Call {
  std::string format;
  std::string algo;
  int average = 0;
  const char* key = nullptr;
  int flags = ADAPREC_CHECK_AGREEMENT;
};

// The call on the stand-in's memory (input up, allreduce, result down); rc and stats through out-params.
std::vector<float> onDevice(AdaPrec_Comm comm, CpuStandInDevice& device, const std::vector<float>& input,
                            const Call& call, bool outOfPlace, int& rc, AdaPrec_CallStats& stats) {
  float* in = upload(device, input);
  float* out = outOfPlace ? static_cast<float*>(device.allocate(input.size() * sizeof(float))) : in;
  rc = AdaPrec_CommAllreduceDevice(comm, outOfPlace ? in : nullptr, out, static_cast<std::int64_t>(input.size()),
                                   call.format.c_str(), call.algo.c_str(), call.average, call.key, call.flags,
                                   &stats, &device);
  std::vector<float> result = download(device, out, input.size());
  device.release(in);
  if (out != in) device.release(out);
  device.synchronize();
  return result;
}

std::vector<float> onHost(AdaPrec_Comm comm, const std::vector<float>& input, const Call& call, int& rc) {
  std::vector<float> result = input;
  rc = AdaPrec_CommAllreduce(comm, nullptr, result.data(), static_cast<std::int64_t>(input.size()),
                             call.format.c_str(), call.algo.c_str(), call.average, call.key, call.flags, nullptr);
  return result;
}

std::string describe(const Call& call, std::size_t count) {
  return call.algo + " " + call.format + " count " + std::to_string(count) + (call.average ? " averaged" : "");
}

int run() {
  int rank = 0;
  int p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Verdict verdict(MPI_COMM_WORLD);
  // Declared before the communicators: a communicator keeps codecs (and residuals) on them until freed.
  CpuStandInDevice deviceA;
  CpuStandInDevice deviceB;
  streams.known = {&deviceA, &deviceB};
  const detail::CapiDeviceBackend real = detail::setCapiDeviceBackend(standInBackend());

  AdaPrec_Comm dev = nullptr;
  AdaPrec_Comm host = nullptr;
  verdict.check(AdaPrec_CommCreate(MPI_COMM_WORLD, &dev) == ADAPREC_OK &&
                    AdaPrec_CommCreate(MPI_COMM_WORLD, &host) == ADAPREC_OK,
                "communicators created");

  // Bit identity with the host call, every algorithm.
  for (const char* algo : {"auto", "native", "ring", "twoshot", "rabenseifner", "recursive_doubling", "hierarchical"}) {
    for (const char* format : {"fp32", "bf16", "fp8s", "table4"}) {
      const bool native = std::string(algo) == "native";
      if (native && !(std::string(format) == "fp32" || std::string(format) == "bf16")) continue;
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{65539}}) {
        Call call{format, algo, count == 1000 ? 1 : 0};
        const std::vector<float> input = makeInput(rank, count, std::string(format) == "fp32");
        int rc = -1;
        AdaPrec_CallStats stats{};
        const std::vector<float> got = onDevice(dev, deviceB, input, call, count % 2 == 1, rc, stats);
        verdict.check(rc == ADAPREC_OK, describe(call, count) + ": rc " + std::to_string(rc) + " " + AdaPrec_LastError());
        // The host call with what auto resolved to (its calibration is timed per communicator; its
        // native fallback sends fp32).
        Call hostCall = call;
        hostCall.algo = stats.algorithm;
        hostCall.format = stats.format;
        int hostRc = -1;
        const std::vector<float> want = onHost(host, input, hostCall, hostRc);
        verdict.check(hostRc == ADAPREC_OK && std::memcmp(got.data(), want.data(), count * sizeof(float)) == 0,
                      describe(call, count) + ": device result differs from the host call");
        verdict.check(agreed(hashBytes(got.data(), count * sizeof(float))), describe(call, count) + ": ranks differ");
      }
    }
  }

  // Error feedback: three averaged steps, results and then the residuals themselves (copied down
  // from the stand-in's memory by SaveFeedback).
  for (const char* algo : {"ring", "twoshot"}) {
    const std::string key = std::string("ef-") + algo;
    Call call{"table2+ef", algo, 1, key.c_str()};
    bool same = true;
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> input = makeInput(rank, 5001, false, kSeed + 11u * step);
      int rc = -1;
      int hostRc = -1;
      AdaPrec_CallStats stats{};
      const std::vector<float> got = onDevice(dev, deviceB, input, call, step == 1, rc, stats);
      const std::vector<float> want = onHost(host, input, call, hostRc);
      same = same && rc == ADAPREC_OK && hostRc == ADAPREC_OK &&
             std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0;
    }
    verdict.check(same, std::string(algo) + " +ef: device results differ from the host call");
    std::size_t devSize = 0;
    std::size_t hostSize = 0;
    AdaPrec_CommSaveFeedback(dev, nullptr, 0, &devSize);
    AdaPrec_CommSaveFeedback(host, nullptr, 0, &hostSize);
    std::vector<unsigned char> devBlob(devSize);
    std::vector<unsigned char> hostBlob(hostSize);
    AdaPrec_CommSaveFeedback(dev, devBlob.data(), devSize, &devSize);
    AdaPrec_CommSaveFeedback(host, hostBlob.data(), hostSize, &hostSize);
    verdict.check(devBlob == hostBlob, std::string(algo) + " +ef: device residuals differ from the host call's");
  }
  verdict.check(streams.makes == 1, "one codec for the communicator's one stream so far, made " +
                                        std::to_string(streams.makes) + " times");

  // The stream: the caller's queued upload runs first; the call leaves nothing queued on its stream
  // and never touches the other one.
  {
    const std::size_t count = 30001;
    const std::vector<float> input = makeInput(rank, count, false);
    Call call{"fp8s", "twoshot"};
    int hostRc = -1;
    const std::vector<float> want = onHost(host, input, call, hostRc);
    const std::size_t syncA = deviceA.synchronizations();
    const std::size_t syncB = deviceB.synchronizations();
    float* buffer = upload(deviceB, input, false);
    verdict.check(deviceB.queued() > 0, "the upload is still queued before the call");
    AdaPrec_CallStats stats{};
    const int rc = AdaPrec_CommAllreduceDevice(dev, nullptr, buffer, static_cast<std::int64_t>(count), "fp8s",
                                               "twoshot", 0, nullptr, ADAPREC_CHECK_AGREEMENT, &stats, &deviceB);
    verdict.check(rc == ADAPREC_OK, std::string("call after a queued upload: ") + AdaPrec_LastError());
    verdict.check(deviceB.queued() == 0 && deviceB.synchronizations() > syncB,
                  "the call synchronized its stream before returning (" + std::to_string(deviceB.queued()) +
                      " operations left queued)");
    verdict.check(deviceA.synchronizations() == syncA && deviceA.queued() == 0, "the other stream was not used");
    const std::vector<float> got = download(deviceB, buffer, count);
    deviceB.release(buffer);
    deviceB.synchronize();
    verdict.check(hostRc == ADAPREC_OK && std::memcmp(got.data(), want.data(), count * sizeof(float)) == 0,
                  "the reduction ran after the caller's queued upload, on the caller's stream");

    // Stream A: its own codec, made once (on B's codec A's buffers are not device memory: the
    // stand-in refuses them); then B again reuses B's.
    int rcA = -1;
    AdaPrec_CallStats statsA{};
    const std::vector<float> gotA = onDevice(dev, deviceA, input, call, false, rcA, statsA);
    verdict.check(rcA == ADAPREC_OK && std::memcmp(gotA.data(), want.data(), count * sizeof(float)) == 0,
                  "stream A gives the same result");
    onDevice(dev, deviceB, input, call, true, rcA, statsA);
    onDevice(dev, deviceA, input, call, true, rcA, statsA);
    verdict.check(streams.makes == 2, "one codec per stream: made " + std::to_string(streams.makes) + " times for 2");

    // A host call on the communicator that just reduced device memory is a host call again.
    int rcHost = -1;
    const std::vector<float> again = onHost(dev, input, call, rcHost);
    verdict.check(rcHost == ADAPREC_OK && std::memcmp(again.data(), want.data(), count * sizeof(float)) == 0,
                  std::string("host call after device calls on one communicator: ") + AdaPrec_LastError());

    // Rank 0 passes host memory, the others device memory: the same call, the same bits.
    std::vector<float> mixed;
    int rcMixed = -1;
    if (rank == 0) {
      mixed = onHost(dev, input, call, rcMixed);
    } else {
      AdaPrec_CallStats s{};
      mixed = onDevice(dev, deviceB, input, call, false, rcMixed, s);
    }
    verdict.check(rcMixed == ADAPREC_OK && std::memcmp(mixed.data(), want.data(), count * sizeof(float)) == 0,
                  "host memory on rank 0, device memory elsewhere: the host call's result");
  }

  // Errors. The last rank's device check fails: it gets ADAPREC_ERR_CUDA, the others PEER_INVALID.
  {
    const std::vector<float> input = makeInput(rank, 4096, true);
    Call call{"fp32", "ring"};
    streams.failCheck = rank == p - 1;
    int rc = -1;
    AdaPrec_CallStats stats{};
    onDevice(dev, deviceB, input, call, false, rc, stats);
    const std::string message = AdaPrec_LastError();
    if (rank == p - 1) {
      verdict.check(rc == ADAPREC_ERR_CUDA && message.find("no usable CUDA device") != std::string::npos,
                    "the rank without a device gets ADAPREC_ERR_CUDA: rc " + std::to_string(rc) + " " + message);
    } else {
      verdict.check(rc == ADAPREC_ERR_PEER_INVALID && message.find("rank " + std::to_string(p - 1)) != std::string::npos,
                    "the others get ADAPREC_ERR_PEER_INVALID naming it: rc " + std::to_string(rc) + " " + message);
    }
    streams.failCheck = false;
    int hostRc = -1;
    const std::vector<float> want = onHost(host, input, call, hostRc);
    const std::vector<float> got = onDevice(dev, deviceB, input, call, true, rc, stats);
    verdict.check(rc == ADAPREC_OK && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0,
                  "the communicator works after the failed round");

    // A stream the backend refuses, on every rank and without the round: the argument error.
    int unknown = 0;
    float dummy = 0.0f;
    rc = AdaPrec_CommAllreduceDevice(dev, nullptr, &dummy, 1, "fp32", "ring", 0, nullptr, 0, nullptr, &unknown);
    verdict.check(rc == ADAPREC_ERR_INVALID_ARGUMENT, std::string("unknown stream: ") + AdaPrec_LastError());
    // ADAPREC_LOCAL_INVALID on the device entry: the usual round, no device check.
    rc = AdaPrec_CommAllreduceDevice(dev, nullptr, nullptr, 0, "fp32", "ring", 0, nullptr,
                                     rank == 0 ? ADAPREC_LOCAL_INVALID : ADAPREC_CHECK_AGREEMENT, nullptr,
                                     rank == 0 ? static_cast<void*>(&unknown) : static_cast<void*>(&deviceB));
    verdict.check(rc == (rank == 0 ? ADAPREC_ERR_INVALID_ARGUMENT : ADAPREC_ERR_PEER_INVALID),
                  "ADAPREC_LOCAL_INVALID through the device entry: rc " + std::to_string(rc));
  }

  // The real backend: what this build says without the hook.
  detail::setCapiDeviceBackend(real);
  {
    const int hasCuda = AdaPrec_HasCuda();
    const std::string hasCudaMessage = AdaPrec_LastError();
    int rc = AdaPrec_CommAllreduceDevice(dev, nullptr, nullptr, 0, "fp32", "ring", 0, nullptr,
                                         ADAPREC_CHECK_AGREEMENT, nullptr, nullptr);
    const std::string message = AdaPrec_LastError();
    if (hasCuda == 0) {
      verdict.check(hasCudaMessage.find("-Dcuda=enabled") != std::string::npos &&
                        hasCudaMessage.find("-Csetup-args=-Dcuda=enabled") != std::string::npos,
                    "AdaPrec_HasCuda says how to build with CUDA: " + hasCudaMessage);
      verdict.check(rc == ADAPREC_ERR_UNSUPPORTED && message.find("-Dcuda=enabled") != std::string::npos &&
                        message.find("-Csetup-args=-Dcuda=enabled") != std::string::npos,
                    "a build without CUDA: ADAPREC_ERR_UNSUPPORTED saying how to build with it: rc " +
                        std::to_string(rc) + " " + message);
    } else {
      // Here (no GPU) the runtime's reason; where a GPU exists the empty call succeeds.
      verdict.check(hasCudaMessage.empty(), "AdaPrec_HasCuda leaves no error: " + hasCudaMessage);
      verdict.check(rc == ADAPREC_OK || (rc == ADAPREC_ERR_CUDA && message.find("CUDA device") != std::string::npos),
                    "a CUDA build: OK with a GPU, else ADAPREC_ERR_CUDA with the runtime's reason: rc " +
                        std::to_string(rc) + " " + message);
    }
    std::printf("rank %d: AdaPrec_HasCuda() = %d; the real device entry says: %s\n", rank, hasCuda,
                rc == ADAPREC_OK ? "ok" : message.c_str());
    // Host memory through the device entry is never reduced as device memory.
    std::vector<float> hostBuffer = makeInput(rank, 1000, true);
    rc = AdaPrec_CommAllreduceDevice(dev, nullptr, hostBuffer.data(), 1000, "fp32", "ring", 0, nullptr,
                                     ADAPREC_CHECK_AGREEMENT, nullptr, nullptr);
    verdict.check(rc == ADAPREC_ERR_UNSUPPORTED || rc == ADAPREC_ERR_CUDA || rc == ADAPREC_ERR_INVALID_ARGUMENT,
                  "host memory through the real device entry is refused: rc " + std::to_string(rc));
  }

  verdict.check(AdaPrec_CommFree(dev) == ADAPREC_OK && AdaPrec_CommFree(host) == ADAPREC_OK, "communicators freed");
  deviceA.synchronize();
  deviceB.synchronize();
  verdict.check(deviceA.liveAllocations() == 0 && deviceB.liveAllocations() == 0,
                "the communicator gave its device memory back when freed: " +
                    std::to_string(deviceA.liveAllocations() + deviceB.liveAllocations()) + " allocations left");
  return verdict.finish("test_capi_device");
}

}  // namespace

int main(int argc, char** argv) { return mpiTestMain(&argc, &argv, "test_capi_device", run); }
