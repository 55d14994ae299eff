// The NCCL fake behaves like NCCL where the NCCL transport's correctness depends on it: operations of a
// group start only at groupEnd; sends are rendezvous and a stream runs its groups in order (so a send
// and its receive in separate groups, send first on both ranks, deadlock as under NCCL); a size mismatch
// fails both ranks; a missing partner times out with a message naming it; stream-ordered copies run only
// when the stream reaches them.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine_check.hpp"
#include "nccl_fake_run.hpp"

using namespace adaprec;
using namespace adaprec::detail;
using namespace std::chrono_literals;

namespace {

// n communicators of one fake (initialized on n threads: commInitRank is collective) and a stream each.
struct FakeWorld {
  NcclFake fake{NcclFakeOptions{10000ms}};
  std::vector<NcclComm> comms;
  std::vector<NcclStream> streams;

  explicit FakeWorld(int n) : comms(static_cast<std::size_t>(n)), streams(static_cast<std::size_t>(n)) {
    NcclUniqueId id;
    REQUIRE(fake.getUniqueId(&id) == NcclResult::kSuccess);
    std::vector<std::thread> threads;
    std::vector<NcclResult> results(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        results[static_cast<std::size_t>(r)] = fake.commInitRank(&comms[static_cast<std::size_t>(r)], n, id, r);
      });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      REQUIRE(results[static_cast<std::size_t>(r)] == NcclResult::kSuccess);
      REQUIRE(fake.streamCreate(&streams[static_cast<std::size_t>(r)]) == NcclResult::kSuccess);
    }
  }
  ~FakeWorld() {
    for (NcclComm c : comms) fake.commDestroy(c);
    for (NcclStream s : streams) fake.streamDestroy(s);
  }
  NcclResult sync(int r, std::chrono::milliseconds timeout) {
    return fake.streamSynchronize(streams[static_cast<std::size_t>(r)], comms[static_cast<std::size_t>(r)], timeout);
  }
};

}  // namespace

TEST_CASE("nccl fake: a group's operations start at groupEnd, not before", "[nccl_fake]") {
  FakeWorld w(2);
  std::array<std::uint8_t, 8> out{1, 2, 3, 4, 5, 6, 7, 8};
  std::array<std::uint8_t, 8> in{};
  REQUIRE(w.fake.recv(in.data(), 8, NcclDataType::kUint8, 0, w.comms[1], w.streams[1]) == NcclResult::kSuccess);
  REQUIRE(w.fake.groupStart() == NcclResult::kSuccess);
  REQUIRE(w.fake.send(out.data(), 8, NcclDataType::kUint8, 1, w.comms[0], w.streams[0]) == NcclResult::kSuccess);
  // The send is only collected: rank 1's receive cannot complete yet.
  CHECK(w.sync(1, 100ms) == NcclResult::kTimedOut);
  CHECK(w.fake.lastError().find("ncclRecv of 8 bytes from rank 0 has no matching ncclSend") != std::string::npos);
  CHECK(in[0] == 0);
  REQUIRE(w.fake.groupEnd() == NcclResult::kSuccess);
  CHECK(w.sync(1, 1000ms) == NcclResult::kSuccess);
  CHECK(w.sync(0, 1000ms) == NcclResult::kSuccess);
  CHECK(in == out);
}

