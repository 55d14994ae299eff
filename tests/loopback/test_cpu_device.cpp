// The CPU stand-in of a device (cpu_device.hpp) itself: its stream is deferred, its codec is the
// kernels' and matches the host codec byte for byte, and it refuses host pointers where device memory
// belongs (and the reverse).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "cpu_device.hpp"
#include "engine_check.hpp"

using namespace adaprec;
using adaprec::test::CpuStandInDevice;

namespace {
bool sameBytes(const void* a, const void* b, std::size_t bytes) { return bytes == 0 || std::memcmp(a, b, bytes) == 0; }
}  // namespace

TEST_CASE("the stand-in's stream runs nothing before synchronize", "[device][stand_in]") {
  CpuStandInDevice device;
  const std::vector<float> in = {1.0f, 2.0f, 3.0f};
  std::vector<float> out(3, -7.0f);
  auto* d = static_cast<float*>(device.allocate(3 * sizeof(float)));
  device.copyToDevice(d, in.data(), 3 * sizeof(float));
  device.copyToHost(out.data(), d, 3 * sizeof(float));
  CHECK(device.queued() == 2);
  CHECK(out == std::vector<float>(3, -7.0f));  // queued, not run
  device.synchronize();
  CHECK(out == in);
  device.release(d);
  device.synchronize();
  CHECK(device.liveAllocations() == 0);
}

TEST_CASE("the stand-in's kernels match the host codec", "[device][stand_in]") {
  for (unsigned threads : {0u, 3u}) {
    CpuStandInDevice device(threads);
    for (Format format : allFormats()) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
        INFO("format " << formatName(format) << " n " << n << " threads " << threads);
        const std::vector<float> x = test::makeInput(1, n, false);
        const std::size_t bytes = encodedBytes(format, n);
        std::vector<std::byte> want(bytes);
        encode(format, x.data(), n, want.data(), bytes);
        std::vector<float> wantResidual(n, 0.25f);
        std::vector<std::byte> wantEf(bytes);
        detail::HostDeviceCodec host;
        host.encodeWithResidual(format, x.data(), wantResidual.data(), n, wantEf.data(), bytes);

        auto* dx = static_cast<float*>(device.allocate(n * sizeof(float)));
        auto* dr = static_cast<float*>(device.allocate(n * sizeof(float)));
        auto* dc = static_cast<std::byte*>(device.allocate(bytes));
        std::vector<std::byte> got(bytes);
        std::vector<float> gotResidual(n, 0.25f);
        device.copyToDevice(dx, x.data(), n * sizeof(float));
        device.copyToDevice(dr, gotResidual.data(), n * sizeof(float));
        device.encode(format, dx, n, dc, bytes);
        device.copyToHost(got.data(), dc, bytes);
        device.synchronize();
        CHECK(sameBytes(got.data(), want.data(), bytes));
        device.encodeWithResidual(format, dx, dr, n, dc, bytes);
        device.copyToHost(got.data(), dc, bytes);
        device.copyToHost(gotResidual.data(), dr, n * sizeof(float));
        device.synchronize();
        CHECK(sameBytes(got.data(), wantEf.data(), bytes));
        CHECK(sameBytes(gotResidual.data(), wantResidual.data(), n * sizeof(float)));
        device.release(dx);
        device.release(dr);
        device.release(dc);
      }
    }
  }
}

TEST_CASE("the stand-in refuses host memory where device memory belongs", "[device][stand_in]") {
  CpuStandInDevice device;
  std::vector<float> host(4, 1.0f);
  std::vector<std::byte> chunk(encodedBytes(Format::kBf16, 4));
  auto* d = static_cast<float*>(device.allocate(4 * sizeof(float)));
  CHECK_THROWS_AS(device.encode(Format::kBf16, host.data(), 4, chunk.data(), chunk.size()), Error);
  CHECK_THROWS_AS(device.copyToHost(d, d, 4 * sizeof(float)), Error);      // host side is device memory
  CHECK_THROWS_AS(device.copyToDevice(host.data(), d, 4 * sizeof(float)), Error);
  CHECK_THROWS_AS(device.decode(Format::kBf16, chunk.data(), chunk.size(), d, 4), Error);
  CHECK_THROWS_AS(device.copyOnDevice(d + 1, d, 4 * sizeof(float)), Error);  // past the allocation's end
  device.release(d);
  CHECK_THROWS_AS(device.fillZero(d, 4), Error);  // released
}
