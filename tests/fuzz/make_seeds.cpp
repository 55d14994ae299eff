// Writes the binary seed corpora and the name dictionaries of the fuzz harnesses with the library's
// own writers, so the seeds follow the formats as they are: tools/fuzz --make-seeds runs it as
//   fuzz_make_seeds tests/fuzz
// The text seeds (CSV, environment, format specs) are written by hand in corpus/.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "adaprec/codec.hpp"
#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"
#include "adaprec/transport.hpp"
#include "trainer/checkpoint.hpp"

namespace {

using namespace adaprec;

void write(const std::string& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::cerr << "cannot write " << path << "\n";
    std::exit(1);
  }
}

// One byte of harness mode, then the data.
void writeWithMode(const std::string& path, std::uint8_t mode, const void* data, std::size_t size) {
  std::vector<std::uint8_t> bytes{mode};
  const auto* b = static_cast<const std::uint8_t*>(data);
  bytes.insert(bytes.end(), b, b + size);
  write(path, bytes.data(), bytes.size());
}

// Gradient-like values with zeros, a sign mix and a few large ones; one NaN when asked.
std::vector<float> values(std::size_t count, bool withNan) {
  std::vector<float> v(count);
  std::uint32_t state = 12345;
  for (std::size_t i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    const float unit = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    v[i] = i % 7 == 0 ? 0.0f : i % 97 == 1 ? unit * 3000.0f : unit * 0.01f;
  }
  if (withNan && count > 2) v[2] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

void codecSeeds(const std::string& dir) {
  const auto formats = allFormats();
  for (std::size_t f = 0; f < formats.size(); ++f) {
    const Format format = formats[f];
    // Small chunks of every format; the block-scaled ones also across a block boundary (two scales).
    std::vector<std::size_t> counts = {0, 5, 61};
    if (isBlockScaled(format)) counts.push_back(kScaleBlock + 3);
    for (std::size_t count : counts) {
      const std::vector<float> src = values(count, count == 61 && tableBits(format) != 0);
      std::vector<std::uint8_t> chunk(encodedBytes(format, count));
      encode(format, src.data(), count, chunk.data(), chunk.size());
      const std::string name = dir + "/" + std::string(formatName(format)) + "-" + std::to_string(count);
      writeWithMode(name + "-raw", 0x80, chunk.data(), chunk.size());
      // Constructed mode: format selector, flags byte, u16 count, then the body after the header.
      std::vector<std::uint8_t> constructed = {static_cast<std::uint8_t>(f), chunk[4],
                                               static_cast<std::uint8_t>(count & 0xff),
                                               static_cast<std::uint8_t>(count >> 8)};
      constructed.insert(constructed.end(), chunk.begin() + kChunkHeaderBytes, chunk.end());
      if (count < 1000) write(name + "-body", constructed.data(), constructed.size());
    }
  }
}

void errorFeedbackSeeds(const std::string& dir) {
  LoopbackGroup group(1);
  Communicator comm(group.transport(0));
  const auto empty = comm.saveErrorFeedback();
  write(dir + "/empty", empty.data(), empty.size());
  comm.setErrorFeedback("layer0", ErrorFeedbackState{4, Algorithm::kRing, {{0.5f, -0.25f, 0.0f, 1e-3f}, {}}});
  auto one = comm.saveErrorFeedback();
  write(dir + "/one-key", one.data(), one.size());
  comm.setErrorFeedback("conv1.weight", ErrorFeedbackState{3, Algorithm::kRabenseifner, {{}, {1.0f, 2.0f, 3.0f}, {4.0f, 5.0f, 6.0f}}});
  comm.setErrorFeedback("b", ErrorFeedbackState{0, Algorithm::kHierarchical, {}});
  auto three = comm.saveErrorFeedback();
  write(dir + "/three-keys", three.data(), three.size());
}

void checkpointSeeds(const std::string& dir) {
  trainer::TrainerSnapshot empty;
  trainer::TrainerSnapshot full;
  full.step = 120;
  full.fingerprint = "cnn batch=64 ranks=4 seed=1";
  full.parameters = {0.1f, -0.2f, 0.3f, 0.0f};
  full.velocity = {0.0f, 0.01f, -0.01f, 0.0f};
  full.rngState = "1 2 3 4";
  full.reducerState = {1, 2, 3};
  full.controllerState = {9};
  full.counters = R"({"seconds":1.5})";
  full.pendingGradients = {0.5f, -0.25f, 0.0f, 1.0f};
  for (const auto& [name, snapshot] : {std::pair{"empty", empty}, std::pair{"full", full}}) {
    const std::vector<std::uint8_t> file = trainer::serializeSnapshot(snapshot);
    writeWithMode(dir + "/" + name + "-file", 0x01, file.data(), file.size());
    // Payload mode: the harness adds the header and CRC (20 bytes before, 4 after the payload).
    writeWithMode(dir + "/" + name + "-payload", 0x00, file.data() + 20, file.size() - 24);
  }
}

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

void dictionaries(const std::string& dir) {
  std::ofstream spec(dir + "/format_spec.dict"), env(dir + "/environment.dict");
  for (std::ofstream* out : {&spec, &env}) {
    for (Format f : allFormats()) *out << quoted(formatName(f)) << "\n";
    for (Algorithm a : allAlgorithms()) *out << quoted(algorithmName(a)) << "\n";
    *out << quoted("+ef") << "\n" << quoted("fastest") << "\n" << quoted("adaptive") << "\n";
  }
  for (const char* name : {"FORMAT=", "ALGO=", "MIN_BYTES=", "STATS=", "RANKS_PER_NODE=", "SEGMENT_COUNT="})
    env << quoted(name) << "\n";
  env << quoted("18446744073709551616") << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds TESTS_FUZZ_DIR (writes corpus/{codec,error_feedback,checkpoint}/ and dict/)\n";
    return 2;
  }
  const std::string root = argv[1];
  codecSeeds(root + "/corpus/codec");
  errorFeedbackSeeds(root + "/corpus/error_feedback");
  checkpointSeeds(root + "/corpus/checkpoint");
  dictionaries(root + "/dict");
  return 0;
}
