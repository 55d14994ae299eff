// The codec kernel functors (kernels/codec_functors.cuh, the source nvcc compiles) run on the CPU
// through the serial and the threaded launcher (kernels/cpu_launch.hpp) and compared bit for bit with a
// reference: every byte of the chunk, every decoded float, every decodeAdd result, and no byte written
// outside the chunk or the output. Formats fp32, bf16, fp16, fp8, fp8s, e4m3, table1..8, table3z..8z; counts 0 .. 2^20+3;
// random and adversarial data; chunks at every byte misalignment, float arrays off their natural
// vector alignment; block sizes 1, 32, 256 and grids capped so the kernels stride.
//
// Built twice (tests/kernels/meson.build):
//   kernels_codec         (ADAPREC_KERNEL_TEST_HOST_REFERENCE) the reference is the host codec
//                         (adaprec::encode/decode/decodeAdd); serial and threaded launchers.
//   kernels_threaded      header-only (no libadaprec): the reference is the serial launcher, checked
//                         above; the threaded launcher on every block size. This is the binary
//                         tools/test --tsan builds with ThreadSanitizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "codec_dispatch.cuh"
#include "cpu_launch.hpp"
#include "kernel_test_data.hpp"

#if defined(ADAPREC_KERNEL_TEST_HOST_REFERENCE)
#include "adaprec/codec.hpp"
#endif

using namespace kernel_test;
using adaprec::kernels::LaunchShape;
using adaprec::kernels::SerialLauncher;
using adaprec::kernels::ThreadedLauncher;

namespace {

// 3 * kScaleBlock + 5: four scale blocks, so a grid of two blocks strides over them.
const std::size_t kCounts[] = {0, 1, 7, 31, 32, 33, 1000, 4095, 4096, 4097, 3 * 4096 + 5, (std::size_t{1} << 20) + 3};
constexpr std::size_t kLarge = 20000;  // counts above this run fewer combinations (time, TSan)

// What a correct codec produces for one input.
struct Expected {
  std::vector<unsigned char> chunk;
  std::vector<float> decoded;
  std::vector<float> accumulated;  // acc after decodeAdd
};

template <class Launch>
std::vector<unsigned char> kernelEncode(Launch launch, const LaunchShape& shape, Format f, const std::vector<float>& x,
                                        std::size_t chunkOffset, std::size_t floatOffset) {
  PaddedFloats src(x, floatOffset);
  PaddedBytes chunk(chunkBytes(f, x.size()), chunkOffset);
  REQUIRE(adaprec::kernels::dispatchEncode(launch, static_cast<std::uint8_t>(f), src.data(), x.size(), chunk.data(),
                                           paramsBytes(f, x.size()), shape) == 0);
  REQUIRE(chunk.guardsIntact());
  REQUIRE(src.guardsIntact());
  return chunk.contents();
}

template <class Launch>
std::vector<float> kernelDecode(Launch launch, const LaunchShape& shape, Format f,
                                const std::vector<unsigned char>& chunkBytes_, const std::vector<float>& initial,
                                bool add, std::size_t chunkOffset, std::size_t floatOffset) {
  PaddedBytes chunk(chunkBytes_.size(), chunkOffset);
  std::copy(chunkBytes_.begin(), chunkBytes_.end(), chunk.data());
  PaddedFloats out(initial, floatOffset);
  REQUIRE(adaprec::kernels::dispatchDecode(launch, static_cast<std::uint8_t>(f), chunk.data(), out.data(),
                                           initial.size(), paramsBytes(f, initial.size()), add, shape) == 0);
  REQUIRE(out.guardsIntact());
  REQUIRE(chunk.contents() == chunkBytes_);
  return out.contents();
}

// As firstDifference, except where both operands of the sum are NaN: docs/formats.md leaves which
// operand's NaN the result is to the machine (x86 returns the first source, and each compiled loop
// picks its operand order), so only NaN-ness is compared there, as the host codec's own tests do.
long firstSumDifference(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& acc,
                        const std::vector<float>& decoded) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool bothNan = std::isnan(acc[i]) && std::isnan(decoded[i]);
    const bool same = bothNan ? std::isnan(got[i]) : adaprec::detail::floatBits(got[i]) == adaprec::detail::floatBits(want[i]);
    if (!same) return static_cast<long>(i);
  }
  return -1;
}