TEST_CASE("nccl fake: an exchange in separate send-first groups deadlocks, in one group it completes",
          "[nccl_fake]") {
  std::array<float, 2> a{1, 2}, b{3, 4}, fromB{}, fromA{};
  SECTION("separate groups: each send waits for a receive queued behind it on the peer's stream") {
    FakeWorld w(2);
    REQUIRE(w.fake.send(a.data(), 2, NcclDataType::kFloat32, 1, w.comms[0], w.streams[0]) == NcclResult::kSuccess);
    REQUIRE(w.fake.recv(fromB.data(), 2, NcclDataType::kFloat32, 1, w.comms[0], w.streams[0]) == NcclResult::kSuccess);
    REQUIRE(w.fake.send(b.data(), 2, NcclDataType::kFloat32, 0, w.comms[1], w.streams[1]) == NcclResult::kSuccess);
    REQUIRE(w.fake.recv(fromA.data(), 2, NcclDataType::kFloat32, 0, w.comms[1], w.streams[1]) == NcclResult::kSuccess);
    CHECK(w.sync(0, 100ms) == NcclResult::kTimedOut);
    const std::string message = w.fake.lastError();
    INFO(message);
    CHECK(message.find("ncclSend of 8 bytes to rank 1 has no matching ncclRecv") != std::string::npos);
    CHECK(message.find("is rank 1 alive") != std::string::npos);
    CHECK(w.sync(1, 100ms) == NcclResult::kTimedOut);
  }
  SECTION("one group per rank") {
    FakeWorld w(2);
    for (int r = 0; r < 2; ++r) {
      REQUIRE(w.fake.groupStart() == NcclResult::kSuccess);
      REQUIRE(w.fake.send(r == 0 ? a.data() : b.data(), 2, NcclDataType::kFloat32, 1 - r, w.comms[static_cast<std::size_t>(r)],
                          w.streams[static_cast<std::size_t>(r)]) == NcclResult::kSuccess);
      REQUIRE(w.fake.recv(r == 0 ? fromB.data() : fromA.data(), 2, NcclDataType::kFloat32, 1 - r,
                          w.comms[static_cast<std::size_t>(r)], w.streams[static_cast<std::size_t>(r)]) == NcclResult::kSuccess);
      REQUIRE(w.fake.groupEnd() == NcclResult::kSuccess);
    }
    CHECK(w.sync(0, 1000ms) == NcclResult::kSuccess);
    CHECK(w.sync(1, 1000ms) == NcclResult::kSuccess);
    CHECK(fromB == b);
    CHECK(fromA == a);
  }
}

TEST_CASE("nccl fake: matching is per peer in posting order, without tags", "[nccl_fake]") {
  FakeWorld w(2);
  std::array<std::uint8_t, 4> first{1, 1, 1, 1}, second{2, 2, 2, 2}, x{}, y{};
  REQUIRE(w.fake.groupStart() == NcclResult::kSuccess);
  REQUIRE(w.fake.send(first.data(), 4, NcclDataType::kUint8, 1, w.comms[0], w.streams[0]) == NcclResult::kSuccess);
  REQUIRE(w.fake.send(second.data(), 4, NcclDataType::kUint8, 1, w.comms[0], w.streams[0]) == NcclResult::kSuccess);
  REQUIRE(w.fake.groupEnd() == NcclResult::kSuccess);
  REQUIRE(w.fake.groupStart() == NcclResult::kSuccess);
  REQUIRE(w.fake.recv(x.data(), 4, NcclDataType::kUint8, 0, w.comms[1], w.streams[1]) == NcclResult::kSuccess);
  REQUIRE(w.fake.recv(y.data(), 4, NcclDataType::kUint8, 0, w.comms[1], w.streams[1]) == NcclResult::kSuccess);
  REQUIRE(w.fake.groupEnd() == NcclResult::kSuccess);
  REQUIRE(w.sync(1, 1000ms) == NcclResult::kSuccess);
  CHECK(x == first);
  CHECK(y == second);
}

TEST_CASE("nccl fake: a send and its receive of different sizes fail both ranks", "[nccl_fake]") {
  SECTION("through the API: kMismatch at synchronize") {
    FakeWorld w(2);
    std::array<std::uint8_t, 16> out{}, in{};
    REQUIRE(w.fake.send(out.data(), 8, NcclDataType::kUint8, 1, w.comms[0], w.streams[0]) == NcclResult::kSuccess);
    REQUIRE(w.fake.recv(in.data(), 16, NcclDataType::kUint8, 0, w.comms[1], w.streams[1]) == NcclResult::kSuccess);
    CHECK(w.sync(0, 1000ms) == NcclResult::kMismatch);
    const std::string message = w.fake.lastError();
    INFO(message);
    CHECK(message.find("ncclSend of 8 bytes") != std::string::npos);
    CHECK(message.find("ncclRecv of 16 bytes") != std::string::npos);
    CHECK(w.sync(1, 1000ms) == NcclResult::kMismatch);
  }
  SECTION("through the transport: Error(kMismatch) on both ranks") {
    std::array<std::optional<ErrorCode>, 2> codes;
    test::runOnNcclFake({2, 0, false}, [&](int rank, std::shared_ptr<Transport> t) {
      std::vector<std::byte> buffer(16);
      try {
        if (rank == 0) t->isend(1, buffer.data(), 8, 0)->wait();
        if (rank == 1) t->irecv(0, buffer.data(), 16, 0)->wait();
      } catch (const Error& e) {
        codes[static_cast<std::size_t>(rank)] = e.code();
      }
    });
    CHECK(codes[0] == ErrorCode::kMismatch);
    CHECK(codes[1] == ErrorCode::kMismatch);
  }
}

