// hierarchical on node layouts the sweep (two ranks per node) does not reach: L = ranks on the
// smallest node from 1 to 4, fuller nodes with ranks that own no share, counts below L and not
// divisible by L, and small segments so the block pipeline runs many blocks. Every case: all ranks
// bit-identical, exact for fp32 on integer inputs, within the bound of the inner algorithm's
// quantizations among the nodes otherwise; with error feedback, the mean of repeated reductions
// approaches the exact sum (the residuals of every share are kept and used). Last, ring, twoshot and
// hierarchical with segments larger than the eager-sized messages they send between nodes.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adaprec/error.hpp"
#include "algorithm/algorithm.hpp"
#include "transport/eager_message.hpp"
#include "engine_check.hpp"

using namespace adaprec;
using namespace adaprec::test;

namespace {

// Small enough that 65539 elements make dozens of segments per share (4 per pipelined block).
constexpr std::size_t kSegment = 256;

struct NodeLayout {
  int ranks;
  int ranksPerNode;  // node = rank / ranksPerNode; the last node may be smaller
};

// Runs `repetitions` allreduces of every rank's input (the input restored before each) on one
// Communicator per rank; returns each rank's mean result.
std::vector<std::vector<float>> run(const NodeLayout& layout, const std::vector<std::vector<float>>& inputs,
                                    const AllreduceOptions& opt, int repetitions) {
  LoopbackGroup group(layout.ranks, layout.ranksPerNode);
  std::vector<std::vector<float>> outputs(layout.ranks);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options;
    options.segmentCount = kSegment;
    Communicator comm(transport, options);
    std::vector<double> mean(inputs[rank].size(), 0.0);
    std::vector<float> buf;
    for (int rep = 0; rep < repetitions; ++rep) {
      buf = inputs[rank];
      const AllreduceStats stats = comm.allreduce(buf.data(), buf.size(), opt);
      if (stats.algorithm != Algorithm::kHierarchical) throw std::runtime_error("not hierarchical");
      for (std::size_t i = 0; i < buf.size(); ++i) mean[i] += buf[i];
    }
    if (repetitions > 1)
      for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(mean[i] / repetitions);
    outputs[rank] = std::move(buf);
  });
  return outputs;
}

int nodesOf(const NodeLayout& layout) { return (layout.ranks + layout.ranksPerNode - 1) / layout.ranksPerNode; }

}  // namespace

TEST_CASE("hierarchical node layouts", "[hierarchical_layouts]") {
  // L (ranks on the smallest node) = 2, 3, 4, 2, 1, 2 and nodes = 2, 2, 2, 3, 3, 2.
  const NodeLayout layouts[] = {{4, 2}, {6, 3}, {8, 4}, {8, 3}, {7, 3}, {6, 4}};
  const Format formats[] = {Format::kFp32, Format::kBf16, Format::kFp8s, Format::kTable4};
  int cases = 0;
  for (const NodeLayout& layout : layouts) {
    for (Format format : formats) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3},
                                std::size_t{5}, std::size_t{1001}, std::size_t{65539}}) {
        INFO("ranks " << layout.ranks << " per node " << layout.ranksPerNode << " format "
                      << formatName(format) << " count " << count << " seed " << kSeed);
        const bool integers = isLossless(format);
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < layout.ranks; ++r) inputs.push_back(makeInput(r, count, integers));
        AllreduceOptions opt;
        opt.format.format = format;
        opt.algorithm = Algorithm::kHierarchical;
        const std::vector<std::vector<float>> outputs = run(layout, inputs, opt, 1);
        const int q = detail::quantizationsPerValue(Algorithm::kHierarchical, format, layout.ranks,
                                                    nodesOf(layout));
        const std::string failure = checkResults(inputs, outputs, format, q, integers, false);
        INFO(failure);
        REQUIRE(failure.empty());
        ++cases;
      }
    }
  }
  CHECK(cases == 6 * 4 * 7);
}

