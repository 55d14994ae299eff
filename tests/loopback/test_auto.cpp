// auto's calibration across ranks: agreed so that every rank chooses the same even when the ranks
// measured differently, and the ADAPREC_CALIBRATION file: written after a probe, reloaded exactly,
// a missing, malformed or other-topology file reported in one line and ignored.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <sys/stat.h>
#include <unistd.h>

#include "adaprec/communicator.hpp"
#include "adaprec/transport.hpp"
#include "algorithm/auto_selector.hpp"
#include "algorithm/calibration.hpp"
#include "codec/host_kernels.hpp"

using namespace adaprec;
using namespace adaprec::detail;

namespace {

// What rank `rank` might measure on its own: rank 0 a fast link (native pays), the others ever
// slower ones (compression pays).
Calibration localMeasurement(int rank, int p) {
  Calibration c;
  c.topology = {p, p, 1, "test"};
  const double link = rank == 0 ? 100e9 : 125e6 / rank;
  c.intra = c.inter = c.loaded = {20e-6 * (rank + 1), link};
  for (double bytes : {262144.0, 1048576.0, 4194304.0}) c.native.emplace_back(bytes, 2 * bytes / link);
  for (Format format : {Format::kFp32, Format::kFp8, Format::kTable4})
    c.codec[format] = {0.3e-9 * (rank + 1), 0.2e-9, 0.25e-9 * (p - rank)};
  return c;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `body` with stderr going to a file; returns what was written there.
template <class F>
std::string capturingStderr(F&& body) {
  const std::string path = std::filesystem::temp_directory_path() / ("adaprec_auto_stderr_" + std::to_string(::getpid()));
  std::fflush(stderr);
  const int saved = ::dup(2);
  std::FILE* file = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(file), 2);
  body();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(file);
  const std::string text = slurp(path);
  std::remove(path.c_str());
  return text;
}

int lines(const std::string& text, const std::string& containing) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(containing) != std::string::npos ? 1 : 0;
  return n;
}

struct Probed {
  std::vector<Calibration> calibrations;  // per rank
  std::vector<std::vector<Algorithm>> choices;
};

// Each rank of a 4-rank group (one rank per emulated node) builds an AutoSelector on `path` and
// resolves a few calls.
Probed probeWith(const std::string& path, int p = 4, std::size_t messageBytes = 0) {
  LoopbackGroup group(p, 1);
  Probed out;
  out.calibrations.resize(p);
  out.choices.resize(p);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
    RankLayout layout;
    for (int r = 0; r < p; ++r) layout.nodeOf.push_back(r);
    AutoSelector selector(layout, AutoSettings{2, path, false, messageBytes});
    for (Format format : {Format::kFp32, Format::kBf16, Format::kTable4})
      for (std::size_t count : {std::size_t{1} << 18, std::size_t{1} << 22})
        out.choices[rank].push_back(selector.choose(*t, format, count));
    out.calibrations[rank] = *selector.calibration();
  });
  return out;
}

void requireSameOnEveryRank(const Probed& got) {
  for (std::size_t r = 1; r < got.calibrations.size(); ++r) {
    REQUIRE(got.calibrations[r] == got.calibrations[0]);
    REQUIRE(got.choices[r] == got.choices[0]);
  }
}

}  // namespace

TEST_CASE("ranks that measured differently agree on one calibration and one choice", "[auto]") {
  const int p = 4;
  LoopbackGroup group(p, 1);
  std::vector<std::vector<Algorithm>> alone(p), agreed(p);
  std::vector<std::string> agreedText(p);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
    const Calibration local = localMeasurement(rank, p);
    const Calibration shared = agreeCalibration(*t, local);
    agreedText[rank] = serializeCalibration(shared);
    for (Format format : {Format::kFp32, Format::kFp8, Format::kTable4}) {
      for (std::size_t count : {std::size_t{1} << 18, std::size_t{1} << 22, std::size_t{1} << 25}) {
        alone[rank].push_back(chooseAlgorithm(local, format, count, 2).algorithm);
        agreed[rank].push_back(chooseAlgorithm(shared, format, count, 2).algorithm);
      }
    }
  });
  // The inputs really would split the ranks without the agreement ...
  CHECK(alone[0] != alone[p - 1]);
  // ... and with it every rank holds the same bits and picks the same.
  for (int r = 1; r < p; ++r) {
    CHECK(agreedText[r] == agreedText[0]);
    CHECK(agreed[r] == agreed[0]);
  }
}