TEST_CASE("nccl fake: a missing peer times out with a message naming it", "[nccl_fake]") {
  std::string message;
  std::optional<ErrorCode> code;
  test::runOnNcclFake({3, 0, false}, [&](int rank, std::shared_ptr<Transport> t) {
    if (rank != 0) return;  // rank 2 never sends
    t->setTimeout(300ms);
    std::vector<std::byte> buffer(64);
    try {
      t->irecv(2, buffer.data(), 64, 5)->wait();
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
    }
  });
  INFO(message);
  CHECK(code == ErrorCode::kTransport);
  CHECK(message.find("timed out after 0.30 s") != std::string::npos);
  CHECK(message.find("waiting for a message from rank 2") != std::string::npos);
  CHECK(message.find("ncclRecv of 64 bytes") != std::string::npos);
  CHECK(message.find("is rank 2 alive") != std::string::npos);
}

TEST_CASE("nccl fake: a stream-ordered copy runs only when the stream reaches it", "[nccl_fake]") {
  FakeWorld w(2);
  std::array<std::uint8_t, 4> out{9, 8, 7, 6}, scratch{}, host{};
  REQUIRE(w.fake.recv(scratch.data(), 4, NcclDataType::kUint8, 0, w.comms[1], w.streams[1]) == NcclResult::kSuccess);
  REQUIRE(w.fake.memcpyAsync(host.data(), scratch.data(), 4, w.streams[1]) == NcclResult::kSuccess);
  CHECK(host[0] == 0);  // behind the unfinished receive
  REQUIRE(w.fake.send(out.data(), 4, NcclDataType::kUint8, 1, w.comms[0], w.streams[0]) == NcclResult::kSuccess);
  REQUIRE(w.sync(1, 1000ms) == NcclResult::kSuccess);
  CHECK(host == out);
}

TEST_CASE("nccl fake: allreduce sums in rank order, identical on every rank; a count mismatch fails",
          "[nccl_fake]") {
  FakeWorld w(3);
  std::vector<std::vector<float>> data = {{1e8f, 1.0f}, {1.0f, 2.0f}, {-1e8f, 3.0f}};
  for (int r = 0; r < 3; ++r)
    REQUIRE(w.fake.allReduceSum(data[static_cast<std::size_t>(r)].data(), data[static_cast<std::size_t>(r)].data(), 2,
                                NcclDataType::kFloat32, w.comms[static_cast<std::size_t>(r)],
                                w.streams[static_cast<std::size_t>(r)]) == NcclResult::kSuccess);
  for (int r = 0; r < 3; ++r) REQUIRE(w.sync(r, 1000ms) == NcclResult::kSuccess);
  // ((1e8 + 1) + -1e8) in fp32 is 0: rank order, one rounding per addition.
  for (int r = 0; r < 3; ++r) {
    CHECK(data[static_cast<std::size_t>(r)][0] == 0.0f);
    CHECK(data[static_cast<std::size_t>(r)][1] == 6.0f);
  }
  for (int r = 0; r < 3; ++r)
    REQUIRE(w.fake.allReduceSum(data[static_cast<std::size_t>(r)].data(), data[static_cast<std::size_t>(r)].data(),
                                r == 2 ? 1 : 2, NcclDataType::kFloat32, w.comms[static_cast<std::size_t>(r)],
                                w.streams[static_cast<std::size_t>(r)]) == NcclResult::kSuccess);
  for (int r = 0; r < 3; ++r) CHECK(w.sync(r, 1000ms) == NcclResult::kMismatch);
}

TEST_CASE("nccl fake: an allreduce a rank never joins times out naming the rank", "[nccl_fake]") {
  FakeWorld w(3);
  std::vector<float> data(4, 1.0f);
  for (int r = 0; r < 2; ++r)
    REQUIRE(w.fake.allReduceSum(data.data(), data.data(), 4, NcclDataType::kFloat32, w.comms[static_cast<std::size_t>(r)],
                                w.streams[static_cast<std::size_t>(r)]) == NcclResult::kSuccess);
  CHECK(w.sync(0, 100ms) == NcclResult::kTimedOut);
  const std::string message = w.fake.lastError();
  INFO(message);
  CHECK(message.find("ncclAllReduce #0 is missing ranks 2") != std::string::npos);
}

