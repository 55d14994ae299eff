// Saving and loading error-feedback state (Communicator::saveErrorFeedback / loadErrorFeedback): a
// sequence of +ef allreduces interrupted by save + load continues bit-identically, and malformed
// state is rejected with kMalformedInput without touching the current state.
#include <catch2/catch.hpp>

#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "engine_check.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

// Two tensors of different sizes, so the state holds more than one key.
const std::size_t kCounts[] = {5000, 1200};
const char* const kKeys[] = {"fc1.weight", "fc1.bias"};
constexpr int kSteps = 6;
constexpr int kSaveAfter = 3;

// Step `step` of the sequence on `comm`: both tensors, inputs depending on rank and step. Returns
// the results, concatenated.
std::vector<float> runStep(Communicator& comm, const FormatSpec& format, Algorithm algorithm, int step) {
  std::vector<float> out;
  for (int t = 0; t < 2; ++t) {
    AllreduceOptions opt;
    opt.format = format;
    opt.algorithm = algorithm;
    opt.average = true;
    opt.key = kKeys[t];
    std::vector<float> buf = makeInput(comm.rank(), kCounts[t], false, kSeed + 17u * step + t);
    comm.allreduce(buf.data(), buf.size(), opt);
    out.insert(out.end(), buf.begin(), buf.end());
  }
  return out;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("saved error-feedback state continues bit-identically", "[engine][ef-state]") {
  const int p = 4;
  INFO("seed " << kSeed);
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRabenseifner,
                              Algorithm::kRecursiveDoubling, Algorithm::kHierarchical}) {
    for (const char* spec : {"table2+ef", "fp8s+ef"}) {
      INFO(algorithmName(algorithm) << " " << spec);
      const FormatSpec format = parseFormatSpec(spec);
      // Per rank: the uninterrupted run's last steps, the same steps after loading into a fresh
      // communicator and after reset + load on the saving one, and without any state (control).
      std::vector<std::vector<float>> straight(p), fresh(p), reloaded(p), zero(p);
      // char, not bool: rank threads write their own entry at once, and vector<bool> packs entries into
      // shared words (a lost write failed this check about once in 150 runs).
      std::vector<char> roundTrip(p, 0);
      std::vector<std::size_t> blobBytes(p, 0);
      LoopbackGroup group(p, 2);
      runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
        Communicator uninterrupted(t);
        for (int s = 0; s < kSteps; ++s) {
          std::vector<float> r = runStep(uninterrupted, format, algorithm, s);
          if (s >= kSaveAfter) straight[rank].insert(straight[rank].end(), r.begin(), r.end());
        }
        Communicator saver(t);
        for (int s = 0; s < kSaveAfter; ++s) runStep(saver, format, algorithm, s);
        const std::vector<std::byte> blob = saver.saveErrorFeedback();
        blobBytes[rank] = blob.size();

        Communicator restored(t);
        restored.loadErrorFeedback(blob);
        roundTrip[rank] = restored.saveErrorFeedback() == blob;
        for (int s = kSaveAfter; s < kSteps; ++s) {
          std::vector<float> r = runStep(restored, format, algorithm, s);
          fresh[rank].insert(fresh[rank].end(), r.begin(), r.end());
        }

        saver.resetErrorFeedback();
        Communicator control(t);
        for (int s = kSaveAfter; s < kSteps; ++s) {
          std::vector<float> r = runStep(control, format, algorithm, s);
          zero[rank].insert(zero[rank].end(), r.begin(), r.end());
        }
        saver.loadErrorFeedback(blob);
        for (int s = kSaveAfter; s < kSteps; ++s) {
          std::vector<float> r = runStep(saver, format, algorithm, s);
          reloaded[rank].insert(reloaded[rank].end(), r.begin(), r.end());
        }
      });
      // Both tensors' residuals on rank 0 (a leader, which quantizes for every algorithm): at least
      // one float per element of each.
      CHECK(blobBytes[0] > (kCounts[0] + kCounts[1]) * sizeof(float));
      for (int r = 0; r < p; ++r) {
        INFO("rank " << r << ", state " << blobBytes[r] << " bytes");
        CHECK(roundTrip[r]);
        CHECK(sameBits(fresh[r], straight[r]));
        CHECK(sameBits(reloaded[r], straight[r]));
        // Without the state the continuation differs, so the checks above can fail.
        CHECK_FALSE(sameBits(zero[r], straight[r]));
      }
    }
  }
}