TEST_CASE("ADAPREC_CALIBRATION: written after a probe, reloaded exactly, bad files ignored", "[auto]") {
  const std::string dir = std::filesystem::temp_directory_path() / ("adaprec_auto_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/calibration.txt";

  // Missing: reported, probed, written.
  Probed first;
  const std::string missing = capturingStderr([&] { first = probeWith(path); });
  CHECK(lines(missing, "ADAPREC_CALIBRATION=" + path + " ignored") == 1);
  requireSameOnEveryRank(first);
  const std::string saved = slurp(path);
  REQUIRE(!saved.empty());
  CHECK(saved == serializeCalibration(first.calibrations[0]));

  // Present: reloaded silently, the same numbers to the bit (a new probe never measures the same), so
  // the same choices.
  Probed second;
  CHECK(capturingStderr([&] { second = probeWith(path); }).empty());
  requireSameOnEveryRank(second);
  CHECK(second.calibrations[0] == first.calibrations[0]);
  CHECK(second.choices[0] == first.choices[0]);

  // Malformed: reported in one line, probed again, rewritten.
  std::ofstream(path) << "adaprec-calibration 2\nranks 4\nnodes x\n";
  Probed third;
  const std::string malformed = capturingStderr([&] { third = probeWith(path); });
  CHECK(lines(malformed, "ignored: line 3: bad or repeated nodes") == 1);
  requireSameOnEveryRank(third);
  CHECK(slurp(path) == serializeCalibration(third.calibrations[0]));

  // Another topology (3 ranks): reported, ignored, replaced by this job's.
  probeWith(path, 3);
  Probed fourth;
  const std::string foreign = capturingStderr([&] { fourth = probeWith(path); });
  CHECK(lines(foreign, "measured on another topology") == 1);
  CHECK(fourth.calibrations[0].topology.ranks == 4);
  CHECK(slurp(path) == serializeCalibration(fourth.calibrations[0]));
  std::filesystem::remove_all(dir);
}

TEST_CASE("ADAPREC_CALIBRATION naming a FIFO is neither read nor replaced; a symbolic link is followed", "[auto]") {
  const std::string dir = std::filesystem::temp_directory_path() / ("adaprec_auto_special_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // A FIFO (and likewise a device such as /dev/null): every rank's read blocked, and rank 0 renamed
  // its calibration over the node.
  const std::string fifo = dir + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  Probed probed;
  const std::string said = capturingStderr([&] { probed = probeWith(fifo); });
  CHECK(lines(said, "is not a regular file") == 1);
  requireSameOnEveryRank(probed);
  CHECK(std::filesystem::is_fifo(fifo));
  // A link: the calibration goes to its target, and the link stays a link.
  const std::string target = dir + "/target.txt", link = dir + "/link.txt";
  std::filesystem::create_symlink(target, link);
  const Probed linked = probeWith(link);
  CHECK(std::filesystem::is_symlink(link));
  CHECK(slurp(target) == serializeCalibration(linked.calibrations[0]));
  CHECK(capturingStderr([&] { probeWith(link); }).empty());  // and reloads through it
  std::filesystem::remove_all(dir);
}

TEST_CASE("every write of a calibration file has a temporary name of its own, also across threads", "[auto]") {
  // Threads of one process save their communicators' calibrations at once; a name per process let one
  // truncate and rename another's file ("cannot rename", the calibration lost).
  const std::string path = "/some/dir/mpi-4r-2n-2l-avx2-0m.calibration";
  std::vector<std::string> names(8);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < names.size(); ++t)
    threads.emplace_back([&names, &path, t] { names[t] = calibrationTemporaryPath(path); });
  for (std::thread& thread : threads) thread.join();
  names.push_back(calibrationTemporaryPath(path));
  const std::set<std::string> distinct(names.begin(), names.end());
  CHECK(distinct.size() == names.size());
  for (const std::string& name : names) {
    CAPTURE(name);
    // Beside the file (the rename stays within one file system) and never the file itself.
    CHECK(name.rfind(path + ".tmp", 0) == 0);
    CHECK(std::filesystem::path(name).parent_path() == std::filesystem::path(path).parent_path());
  }
}

TEST_CASE("ADAPREC_CALIBRATION naming a directory keeps one file per transport, topology and piece size", "[auto]") {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("adaprec_auto_dir_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string isa(codec::hostKernels().isa);
  // A trailing '/' names a directory even before it exists: rank 0 creates it when it saves.
  const std::string four = calibrationFile(dir + "/", "loopback", {4, 4, 1, isa});
  const std::string three = calibrationFile(dir + "/", "loopback", {3, 3, 1, isa});
  const std::string fourPieces = calibrationFile(dir + "/", "loopback", {4, 4, 1, isa, 16384});
  CHECK(four == dir + "/loopback-4r-4n-1l-" + isa + "-0m.calibration");
  CHECK(fourPieces == dir + "/loopback-4r-4n-1l-" + isa + "-16384m.calibration");
  CHECK(three != four);
  CHECK(calibrationFile(dir + "/", "mpi", {4, 4, 1, isa}) != four);
  // A path that is not a directory is the file itself.
  CHECK(calibrationFile(dir + "/plain.txt", "loopback", {4, 4, 1, isa}) == dir + "/plain.txt");

  const Probed first = probeWith(dir + "/");
  const Probed other = probeWith(dir + "/", 3);
  // Another piece size (ADAPREC_MESSAGE_BYTES) is another file: it neither overwrites nor is refused.
  const Probed pieces = probeWith(dir + "/", 4, 16384);
  REQUIRE(slurp(four) == serializeCalibration(first.calibrations[0]));
  REQUIRE(slurp(three) == serializeCalibration(other.calibrations[0]));
  REQUIRE(slurp(fourPieces) == serializeCalibration(pieces.calibrations[0]));
  CHECK(pieces.calibrations[0].topology.messageBytes == 16384);
  // Every shape reloads silently from the one directory, named with or without the trailing '/'.
  Probed again, againOther, againPieces;
  CHECK(capturingStderr([&] { again = probeWith(dir); }).empty());
  CHECK(capturingStderr([&] { againOther = probeWith(dir + "/", 3); }).empty());
  CHECK(capturingStderr([&] { againPieces = probeWith(dir, 4, 16384); }).empty());
  CHECK(again.calibrations[0] == first.calibrations[0]);
  CHECK(againOther.calibrations[0] == other.calibrations[0]);
  CHECK(againPieces.calibrations[0] == pieces.calibrations[0]);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a Communicator reloading the calibration chooses as the one that saved it", "[auto]") {
  const std::string path =
      std::filesystem::temp_directory_path() / ("adaprec_auto_comm_" + std::to_string(::getpid()) + ".txt");
  std::remove(path.c_str());
  auto run = [&] {
    LoopbackGroup group(4, 2);  // 2 nodes x 2 ranks: hierarchical is a candidate too
    std::vector<std::vector<Algorithm>> got(4);
    capturingStderr([&] {
      runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
        CommunicatorOptions options;
        options.calibrationPath = path;
        Communicator comm(t, options);
        for (Format format : allFormats())
          for (std::size_t count : {std::size_t{1} << 18, std::size_t{1} << 21, std::size_t{1} << 24})
            got[rank].push_back(comm.resolveAlgorithm(Algorithm::kAuto, format, count));
      });
    });
    for (int r = 1; r < 4; ++r) REQUIRE(got[r] == got[0]);
    return got[0];
  };
  const std::vector<Algorithm> saved = run();
  CHECK(run() == saved);
  std::remove(path.c_str());
}