template <class Launch>
void checkLauncher(Launch launch, const LaunchShape& shape, Format f, const std::vector<float>& x,
                   const std::vector<float>& acc, const Expected& want, std::size_t chunkOffset,
                   std::size_t floatOffset) {
  INFO("threads " << shape.threads << " maxBlocks " << shape.maxBlocks << " chunk offset " << chunkOffset
                  << " float offset " << floatOffset);
  const auto chunk = kernelEncode(launch, shape, f, x, chunkOffset, floatOffset);
  const long badByte = firstDifference(chunk, want.chunk);
  INFO("encode: first differing chunk byte " << badByte);
  REQUIRE(badByte == -1);
  const auto decoded = kernelDecode(launch, shape, f, want.chunk, std::vector<float>(x.size(), 0.0f), false,
                                    (chunkOffset + 1) % 4, floatOffset);
  const long badDecoded = firstDifference(decoded, want.decoded);
  INFO("decode: first differing element " << badDecoded);
  REQUIRE(badDecoded == -1);
  const auto accumulated = kernelDecode(launch, shape, f, want.chunk, acc, true, (chunkOffset + 2) % 4, floatOffset);
  const long badSum = firstSumDifference(accumulated, want.accumulated, acc, want.decoded);
  INFO("decodeAdd: first differing element " << badSum);
  REQUIRE(badSum == -1);
}

Expected reference(Format f, const std::vector<float>& x, const std::vector<float>& acc) {
  Expected want;
  const std::size_t n = x.size();
#if defined(ADAPREC_KERNEL_TEST_HOST_REFERENCE)
  REQUIRE(adaprec::encodedBytes(f, n) == chunkBytes(f, n));
  want.chunk.resize(chunkBytes(f, n));
  adaprec::encode(f, x.data(), n, want.chunk.data(), want.chunk.size());
  want.decoded.resize(n);
  adaprec::decode(f, want.chunk.data(), want.chunk.size(), want.decoded.data(), n);
  want.accumulated = acc;
  adaprec::decodeAdd(f, want.chunk.data(), want.chunk.size(), want.accumulated.data(), n);
#else
  // The serial launcher, which kernels_codec checks against the host codec.
  const LaunchShape serial{1, 65535};
  want.chunk = kernelEncode(SerialLauncher{}, serial, f, x, 0, 0);
  want.decoded = kernelDecode(SerialLauncher{}, serial, f, want.chunk, std::vector<float>(n, 0.0f), false, 0, 0);
  want.accumulated = kernelDecode(SerialLauncher{}, serial, f, want.chunk, acc, true, 0, 0);
#endif
  return want;
}

// The threaded launcher costs real threads and barrier rounds (TableBuild's sort alone has 66): it runs
// Table-N on a subset that still covers its shared memory and barriers (both table ends, tableNz,
// non-finite chunks, ties, several blocks); the serial launcher runs every case.
bool threadedSubset(Format f, Kind kind, std::size_t n) {
  if (tableBitsOf(f) == 0) return true;
  const bool format = f == Format::kTable1 || f == Format::kTable3 || f == Format::kTable8 || f == Format::kTable4z;
  const bool data = kind == Kind::kNormal || kind == Kind::kRandomBits || kind == Kind::kFewValues;
  const bool count = n == 0 || n == 1 || n == 33 || n == 4097 || n == 3 * 4096 + 5;
  return format && data && count;
}

// Every format x data kind x count, with `body(format, kind, count, x, acc, want, variant)`.
template <class Body>
void forEachCase(Body body, bool threaded) {
  unsigned variant = 0;
  for (Format f : kFormats) {
    for (Kind kind : kKinds) {
      for (std::size_t n : kCounts) {
        if (n > kLarge && kind != Kind::kRandomBits && kind != Kind::kNormal && kind != Kind::kNearMax) continue;
        if (threaded && !threadedSubset(f, kind, n)) continue;
        INFO(name(f) << " " << name(kind) << " count " << n);
        const auto x = makeData(kind, n, static_cast<unsigned>(n * 7 + static_cast<unsigned>(kind)));
        const auto acc = makeAccumulator(n, static_cast<unsigned>(n + 11));
        const Expected want = reference(f, x, acc);
        body(f, n, x, acc, want, variant++);
      }
    }
  }
}

}  // namespace