TEST_CASE("hierarchical error feedback on every share", "[hierarchical_layouts]") {
  const std::size_t count = 5003;  // not divisible by L = 2 or 3
  for (const NodeLayout& layout : {NodeLayout{4, 2}, NodeLayout{6, 3}, NodeLayout{8, 3}}) {
    INFO("ranks " << layout.ranks << " per node " << layout.ranksPerNode);
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < layout.ranks; ++r) inputs.push_back(makeInput(r, count, false));
    const InputStats s = inputStats(inputs);
    auto meanError = [&](bool feedback) {
      AllreduceOptions opt;
      opt.format.format = Format::kTable2;
      opt.format.errorFeedback = feedback;
      opt.key = "layer0";
      opt.algorithm = Algorithm::kHierarchical;
      const std::vector<std::vector<float>> outputs = run(layout, inputs, opt, 16);
      for (int r = 1; r < layout.ranks; ++r) REQUIRE(outputs[r] == outputs[0]);
      double e = 0;
      for (std::size_t i = 0; i < count; ++i) e += std::fabs(outputs[0][i] - s.exact[i]);
      return e / count;
    };
    const double plain = meanError(false);
    const double feedback = meanError(true);
    INFO("mean error " << feedback << " with error feedback, " << plain << " without");
    CHECK(plain > 0);
    CHECK(feedback < 0.35 * plain);
  }
}

// Between nodes ring, twoshot, rabenseifner and recursive_doubling cut every segment (and rabenseifner's
// allgather ranges) into messages of at most the transport's interNodeMessageBytes() (loopback: 48 KiB, as MPI): with the default segment (262144 elements) these
// counts make segments of 32770 .. 100002 fp32 values, i.e. several pieces per segment for every format
// here, and pieces of unequal size. 6 ranks: the pre- and post-steps too.
TEST_CASE("flat algorithms between nodes send segments in pieces", "[hierarchical_layouts]") {
  static_assert(detail::kEagerMessageBytes < 4 * 32770);
  const Format formats[] = {Format::kFp32, Format::kBf16, Format::kTable4};
  const std::pair<Algorithm, NodeLayout> runs[] = {
      {Algorithm::kRing, {4, 2}},         {Algorithm::kTwoShot, {4, 2}}, {Algorithm::kRabenseifner, {4, 2}},
      {Algorithm::kRabenseifner, {6, 2}}, {Algorithm::kRecursiveDoubling, {4, 2}},
      {Algorithm::kRecursiveDoubling, {6, 2}}, {Algorithm::kHierarchical, {4, 2}}};
  for (const auto& entry : runs) {
    // Copies, not a structured binding: clang 14 cannot capture bindings in the lambda below.
    const Algorithm algorithm = entry.first;
    const NodeLayout layout = entry.second;
    for (Format format : formats) {
      for (std::size_t count : {std::size_t{131080}, std::size_t{400009}}) {
        INFO(algorithmName(algorithm) << " " << formatName(format) << " count " << count << " ranks "
                                      << layout.ranks);
        const bool integers = isLossless(format);
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < layout.ranks; ++r) inputs.push_back(makeInput(r, count, integers));
        std::vector<std::vector<float>> outputs(layout.ranks);
        LoopbackGroup group(layout.ranks, layout.ranksPerNode);
        runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
          Communicator comm(transport);  // default segment size
          outputs[rank] = inputs[rank];
          AllreduceOptions opt;
          opt.format.format = format;
          opt.algorithm = algorithm;
          comm.allreduce(outputs[rank].data(), count, opt);
        });
        const int q = detail::quantizationsPerValue(algorithm, format, layout.ranks, nodesOf(layout));
        const std::string failure = checkResults(inputs, outputs, format, q, integers, false);
        INFO(failure);
        REQUIRE(failure.empty());
      }
    }
  }
}

