// CRC32C: published check values (RFC 3720 B.4, the "123456789" check), both implementations against
// each other on random data of every length and alignment, and extension (crc of a|b from crc of a).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "transport/crc32c.hpp"

using namespace adaprec::detail;

namespace {

struct Vector {
  std::vector<unsigned char> data;
  std::uint32_t crc;
};

std::vector<Vector> knownVectors() {
  std::vector<Vector> v;
  const std::string check = "123456789";
  v.push_back({{check.begin(), check.end()}, 0xE3069283u});
  v.push_back({std::vector<unsigned char>(32, 0x00), 0x8A9136AAu});
  v.push_back({std::vector<unsigned char>(32, 0xFF), 0x62A8AB43u});
  std::vector<unsigned char> up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<unsigned char>(i);
    down[i] = static_cast<unsigned char>(31 - i);
  }
  v.push_back({up, 0x46DD794Eu});
  v.push_back({down, 0x113FDB5Cu});
  v.push_back({{}, 0x00000000u});
  return v;
}

}  // namespace

TEST_CASE("crc32c matches published check values in every implementation", "[crc32c]") {
  INFO("dispatch uses " << crc32cImplementation());
  for (const Vector& v : knownVectors()) {
    CHECK(crc32cPortableExtend(0, v.data.data(), v.data.size()) == v.crc);
    CHECK(crc32c(v.data.data(), v.data.size()) == v.crc);
    if (crc32cHasHardware()) CHECK(crc32cHardwareExtend(0, v.data.data(), v.data.size()) == v.crc);
  }
}

TEST_CASE("crc32c implementations agree on random data of any length and alignment", "[crc32c]") {
  std::mt19937_64 gen(42);
  std::vector<unsigned char> buffer(3 * 4096 * 4 + 64);
  for (unsigned char& b : buffer) b = static_cast<unsigned char>(gen());
  // Lengths around the three-stream block boundaries (3 x 4096) and every small length.
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 80; ++n) lengths.push_back(n);
  for (std::size_t base : {4096u, 12288u, 24576u, 36864u, 49152u})
    for (std::size_t d : {0u, 1u, 7u, 8u, 9u}) {
      lengths.push_back(base + d);
      lengths.push_back(base - d);
    }
  for (std::size_t offset = 0; offset < 9; ++offset) {
    for (std::size_t n : lengths) {
      if (offset + n > buffer.size()) continue;
      const unsigned char* p = buffer.data() + offset;
      const std::uint32_t seed = static_cast<std::uint32_t>(gen());
      const std::uint32_t portable = crc32cPortableExtend(seed, p, n);
      INFO("offset " << offset << " length " << n);
      if (crc32cHasHardware()) REQUIRE(crc32cHardwareExtend(seed, p, n) == portable);
      REQUIRE(crc32cExtend(seed, p, n) == portable);
    }
  }
}

TEST_CASE("crc32c extends: crc(a|b) == extend(crc(a), b)", "[crc32c]") {
  std::mt19937 gen(7);
  std::vector<unsigned char> data(50000);
  for (unsigned char& b : data) b = static_cast<unsigned char>(gen());
  const std::uint32_t whole = crc32c(data.data(), data.size());
  for (std::size_t cut : {0u, 1u, 13u, 4096u, 12289u, 37000u, 50000u}) {
    const std::uint32_t head = crc32c(data.data(), cut);
    CHECK(crc32cExtend(head, data.data() + cut, data.size() - cut) == whole);
  }
  // A single flipped bit anywhere changes the value.
  for (std::size_t at : {0u, 4095u, 12288u, 49999u}) {
    data[at] ^= 0x10;
    CHECK(crc32c(data.data(), data.size()) != whole);
    data[at] ^= 0x10;
  }
}
