// GPU codecs vs the host reference: identical chunk bytes and decoded values for every format, at
// awkward counts, on random and adversarial data, with chunks at every byte misalignment. Exits 77
// (skipped) when no CUDA device is visible. The same kernel source runs on the CPU in tests/kernels (serial and threaded launchers); this test is what only a GPU can show
// (docs/gpu.md): the __CUDA_ARCH__ branches, the device's rounding and NaN behaviour, real stores.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/gpu_codec.hpp"

using namespace adaprec;

namespace {

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(std::size_t count) { REQUIRE(cudaMalloc(&ptr, count * sizeof(T) + 1) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
};

std::vector<float> testData(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  const float specials[] = {NAN, -INFINITY, INFINITY, 0.0f, -0.0f, 1e-42f, -3e-39f, 1e30f, 65520.0f};
  for (std::size_t i = 0; i < n && i < 9; ++i) x[i * 7 % n] = specials[i];
  return x;
}

// Bit-identical, except where the host sum is NaN: docs/formats.md leaves the NaN of an addition with a
// NaN operand to the machine (a GPU adds to the canonical NaN 0x7fffffff, x86 keeps an operand's).
bool sameSum(const std::vector<float>& want, const std::vector<float>& got) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : std::memcmp(&want[i], &got[i], sizeof(float)) == 0;
    if (!same) {
      UNSCOPED_INFO("first differing element " << i);
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("GPU encode/decode/decodeAdd are bit-identical to the host codec", "[gpu]") {
  for (Format f : allFormats()) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{31}, std::size_t{32},
                          std::size_t{33}, std::size_t{1000}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097},
                          (std::size_t{1} << 20) + 3}) {
      const std::size_t offset = n % 4;  // the chunk's misalignment (chunks are packed back to back)
      INFO(formatName(f) << " n " << n << " chunk offset " << offset);
      const std::vector<float> x = testData(n, static_cast<unsigned>(n + 1));
      const std::size_t bytes = encodedBytes(f, n);
      std::vector<unsigned char> host(bytes), device(bytes);
      encode(f, x.data(), n, host.data(), bytes);
      DeviceBuffer<float> dx(n), dy(n);
      DeviceBuffer<unsigned char> dbuffer(bytes + 3);
      unsigned char* dchunk = dbuffer.ptr + offset;
      REQUIRE(cudaMemcpy(dx.ptr, x.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
      gpu::encode(f, dx.ptr, n, dchunk, nullptr);
      REQUIRE(cudaMemcpy(device.data(), dchunk, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(host == device);
      std::vector<float> want(n), got(n);
      decode(f, host.data(), bytes, want.data(), n);
      gpu::decode(f, dchunk, dy.ptr, n, nullptr);
      REQUIRE(cudaMemcpy(got.data(), dy.ptr, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(std::memcmp(want.data(), got.data(), n * sizeof(float)) == 0);
      std::vector<float> acc = testData(n, 99);
      REQUIRE(cudaMemcpy(dy.ptr, acc.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
      decodeAdd(f, host.data(), bytes, acc.data(), n);
      gpu::decodeAdd(f, dchunk, dy.ptr, n, nullptr);
      REQUIRE(cudaMemcpy(got.data(), dy.ptr, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(sameSum(acc, got));
    }
  }
}

TEST_CASE("GPU fp8s/e4m3 saturate near FLT_MAX as the host codec does", "[gpu]") {
  // One block per amax in the top fp32 binades (scale exponents up to fp8s 113 / e4m3 120, where the
  // block's largest representable value is below the format's largest finite value), filled with
  // values down to half of amax, both signs; the last block is short.
  std::vector<float> amaxes = {std::ldexp(30720.0f, 113), std::ldexp(248.0f, 120), std::ldexp(1.75f, 127),
                               std::nextafter(std::ldexp(1.75f, 127), INFINITY), std::ldexp(1.875f, 127),
                               std::ldexp(1.75f, 126), std::numeric_limits<float>::max()};
  for (std::uint32_t step = 0; step < 64; ++step) amaxes.push_back(std::ldexp(1.0f + step / 64.0f, 126 + step % 2));
  std::vector<float> x;
  for (std::size_t b = 0; b < amaxes.size(); ++b) {
    const std::size_t len = b + 1 == amaxes.size() ? 100 : kScaleBlock;
    for (std::size_t i = 0; i < len; ++i) {
      const float v = amaxes[b] * (1.0f - static_cast<float>(i) / (2.0f * kScaleBlock));
      x.push_back((i + b) % 2 == 0 ? v : -v);
    }
  }
  const std::size_t n = x.size();
  for (Format f : {Format::kFp8s, Format::kE4m3}) {
    INFO(formatName(f));
    const std::size_t bytes = encodedBytes(f, n);
    std::vector<unsigned char> host(bytes), device(bytes);
    encode(f, x.data(), n, host.data(), bytes);
    DeviceBuffer<float> dx(n), dy(n);
    DeviceBuffer<unsigned char> dchunk(bytes);
    REQUIRE(cudaMemcpy(dx.ptr, x.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    gpu::encode(f, dx.ptr, n, dchunk.ptr, nullptr);
    REQUIRE(cudaMemcpy(device.data(), dchunk.ptr, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    REQUIRE(host == device);
    std::vector<float> got(n);
    gpu::decode(f, dchunk.ptr, dy.ptr, n, nullptr);
    REQUIRE(cudaMemcpy(got.data(), dy.ptr, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    std::size_t nonFinite = 0;
    for (float v : got) nonFinite += !std::isfinite(v);
    CHECK(nonFinite == 0);
  }
}

int main(int argc, char** argv) {
  if (!gpu::deviceAvailable()) {
    std::printf("no CUDA device visible: GPU codec tests skipped\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