TEST_CASE("nccl transport without a timeout (no completion votes) equals loopback", "[nccl_fake]") {
  // The sweep runs with a timeout; this is the Communicator's default path.
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRabenseifner,
                              Algorithm::kRecursiveDoubling, Algorithm::kHierarchical, Algorithm::kNative}) {
    AllreduceOptions opt;
    opt.format = parseFormatSpec(algorithm == Algorithm::kNative ? "bf16" : "fp8s");
    opt.algorithm = algorithm;
    const int p = 5;
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < p; ++r) inputs.push_back(test::makeInput(r, 20001, false));
    test::RunSetup setup{p, 2, false, std::chrono::milliseconds(0)};
    const test::Outcome nccl = test::runAllreduces(true, setup, inputs, opt, false, 1);
    const test::Outcome loop = test::runAllreduces(false, setup, inputs, opt, false, 1);
    INFO(algorithmName(algorithm));
    REQUIRE_FALSE(nccl.anyError());
    REQUIRE_FALSE(loop.anyError());
    for (int r = 0; r < p; ++r)
      REQUIRE(std::memcmp(nccl.outputs[0][static_cast<std::size_t>(r)].data(), loop.outputs[0][0].data(),
                          20001 * sizeof(float)) == 0);
  }
}

TEST_CASE("nccl fake: ncclFloat8e5m2 sums as NCCL's kernels do: e5m2 after every addition, ties to even, "
          "satfinite",
          "[nccl_fake]") {
  // e5m2 codes: value 2^(e-15) (1 + m/4), 0x3c = 1.0, 0x30 = 0.125, 0x7b = 57344 (largest finite),
  // 0x7c = Inf. Each entry is one element; the sum is ((rank 0 + rank 1) + rank 2), rounded to e5m2
  // after each addition (NCCL: __nv_fp8_e5m2(__hadd(..)), saturating).
  struct Element {
    std::array<std::uint8_t, 3> ranks;
    std::uint8_t sum;
  };
  const std::vector<Element> elements = {
      // 1 + 0.125 = 1.125, halfway between 1.0 (0x3c, even) and 1.25: 1.0, twice (exact sum 1.25).
      {{0x3c, 0x30, 0x30}, 0x3c},
      // 1.25 + 0.125 = 1.375, halfway between 1.25 (odd) and 1.5 (0x3e, even): 1.5; + 0.
      {{0x3d, 0x30, 0x00}, 0x3e},
      // 57344 + 4096 = 61440, halfway between 57344 (odd) and 65536 (beyond e5m2): saturates to
      // 57344, not Inf; + 57344 overflows fp16 (Inf), saturates again.
      {{0x7b, 0x6c, 0x7b}, 0x7b},
      // Inf + 1: satfinite turns Inf into 57344 (the library's fp8 would keep Inf); + 1: 57344.
      {{0x7c, 0x3c, 0x3c}, 0x7b},
      // -57344 + -57344 saturates to -57344; + 4096 = -53248, halfway between -49152 (0xfa, even)
      // and -57344: -49152 (the exact sum is -110592).
      {{0xfb, 0xfb, 0x6c}, 0xfa},
      // Subnormals: 10 * 2^-16 + 2^-16 = 11 * 2^-16, halfway between 0x09 (odd) and 0x0a = 12 * 2^-16;
      // + (-0).
      {{0x09, 0x01, 0x80}, 0x0a},
      // -Inf + Inf = NaN (0x7f), and NaN stays NaN.
      {{0xfc, 0x7c, 0x3c}, 0x7f},
  };
  const std::size_t n = elements.size();
  FakeWorld w(3);
  std::vector<std::vector<std::uint8_t>> send(3, std::vector<std::uint8_t>(n)), recv(3, std::vector<std::uint8_t>(n));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t r = 0; r < 3; ++r) send[r][i] = elements[i].ranks[r];
  for (std::size_t r = 0; r < 3; ++r)
    REQUIRE(w.fake.allReduceSum(send[r].data(), recv[r].data(), n, NcclDataType::kFloat8e5m2, w.comms[r], w.streams[r]) ==
            NcclResult::kSuccess);
  for (int r = 0; r < 3; ++r) REQUIRE(w.sync(r, 1000ms) == NcclResult::kSuccess);
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      INFO("rank " << r << ", element " << i);
      CHECK(static_cast<int>(recv[r][i]) == static_cast<int>(elements[i].sum));
    }
  }
}
