// The codec kernels keep to their chunk: they encode into, and decode and decodeAdd from, a chunk that
// ends exactly where its heap allocation ends, at every byte misalignment of its start, through the
// serial launcher. Under AddressSanitizer (tools/test --sanitize runs this binary: it is in suite unit
// too) a read or write of any byte past the chunk fails the test, as compute-sanitizer's memcheck did
// on an H100 when the decoders read the rest of the last aligned word (kernels/word_io.cuh). Without a
// sanitizer it still checks that such chunks encode and decode exactly as padded ones do.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "codec_dispatch.cuh"
#include "cpu_launch.hpp"
#include "kernel_test_data.hpp"

using namespace kernel_test;
using adaprec::kernels::LaunchShape;
using adaprec::kernels::SerialLauncher;

namespace {

const std::size_t kExactCounts[] = {1, 2, 3, 5, 6, 7, 31, 33, 4097};

// Decodes (or decodeAdds onto `initial`) the chunk at `chunk` into an exact-size float array.
std::vector<float> decodeExact(Format f, const unsigned char* chunk, const std::vector<float>& initial, bool add) {
  const std::size_t n = initial.size();
  std::unique_ptr<float[]> out(new float[n]);
  std::copy(initial.begin(), initial.end(), out.get());
  REQUIRE(adaprec::kernels::dispatchDecode(SerialLauncher{}, static_cast<std::uint8_t>(f), chunk, out.get(), n,
                                           paramsBytes(f, n), add, LaunchShape{32, 3}) == 0);
  return {out.get(), out.get() + n};
}

}  // namespace

TEST_CASE("codec kernels touch no byte past the chunk's end", "[kernels][bounds]") {
  for (const Format f : kFormats) {
    for (const std::size_t n : kExactCounts) {
      const std::vector<float> x = makeData(Kind::kNormal, n, static_cast<unsigned>(n) * 7 + 1);
      const std::vector<float> acc = makeAccumulator(n, static_cast<unsigned>(n) + 3);
      const std::size_t bytes = chunkBytes(f, n);
      // The reference: the same input encoded into, and decoded from, a padded buffer.
      PaddedFloats paddedSrc(x, 1);
      PaddedBytes padded(bytes, 0);
      REQUIRE(adaprec::kernels::dispatchEncode(SerialLauncher{}, static_cast<std::uint8_t>(f), paddedSrc.data(), n,
                                               padded.data(), paramsBytes(f, n), LaunchShape{32, 3}) == 0);
      const std::vector<unsigned char> want = padded.contents();
      for (std::size_t offset = 0; offset < 4; ++offset) {
        INFO(name(f) << " n " << n << " chunk offset " << offset);
        std::unique_ptr<float[]> src(new float[n]);
        std::copy(x.begin(), x.end(), src.get());
        std::unique_ptr<unsigned char[]> storage(new unsigned char[offset + bytes]);
        unsigned char* chunk = storage.get() + offset;  // ends where the allocation ends
        REQUIRE(adaprec::kernels::dispatchEncode(SerialLauncher{}, static_cast<std::uint8_t>(f), src.get(), n, chunk,
                                                 paramsBytes(f, n), LaunchShape{32, 3}) == 0);
        REQUIRE(std::vector<unsigned char>(chunk, chunk + bytes) == want);
        const std::vector<float> zeros(n, 0.0f);
        PaddedBytes again(bytes, offset);
        std::copy(want.begin(), want.end(), again.data());
        PaddedFloats decodedPadded(zeros, 0), addedPadded(acc, 0);
        REQUIRE(adaprec::kernels::dispatchDecode(SerialLauncher{}, static_cast<std::uint8_t>(f), again.data(),
                                                 decodedPadded.data(), n, paramsBytes(f, n), false, LaunchShape{32, 3}) == 0);
        REQUIRE(adaprec::kernels::dispatchDecode(SerialLauncher{}, static_cast<std::uint8_t>(f), again.data(),
                                                 addedPadded.data(), n, paramsBytes(f, n), true, LaunchShape{32, 3}) == 0);
        CHECK(firstDifference(decodeExact(f, chunk, zeros, false), decodedPadded.contents()) == -1);
        CHECK(firstDifference(decodeExact(f, chunk, acc, true), addedPadded.contents()) == -1);
      }
    }
  }
}