TEST_CASE("a later Communicator of the same shape reuses the process's calibration instead of probing", "[auto]") {
  // Without ADAPREC_CALIBRATION the calibration used to die with its communicator: a program that made
  // a communicator per call probed on each (docs/algorithms.md).
  auto run = [] {
    LoopbackGroup group(4, 2);
    std::vector<Algorithm> got(4);
    const std::string err = capturingStderr([&] {
      runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
        CommunicatorOptions options;
        options.calibrationPath.clear();
        options.debug = true;
        Communicator comm(t, options);
        got[rank] = comm.resolveAlgorithm(Algorithm::kAuto, Format::kTable4, std::size_t{1} << 22);
      });
    });
    for (int r = 1; r < 4; ++r) CHECK(got[r] == got[0]);
    return std::pair{err, got[0]};
  };
  const auto [first, chosen] = run();  // probes unless an earlier test of this process made this shape
  const auto [second, again] = run();
  INFO(second);
  CHECK_THAT(second, Catch::Contains("of an earlier communicator of the same transport and topology"));
  CHECK_THAT(second, !Catch::Contains("calibration probe took"));
  CHECK(again == chosen);
}

namespace {

// A calibration of 4 nodes x 1 rank on 1 Gbit/s links with a fast codec: the model sends table4 at
// 16 MiB compressed (an engine algorithm), so auto's trial runs.
std::string slowLinkCalibrationFile(const std::string& name) {
  Calibration c;
  c.topology = {4, 4, 1, std::string(codec::hostKernels().isa)};
  c.intra = c.inter = c.loaded = {50e-6, 125e6};
  for (double bytes : {1048576.0, 4194304.0}) c.native.emplace_back(bytes, 1.5 * bytes / 125e6);
  for (Format format : {Format::kFp32, Format::kTable4}) c.codec[format] = {0.3e-9, 0.2e-9, 0.25e-9};
  const std::string path =
      std::filesystem::temp_directory_path() / ("adaprec_" + name + "_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << serializeCalibration(c);
  return path;
}

}  // namespace

TEST_CASE("auto's trial: native and the engine's calls in turn; the agreed best of each settles every rank alike",
          "[auto]") {
  const std::string path = slowLinkCalibrationFile("trial");
  const std::size_t count = std::size_t{1} << 22;  // 16 MiB
  constexpr int kPerSide = kAutoTrialCalls / 2;
  struct Case {
    const char* name;
    // seconds rank r reports for the k-th native call and the k-th engine call of the trial
    std::function<double(int, int)> native, engine;
    bool engineWins;
  };
  const std::vector<Case> cases = {
      {"engine faster", [](int, int) { return 1.0; }, [](int, int) { return 0.5; }, true},
      {"native faster", [](int, int) { return 0.5; }, [](int, int) { return 1.0; }, false},
      {"a tie goes to native", [](int, int) { return 1.0; }, [](int, int) { return 1.0; }, false},
      // The best call of each side counts, not the first, the last or the mean (a call is only ever
      // slowed down).
      {"best, not first", [](int, int k) { return k == 0 ? 1.0 : 0.6; }, [](int, int k) { return k == 0 ? 0.7 : 0.9; },
       false},
      {"best, not last", [](int, int k) { return k == 0 ? 0.6 : 1.0; }, [](int, int k) { return k == 0 ? 0.9 : 0.7; },
       false},
      {"best, not mean", [](int, int k) { return k == 0 ? 0.5 : 1.5; }, [](int, int) { return 0.8; }, false},
      {"engine best", [](int, int k) { return k == 0 ? 0.9 : 1.2; }, [](int, int k) { return k == 0 ? 2.0 : 0.8; },
       true},
      // Alone, rank 0 would take the engine algorithm and ranks 1..3 native; the slowest rank's times
      // count (native 2.0 s, engine 1.5 s), so every rank takes the engine algorithm.
      {"ranks measured differently", [](int rank, int) { return rank == 0 ? 2.0 : 1.0; },
       [](int rank, int) { return rank == 0 ? 1.0 : 1.5; }, true},
  };
  for (const Case& test : cases) {
    SECTION(test.name) {
      LoopbackGroup group(4, 1);
      std::vector<std::vector<AutoCall>> calls(4);
      std::vector<Algorithm> settled(4);
      runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
        RankLayout layout;
        for (int r = 0; r < 4; ++r) layout.nodeOf.push_back(r);
        AutoSelector selector(layout, AutoSettings{2, path, false});
        const Algorithm model = selector.choose(*t, Format::kTable4, count);
        REQUIRE(model != Algorithm::kNative);
        int nativeCalls = 0;
        int engineCalls = 0;
        for (int call = 0; call < kAutoTrialCalls + 2; ++call) {
          const AutoCall next = selector.nextCall(*t, Format::kTable4, count);
          calls[rank].push_back(next);
          if (!next.trial) continue;
          CHECK(selector.inTrial(Format::kTable4, count));
          const double seconds = next.algorithm == Algorithm::kNative ? test.native(rank, nativeCalls++)
                                                                      : test.engine(rank, engineCalls++);
          selector.recordTrial(*t, Format::kTable4, count, seconds);
        }
        CHECK(nativeCalls == kPerSide);
        CHECK(engineCalls == kPerSide);
        CHECK_FALSE(selector.inTrial(Format::kTable4, count));
        settled[rank] = selector.choose(*t, Format::kTable4, count);
        // The trial is per size class: another count of the class is settled alike, another class not.
        CHECK(selector.nextCall(*t, Format::kTable4, count + 1000).algorithm == settled[rank]);
        CHECK(selector.nextCall(*t, Format::kTable4, 2 * count).trial);
        if (rank == 0) {
          REQUIRE(calls[0].size() == static_cast<std::size_t>(kAutoTrialCalls + 2));
          for (int call = 0; call < kAutoTrialCalls; ++call) {
            CHECK(calls[0][call].trial);
            CHECK(calls[0][call].algorithm == (call % 2 == 0 ? Algorithm::kNative : model));
          }
          for (int call = kAutoTrialCalls; call < kAutoTrialCalls + 2; ++call) {
            CHECK_FALSE(calls[0][call].trial);
            CHECK(calls[0][call].algorithm == settled[0]);
          }
          CHECK(settled[0] == (test.engineWins ? model : Algorithm::kNative));
        }
      });
      for (int r = 1; r < 4; ++r) {
        CHECK(settled[r] == settled[0]);
        for (std::size_t i = 0; i < calls[0].size(); ++i) {
          CHECK(calls[r][i].algorithm == calls[0][i].algorithm);
          CHECK(calls[r][i].trial == calls[0][i].trial);
        }
      }
    }
  }
  std::remove(path.c_str());
}