namespace {

// Loopback underneath, but the piece size is the test's (0: as NCCL answers), and every message a
// rank sends to another node is measured: the largest one is kept.
class MessageSizeProbe final : public Transport {
 public:
  MessageSizeProbe(std::shared_ptr<Transport> inner, int ranksPerNode, std::size_t pieceBytes,
                   std::shared_ptr<std::atomic<std::size_t>> largest)
      : inner_(std::move(inner)), ranksPerNode_(ranksPerNode), pieceBytes_(pieceBytes), largest_(std::move(largest)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* kind() const override { return "message-size-probe"; }
  int nodeId() const override { return inner_->nodeId(); }
  std::size_t interNodeMessageBytes() const override { return pieceBytes_; }
  RequestPtr isend(int peer, const void* data, std::size_t bytes, int tag) override {
    if (peer / ranksPerNode_ != rank() / ranksPerNode_) {
      std::size_t seen = largest_->load();
      while (bytes > seen && !largest_->compare_exchange_weak(seen, bytes)) {
      }
    }
    return inner_->isend(peer, data, bytes, tag);
  }
  RequestPtr irecv(int peer, void* data, std::size_t capacityBytes, int tag) override {
    return inner_->irecv(peer, data, capacityBytes, tag);
  }
  std::unique_ptr<Transport> split(int, int) override { FAIL("the flat algorithms do not split"); return nullptr; }

 private:
  std::shared_ptr<Transport> inner_;
  int ranksPerNode_;
  std::size_t pieceBytes_;
  std::shared_ptr<std::atomic<std::size_t>> largest_;
};

}  // namespace

// The piece size is the transport's (Transport::interNodeMessageBytes) unless the Communicator's options
// (ADAPREC_MESSAGE_BYTES) set one: loopback's 48 KiB caps every message between nodes, a transport
// answering 0 (NCCL) gets whole messages (twoshot's smallest here: a quarter of a default segment,
// 256 KiB of fp32), and an option overrides either way. Same sums in every case.
TEST_CASE("the pieces between nodes are the transport's size or the option's", "[hierarchical_layouts]") {
  const NodeLayout layout{4, 2};
  const std::size_t count = 400009;
  struct Case {
    std::size_t transportBytes;
    std::optional<std::size_t> optionBytes;
    std::size_t expected;  // 0: whole messages
  };
  const Case cases[] = {{detail::kEagerMessageBytes, std::nullopt, detail::kEagerMessageBytes},
                        {0, std::nullopt, 0},
                        {detail::kEagerMessageBytes, 0, 0},
                        {0, 8192, 8192}};
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTwoShot, Algorithm::kRabenseifner,
                              Algorithm::kRecursiveDoubling}) {
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < layout.ranks; ++r) inputs.push_back(makeInput(r, count, true));
    std::vector<std::vector<float>> reference;
    for (const Case& c : cases) {
      INFO(algorithmName(algorithm) << ": transport " << c.transportBytes << " bytes, option "
                                    << (c.optionBytes ? std::to_string(*c.optionBytes) : "unset"));
      auto largest = std::make_shared<std::atomic<std::size_t>>(0);
      std::vector<std::vector<float>> outputs(layout.ranks);
      LoopbackGroup group(layout.ranks, layout.ranksPerNode);
      runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
        auto probe = std::make_shared<MessageSizeProbe>(transport, layout.ranksPerNode, c.transportBytes, largest);
        REQUIRE(transport->interNodeMessageBytes() == detail::kEagerMessageBytes);
        CommunicatorOptions options;
        options.interNodeMessageBytes = c.optionBytes;
        Communicator comm(probe, options);
        CHECK(comm.interNodeMessageBytes() == c.expected);
        outputs[rank] = inputs[rank];
        AllreduceOptions opt;
        opt.format.format = Format::kFp32;
        opt.algorithm = algorithm;
        comm.allreduce(outputs[rank].data(), count, opt);
      });
      if (c.expected > 0) {
        CHECK(largest->load() <= c.expected);
        CHECK(largest->load() > c.expected / 2);
      } else {
        CHECK(largest->load() > 2 * detail::kEagerMessageBytes);  // not cut
      }
      if (reference.empty()) reference = outputs;
      REQUIRE(outputs == reference);
    }
  }
}

// The piece size shapes every message, so ranks must agree on it (a sender's pieces would not match
// the receiver's); a size between 1 and 1023 is refused.
TEST_CASE("ranks that disagree on the piece size get no communicator", "[hierarchical_layouts]") {
  LoopbackGroup group(4, 2);
  std::vector<std::string> errors(4);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options;
    options.interNodeMessageBytes = rank == 3 ? 65536 : 49152;
    try {
      Communicator comm(transport, options);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kMismatch);
      errors[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  for (const std::string& e : errors) CHECK(e.find("ADAPREC_MESSAGE_BYTES=") != std::string::npos);

  // On one node nothing is cut, whatever the option says.
  LoopbackGroup oneNode(2, 2);
  runLoopback(oneNode, [&](int, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options;
    options.interNodeMessageBytes = 65536;
    CHECK(Communicator(transport, options).interNodeMessageBytes() == 0);
  });

  LoopbackGroup small(2, 1);
  runLoopback(small, [&](int, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options;
    options.interNodeMessageBytes = 1000;
    CHECK_THROWS_AS(Communicator(transport, options), Error);
  });
}