#if defined(ADAPREC_KERNEL_TEST_HOST_REFERENCE)
TEST_CASE("serial launcher: every kernel is bit-identical to the host codec", "[kernels][serial]") {
  forEachCase([](Format f, std::size_t n, const auto& x, const auto& acc, const Expected& want, unsigned variant) {
    // Every misalignment of the chunk for the small counts, two for the large; a default and a tiny grid.
    for (std::size_t offset = 0; offset < 4; offset += n > kLarge ? 3 : 1) {
      checkLauncher(SerialLauncher{}, LaunchShape{1, 65535}, f, x, acc, want, offset, (variant + offset) % 2);
    }
    checkLauncher(SerialLauncher{}, LaunchShape{1, 3}, f, x, acc, want, variant % 4, 1);
  }, false);
}

TEST_CASE("threaded launcher: every kernel is bit-identical to the host codec", "[kernels][threaded]") {
  forEachCase([](Format f, std::size_t n, const auto& x, const auto& acc, const Expected& want, unsigned variant) {
    if (n > kLarge) {
      checkLauncher(ThreadedLauncher{}, LaunchShape{32, 4}, f, x, acc, want, variant % 4, 1);
      return;
    }
    checkLauncher(ThreadedLauncher{}, LaunchShape{32, 65535}, f, x, acc, want, variant % 4, variant % 2);
    if (variant % 3 == 0) checkLauncher(ThreadedLauncher{}, LaunchShape{256, 65535}, f, x, acc, want, (variant + 1) % 4, 1);
    if (variant % 3 == 1) checkLauncher(ThreadedLauncher{}, LaunchShape{7, 2}, f, x, acc, want, (variant + 2) % 4, 0);
  }, true);
}
#else
TEST_CASE("threaded launcher: blocks of 1, 7, 32 and 256 threads agree with the serial launcher", "[kernels][threaded]") {
  forEachCase([](Format f, std::size_t n, const auto& x, const auto& acc, const Expected& want, unsigned variant) {
    if (n > kLarge) return;  // the large count runs in kernels_codec; here threads and barriers matter
    const LaunchShape shapes[] = {{1, 65535}, {7, 2}, {32, 65535}, {256, 65535}};
    const LaunchShape& shape = shapes[variant % 4];
    if (shape.threads != 256 || n >= 1000) {  // 256 mostly idle threads prove nothing more
      checkLauncher(ThreadedLauncher{}, shape, f, x, acc, want, variant % 4, variant % 2);
    }
    // A grid smaller than the work: blocks stride, and shared memory is reused within a block.
    if (n > 4096) checkLauncher(ThreadedLauncher{}, LaunchShape{7, 2}, f, x, acc, want, (variant + 3) % 4, 1);
  }, true);
}
#endif

TEST_CASE("the dispatchers refuse unknown format ids and launchers refuse bad shapes", "[kernels]") {
  std::vector<float> x(8, 1.0f);
  std::vector<unsigned char> chunk(256);
  for (const std::uint8_t id : {0, 7, 19, 22, 29, 255}) {
    CHECK(adaprec::kernels::dispatchEncode(SerialLauncher{}, id, x.data(), 8, chunk.data(), 32) ==
          adaprec::kernels::kLaunchUnsupported);
    CHECK(adaprec::kernels::dispatchDecode(SerialLauncher{}, id, chunk.data(), x.data(), 8, 32, true) ==
          adaprec::kernels::kLaunchUnsupported);
  }
  CHECK_THROWS(adaprec::kernels::dispatchEncode(ThreadedLauncher{}, static_cast<std::uint8_t>(Format::kFp32),
                                                x.data(), 8, chunk.data(), 0, LaunchShape{257, 1}));
}
