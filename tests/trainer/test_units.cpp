// Single-process unit tests of the trainer's pieces: schedules, SGD, checkpoint files, data files,
// per-layer format parsing.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "adaprec/error.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/dataset.hpp"
#include "trainer/optimizer.hpp"
#include "trainer/run_options.hpp"
#include "trainer/schedule.hpp"

using namespace adaprec;
using namespace adaprec::trainer;

namespace {

std::filesystem::path freshDir(const std::string& stem) {
  auto dir = std::filesystem::temp_directory_path() / ("adaprec-trainer-unit-" + stem + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void writeGz(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(f);
}

std::vector<std::uint8_t> idxHeader(std::vector<std::uint32_t> dims) {
  std::vector<std::uint8_t> h = {0, 0, 8, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims) {
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<std::uint8_t>(d >> s));
  }
  return h;
}

// A valid 3-image 2x2 MNIST-format training split in dir.
void writeTinyTrainSplit(const std::filesystem::path& dir) {
  auto images = idxHeader({3, 2, 2});
  for (int i = 0; i < 12; ++i) images.push_back(static_cast<std::uint8_t>(i * 20));
  auto labels = idxHeader({3});
  for (std::uint8_t l : {7, 0, 9}) labels.push_back(l);
  writeGz(dir / "train-images-idx3-ubyte.gz", images);
  writeGz(dir / "train-labels-idx1-ubyte.gz", labels);
}

std::string errorMessage(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("linear scaling rule, gradual warmup and decays", "[trainer][schedule]") {
  ScheduleConfig c;
  c.baseLr = 0.1;
  c.referenceBatch = 256;
  c.globalBatch = 1024;  // k = 4: peak 0.4
  c.warmupEpochs = 5;
  c.totalEpochs = 90;
  c.check();
  CHECK(learningRate(c, 0.0) == Approx(0.1));
  CHECK(learningRate(c, 2.5) == Approx(0.25));
  CHECK(learningRate(c, 5.0) == Approx(0.4));
  c.kind = "step";
  c.milestones = {30, 60};
  CHECK(learningRate(c, 29.9) == Approx(0.4));
  CHECK(learningRate(c, 30.0) == Approx(0.04));
  CHECK(learningRate(c, 61.0) == Approx(0.004));
  c.kind = "poly";
  c.power = 2;
  CHECK(learningRate(c, 45.0) == Approx(0.4 * 0.25));
  CHECK(learningRate(c, 90.0) == Approx(0.0).margin(1e-15));
  c.kind = "cosine";
  CHECK(learningRate(c, 45.0) == Approx(0.2));
  c.kind = "linear-ish";
  CHECK_THROWS_AS(c.check(), Error);
  c.kind = "step";
  CHECK_NOTHROW(c.check());
  for (const std::vector<double>& bad : {std::vector<double>{-1}, {0}, {60, 30}, {30, 30}}) {
    c.milestones = bad;
    CHECK(errorMessage([&] { c.check(); }).find("--milestones must be increasing epochs > 0") != std::string::npos);
  }
}

TEST_CASE("--lr-schedule: the predictor's schedule over steps times the scaled peak", "[trainer][schedule]") {
  ScheduleConfig c;
  c.baseLr = 0.1;
  c.referenceBatch = 256;
  c.globalBatch = 512;  // peak 0.2
  c.lrSchedule = "poly:100:2";
  c.check();
  CHECK(learningRateAtStep(c, 0, 7) == Approx(0.2));
  CHECK(learningRateAtStep(c, 50, 7) == Approx(0.2 * 0.25));
  CHECK(learningRateAtStep(c, 200, 7) == 0.0);
  c.lrSchedule = "step:0.5:30";
  CHECK_THROWS_AS(learningRateAtStep(c, 0, 7), Error);  // not parsed by check() yet
  c.check();
  CHECK(learningRateAtStep(c, 29, 7) == Approx(0.2));
  CHECK(learningRateAtStep(c, 30, 7) == Approx(0.1));
  // Without it, the epoch-based schedule at step / stepsPerEpoch, exactly.
  c.lrSchedule.clear();
  c.kind = "cosine";
  c.totalEpochs = 10;
  c.check();
  CHECK(learningRateAtStep(c, 35, 7) == learningRate(c, 35.0 / 7.0));
  // Exclusive with the epoch-based decay and warmup; a malformed spec is the predictor's one-line error.
  c.lrSchedule = "cosine:100";
  CHECK(errorMessage([&] { c.check(); }).find("--lr-schedule replaces --schedule") != std::string::npos);
  c.kind = "const";
  c.warmupEpochs = 1;
  CHECK(errorMessage([&] { c.check(); }).find("--lr-schedule replaces") != std::string::npos);
  c.warmupEpochs = 0;
  c.lrSchedule = "cosine:-1";
  CHECK(errorMessage([&] { c.check(); }).find("lr schedule 'cosine:-1': TOTAL must be a number > 0") != std::string::npos);
}

TEST_CASE("momentum SGD with weight decay matches the closed form", "[trainer][sgd]") {
  MomentumSgd sgd(2, 0.5f, 0.1f);
  std::vector<float> w = {1.0f, -2.0f}, g = {0.5f, 0.25f};
  sgd.step(w, g, 0.1f);  // v = g + 0.1 w = {0.6, 0.05}; w -= 0.1 v
  CHECK(w[0] == Approx(0.94f));
  CHECK(w[1] == Approx(-2.005f));
  sgd.step(w, g, 0.1f);  // v = 0.5 v + g + 0.1 w
  CHECK(sgd.velocity()[0] == Approx(0.5f * 0.6f + 0.5f + 0.094f));
  CHECK(w[0] == Approx(0.94f - 0.1f * (0.3f + 0.5f + 0.094f)));
  CHECK_THROWS_AS(MomentumSgd(2, 1.0f, 0.0f), Error);
}

TEST_CASE("checkpoint bytes round-trip and damage is rejected", "[trainer][checkpoint]") {
  TrainerSnapshot s;
  s.step = 1234;
  s.fingerprint = "model=mlp";
  s.parameters = {1.0f, -0.0f, 3.5f};
  s.velocity = {0.25f, 0.0f, -1.0f};
  s.rngState = "5489";
  s.reducerState = {1, 2, 3};
  s.controllerState = {9};
  s.counters = "{\"wall_s\": 1}";
  const std::vector<std::uint8_t> bytes = serializeSnapshot(s);
  const TrainerSnapshot back = deserializeSnapshot(bytes, "memory");
  CHECK(back.step == 1234);
  CHECK(back.parameters == s.parameters);
  CHECK(back.velocity == s.velocity);
  CHECK(back.reducerState == s.reducerState);
  CHECK(back.controllerState == s.controllerState);
  CHECK(back.counters == s.counters);

  for (std::size_t cut : {std::size_t{0}, std::size_t{10}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<std::uint8_t> shorter(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::string msg = errorMessage([&] { deserializeSnapshot(shorter, "ckpt-A"); });
    INFO("cut at " << cut << ": " << msg);
    CHECK(msg.find("ckpt-A") != std::string::npos);
    CHECK(msg.find("truncated") != std::string::npos);
  }
  for (std::size_t at = 20; at < bytes.size(); at += 7) {
    std::vector<std::uint8_t> flipped = bytes;
    flipped[at] ^= 0x01;
    const std::string msg = errorMessage([&] { deserializeSnapshot(flipped, "ckpt-B"); });
    INFO("flip at " << at << ": " << msg);
    CHECK(msg.find("ckpt-B") != std::string::npos);
  }
  std::vector<std::uint8_t> other = bytes;
  other[0] = 'X';
  CHECK(errorMessage([&] { deserializeSnapshot(other, "ckpt-C"); }).find("bad magic") != std::string::npos);
}

TEST_CASE("checkpoints carry the run identity; version 1 files are refused", "[trainer][checkpoint]") {
  TrainerSnapshot s;
  s.step = 7;
  s.runId = 0x0123456789abcdefull;
  s.rank = 3;
  s.ranks = 4;
  s.counters = "{}";
  const std::vector<std::uint8_t> bytes = serializeSnapshot(s);
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  CHECK(version == kCheckpointVersion);
  CHECK(kCheckpointVersion == 3);
  const TrainerSnapshot back = deserializeSnapshot(bytes, "memory");
  CHECK(back.runId == s.runId);
  CHECK(back.rank == 3);
  CHECK(back.ranks == 4);
  // The version sits outside the CRC-covered payload: a file that says version 1 gets the clear message.
  std::vector<std::uint8_t> old = bytes;
  const std::uint32_t one = 1;
  std::memcpy(old.data() + 8, &one, 4);
  const std::string msg = errorMessage([&] { deserializeSnapshot(old, "ckpt-old"); });
  INFO(msg);
  CHECK(msg.find("ckpt-old") != std::string::npos);
  CHECK(msg.find("version 1") != std::string::npos);
  CHECK(msg.find("without --resume") != std::string::npos);
}

TEST_CASE("checkpoints carry a double-buffered run's pending gradients; version 2 files read with none",
          "[trainer][checkpoint]") {
  TrainerSnapshot s;
  s.step = 5;
  s.counters = "{}";
  s.pendingGradients = {1.5f, -2.0f, 0.25f};
  const TrainerSnapshot back = deserializeSnapshot(serializeSnapshot(s), "memory");
  CHECK(back.pendingGradients == s.pendingGradients);
  // A version 2 file: the same payload without the last section (an empty "pending": u32 name length,
  // the name, u64 length), the header's payload size and the CRC redone.
  s.pendingGradients.clear();
  const std::vector<std::uint8_t> v3 = serializeSnapshot(s);
  const std::size_t pendingSection = 4 + 7 + 8;
  const std::size_t header = 8 + 4 + 8;
  std::vector<std::uint8_t> payload(v3.begin() + header, v3.end() - 4 - pendingSection);
  std::vector<std::uint8_t> v2(v3.begin(), v3.begin() + header);
  const std::uint32_t two = 2;
  std::memcpy(v2.data() + 8, &two, 4);
  const std::uint64_t size = payload.size();
  std::memcpy(v2.data() + 12, &size, 8);
  v2.insert(v2.end(), payload.begin(), payload.end());
  const auto crc = static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), payload.data(), static_cast<uInt>(size)));
  const auto* c = reinterpret_cast<const std::uint8_t*>(&crc);
  v2.insert(v2.end(), c, c + 4);
  const TrainerSnapshot old = deserializeSnapshot(v2, "v2");
  CHECK(old.step == 5);
  CHECK(old.pendingGradients.empty());
  // The v3 bytes labelled version 2 have a section too many.
  std::vector<std::uint8_t> mislabelled = v3;
  std::memcpy(mislabelled.data() + 8, &two, 4);
  CHECK(errorMessage([&] { deserializeSnapshot(mislabelled, "x"); }).find("trailing") != std::string::npos);
}

// Found by tests/fuzz (fuzz_checkpoint under UBSan): an empty float section (parameters, velocity)
// was copied with memcpy from a null pointer. Round trip of the all-empty snapshot.
TEST_CASE("checkpoint of an empty snapshot round-trips", "[trainer][checkpoint]") {
  const TrainerSnapshot empty;
  const std::vector<std::uint8_t> bytes = serializeSnapshot(empty);
  const TrainerSnapshot back = deserializeSnapshot(bytes, "memory");
  CHECK(back.step == 0);
  CHECK(back.parameters.empty());
  CHECK(back.velocity.empty());
  CHECK(back.reducerState.empty());
  CHECK(serializeSnapshot(back) == bytes);
}

TEST_CASE("atomic write leaves no temporary file", "[trainer][checkpoint]") {
  auto dir = freshDir("atomic");
  const std::vector<std::uint8_t> bytes = {1, 2, 3};
  writeFileAtomically((dir / "f").string(), bytes);
  CHECK(std::filesystem::file_size(dir / "f") == 3);
  CHECK_FALSE(std::filesystem::exists(dir / "f.tmp"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("IDX reader: valid files, missing and corrupt files name the file", "[trainer][data]") {
  auto dir = freshDir("idx");
  writeTinyTrainSplit(dir);
  Dataset d = loadIdxDataset(dir.string(), Split::kTrain);
  CHECK(d.count() == 3);
  CHECK(d.rows == 2);
  CHECK(d.cols == 2);
  CHECK(d.labels == std::vector<std::uint8_t>{7, 0, 9});
  CHECK(d.pixels[5] == 100);

  // Missing split.
  std::string msg = errorMessage([&] { loadIdxDataset(dir.string(), Split::kTest); });
  CHECK(msg.find((dir / "t10k-images-idx3-ubyte.gz").string()) != std::string::npos);

  // Label count disagreeing with the image count.
  auto labels = idxHeader({2});
  labels.push_back(1);
  labels.push_back(2);
  writeGz(dir / "train-labels-idx1-ubyte.gz", labels);
  msg = errorMessage([&] { loadIdxDataset(dir.string(), Split::kTrain); });
  CHECK(msg.find("train-labels-idx1-ubyte.gz") != std::string::npos);

  // Truncated gzip stream.
  writeTinyTrainSplit(dir);
  {
    auto path = dir / "train-images-idx3-ubyte.gz";
    std::vector<char> bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes.resize(bytes.size() - 6);
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  msg = errorMessage([&] { loadIdxDataset(dir.string(), Split::kTrain); });
  INFO(msg);
  CHECK(msg.find("train-images-idx3-ubyte.gz") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);

  // Not an IDX file at all.
  writeGz(dir / "train-images-idx3-ubyte.gz", {'h', 'e', 'l', 'l', 'o', '!', '!', '!', '!', '!', '!', '!', '!', '!', '!', '!'});
  msg = errorMessage([&] { loadIdxDataset(dir.string(), Split::kTrain); });
  CHECK(msg.find("not a uint8 IDX file") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("synthetic data set is labelled, deterministic and learnable-shaped", "[trainer][data]") {
  Dataset a = makeSyntheticDataset(100, 28, 28, 10, 7), b = makeSyntheticDataset(100, 28, 28, 10, 7);
  CHECK(a.description.find("SYNTHETIC") != std::string::npos);
  CHECK(a.pixels == b.pixels);
  CHECK(a.labels == b.labels);
  CHECK(makeSyntheticDataset(100, 28, 28, 10, 8).pixels != a.pixels);
  std::vector<std::uint32_t> idx = {0, 1};
  std::vector<float> images(2 * 784);
  std::vector<std::int32_t> labels(2);
  a.gather(idx, images.data(), labels.data());
  CHECK(labels[0] == a.labels[0]);
  CHECK(images[3] == Approx((a.pixels[3] / 255.0f - 0.2860f) / 0.3530f));
}

TEST_CASE("per-layer format requests", "[trainer][formats]") {
  std::vector<LayerRange> layers = {{"conv1", 0, 10}, {"fc1", 10, 100}, {"fc2", 110, 5}};
  auto f = parseLayerFormats("fc1=table4,fp16", layers);
  CHECK(toString(f[0]) == "fp16");
  CHECK(toString(f[1]) == "table4");
  CHECK(toString(f[2]) == "fp16");
  f = parseLayerFormats("table1+ef", layers);
  CHECK(f[2].errorFeedback);
  CHECK(errorMessage([&] { parseLayerFormats("fc9=fp8", layers); }).find("conv1, fc1, fc2") != std::string::npos);
  CHECK_THROWS_AS(parseLayerFormats("fp7", layers), Error);
  CHECK(errorMessage([&] { parseLayerFormats("fc1=table4,fc1=fp16", layers); }).find("'fc1' more than once") !=
        std::string::npos);
  CHECK(errorMessage([&] { parseLayerFormats("fp16,fc1=fp8,fp8", layers); }).find("two formats") != std::string::npos);
  const std::string adaptive = errorMessage([&] { parseLayerFormats("fc1=adaptive", layers); });
  CHECK(adaptive.find("only valid as the whole --format") != std::string::npos);
  const std::string unknown = errorMessage([&] { parseLayerFormats("fc2=fp7", layers); });
  CHECK(unknown.find("fastest") != std::string::npos);
  CHECK(unknown.find("adaptive") == std::string::npos);
  CHECK_NOTHROW(checkCandidates("fp32,fp16+ef,fastest"));
  CHECK(errorMessage([] { checkCandidates("fp16,fp16"); }).find("more than once") != std::string::npos);
  CHECK(errorMessage([] { checkCandidates("fp16,,fp8"); }).find("empty entry") != std::string::npos);
}