TEST_CASE("auto through a Communicator: trial calls sum right, then one algorithm on every rank", "[auto]") {
  const std::string path = slowLinkCalibrationFile("trial_comm");
  const std::size_t count = std::size_t{1} << 22;
  LoopbackGroup group(4, 1);
  std::vector<std::vector<Algorithm>> ran(4);
  std::vector<Algorithm> resolved(4);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
    CommunicatorOptions options;
    options.calibrationPath = path;
    Communicator comm(t, options);
    AllreduceOptions call;
    call.format = parseFormatSpec("table4");
    std::vector<float> buf(count);
    for (int i = 0; i < kAutoTrialCalls + 3; ++i) {
      // Every rank contributes the same small integers: table4 of one repeated value is exact.
      std::fill(buf.begin(), buf.end(), 1.0f);
      const AllreduceStats stats = comm.allreduce(buf.data(), count, call);
      ran[rank].push_back(stats.algorithm);
      CHECK(buf[0] == 4.0f);
      CHECK(buf[count - 1] == 4.0f);
    }
    resolved[rank] = comm.resolveAlgorithm(Algorithm::kAuto, Format::kTable4, count);
  });
  for (int i = 0; i < kAutoTrialCalls; ++i) CHECK((ran[0][i] == Algorithm::kNative) == (i % 2 == 0));
  for (int i = kAutoTrialCalls; i < kAutoTrialCalls + 3; ++i) CHECK(ran[0][i] == resolved[0]);
  for (int r = 1; r < 4; ++r) {
    CHECK(ran[r] == ran[0]);
    CHECK(resolved[r] == resolved[0]);
  }
  std::remove(path.c_str());
}