TEST_CASE("malformed error-feedback state is rejected and changes nothing", "[engine][ef-state]") {
  const int p = 2;
  const std::size_t count = 37;
  std::vector<std::byte> blob;
  struct Attempt {
    std::string what;
    std::optional<ErrorCode> error;
    bool unchanged = false;
  };
  std::vector<Attempt> attempts;
  std::vector<std::byte> emptyState;
  LoopbackGroup group(p);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
    Communicator comm(t);
    if (rank == 0) emptyState = comm.saveErrorFeedback();
    AllreduceOptions opt;
    opt.format = parseFormatSpec("table2+ef");
    opt.algorithm = Algorithm::kRing;
    opt.key = std::string(1, 'w');  // (a literal trips a GCC 12 -Wrestrict false positive)
    std::vector<float> buf = makeInput(rank, count, false);
    comm.allreduce(buf.data(), count, opt);
    if (rank != 0) return;
    blob = comm.saveErrorFeedback();
    auto attempt = [&](std::string what, const std::vector<std::byte>& bytes) {
      Attempt a{std::move(what), std::nullopt, false};
      try {
        comm.loadErrorFeedback(bytes);
      } catch (const Error& e) {
        a.error = e.code();
      }
      a.unchanged = comm.saveErrorFeedback() == blob;
      attempts.push_back(std::move(a));
    };
    for (std::size_t n = 0; n < blob.size(); ++n)
      attempt("truncated to " + std::to_string(n), std::vector<std::byte>(blob.begin(), blob.begin() + n));
    auto patched = [&](std::initializer_list<std::pair<std::size_t, std::uint8_t>> changes) {
      std::vector<std::byte> b = blob;
      for (const auto& [at, value] : changes) b.at(at) = static_cast<std::byte>(value);
      return b;
    };
    std::vector<std::byte> padded = blob;
    padded.push_back(std::byte{0});
    attempt("a trailing byte", padded);
    attempt("bad magic", patched({{0, 'X'}}));
    attempt("version 2", patched({{8, 2}}));
    // Offsets of the only key "w": length at 16, key at 20, count at 21, algorithm at 29, slots at 30,
    // first slot length at 34.
    attempt("empty key", patched({{16, 0}}));
    attempt("key length past the end", patched({{19, 0xff}}));
    attempt("algorithm auto", patched({{29, 0}}));
    attempt("algorithm 99", patched({{29, 99}}));
    attempt("slot count past the end", patched({{33, 0xff}}));
    attempt("slot length != count", patched({{34, static_cast<std::uint8_t>(count + 1)}}));
    // count and slot length agree but are far larger than the input.
    attempt("slot length past the end", patched({{28, 0x01}, {41, 0x01}}));
    attempt("count != slot length", patched({{21, static_cast<std::uint8_t>(count - 1)}}));
    std::vector<std::byte> twoKeys = blob;
    twoKeys.at(12) = std::byte{2};
    twoKeys.insert(twoKeys.end(), blob.begin() + 16, blob.end());
    attempt("a repeated key", twoKeys);
  });
  REQUIRE(blob.size() > count * sizeof(float));
  REQUIRE(attempts.size() == blob.size() + 12);
  for (const Attempt& a : attempts) {
    INFO(a.what);
    REQUIRE(a.error.has_value());
    CHECK(*a.error == ErrorCode::kMalformedInput);
    CHECK(a.unchanged);
  }
  // The empty state is valid and clears every key.
  std::vector<std::byte> afterEmpty;
  LoopbackGroup single(1);
  runLoopback(single, [&](int, std::shared_ptr<Transport> t) {
    Communicator comm(t);
    comm.loadErrorFeedback(blob);
    comm.loadErrorFeedback(emptyState);
    afterEmpty = comm.saveErrorFeedback();
  });
  CHECK(afterEmpty == emptyState);
  CHECK(emptyState.size() == 16);
}

TEST_CASE("one key's error-feedback state can be read, moved and set", "[engine][ef-state]") {
  const int p = 3;
  INFO("seed " << kSeed);
  const FormatSpec format = parseFormatSpec("table2+ef");
  std::vector<std::vector<float>> straight(p), moved(p);
  std::vector<char> missingIsEmpty(p, 0), copied(p, 0), badRejected(p, 0);  // not vector<bool>: see above
  LoopbackGroup group(p, 1);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> t) {
    Communicator a(t);
    for (int s = 0; s < kSteps; ++s) {
      std::vector<float> r = runStep(a, format, Algorithm::kTwoShot, s);
      if (s >= kSaveAfter) straight[rank].insert(straight[rank].end(), r.begin(), r.end());
    }
    // The same steps, where after kSaveAfter each key's state is read from one communicator and set
    // into a fresh one: the continuation must not change.
    Communicator b(t);
    for (int s = 0; s < kSaveAfter; ++s) runStep(b, format, Algorithm::kTwoShot, s);
    missingIsEmpty[rank] = !b.errorFeedback("no such key").has_value();
    Communicator c(t);
    bool allCopied = true;
    for (const char* key : kKeys) {
      std::optional<ErrorFeedbackState> state = b.errorFeedback(key);
      allCopied = allCopied && state.has_value() && state->algorithm == Algorithm::kTwoShot &&
                  !state->slots.empty();
      if (state) c.setErrorFeedback(key, *state);
    }
    copied[rank] = allCopied;
    for (int s = kSaveAfter; s < kSteps; ++s) {
      std::vector<float> r = runStep(c, format, Algorithm::kTwoShot, s);
      moved[rank].insert(moved[rank].end(), r.begin(), r.end());
    }
    ErrorFeedbackState bad{10, Algorithm::kTwoShot, {std::vector<float>(9)}};
    try {
      c.setErrorFeedback("x", bad);
    } catch (const Error& e) {
      badRejected[rank] = e.code() == ErrorCode::kInvalidArgument && !c.errorFeedback("x").has_value();
    }
  });
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    CHECK(missingIsEmpty[r]);
    CHECK(copied[r]);
    CHECK(sameBits(moved[r], straight[r]));
    CHECK(badRejected[r]);
  }
}
