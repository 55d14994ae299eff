// The declared number of quantizations per algorithm (lib/algorithm/error_model.hpp) against the Q
// column of docs/algorithms.md, and the per-format relative bounds against docs/formats.md, so an
// edit of one without the other fails here. The bound itself is asserted by the loopback/MPI suites.
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"
#include "algorithm/error_model.hpp"

using namespace adaprec;
using namespace adaprec::detail;

namespace {

std::string readDoc(const char* path) {
  std::ifstream in(std::string(ADAPREC_SOURCE_ROOT) + "/" + path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The last cell of the docs table row of `algorithm` ("| `ring` | ... | p |").
std::string docsQCell(const std::string& docs, std::string_view algorithm) {
  const std::string start = "| `" + std::string(algorithm) + "` |";
  const std::size_t row = docs.find(start);
  REQUIRE(row != std::string::npos);
  const std::string line = docs.substr(row, docs.find('\n', row) - row);
  const std::size_t close = line.rfind('|');
  const std::size_t open = line.rfind('|', close - 1);
  std::string cell = line.substr(open + 1, close - open - 1);
  return cell.substr(1, cell.size() - 2);  // the spaces around it
}

int log2Floor(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

// What the docs' Q cell says, read literally: the text the cell must hold and its value at
// (p ranks, N nodes, wire format), q = the largest power of two <= p.
struct DocsQ {
  Algorithm algorithm;
  std::string cell;
  std::function<int(int p, int nodes, Format wire)> value;
};

int twoshotOrRabenseifner(int n) {  // hierarchical's inner algorithm over n nodes
  if (n <= 1) return 0;
  return n <= 8 ? 2 : log2Floor(n) + 1 + ((1 << log2Floor(n)) != n ? 1 : 0);
}

const DocsQ kDocsQ[] = {
    {Algorithm::kRing, "p", [](int p, int, Format) { return p; }},
    {Algorithm::kTwoShot, "2", [](int, int, Format) { return 2; }},
    {Algorithm::kRabenseifner, "log2 q + 1 (+1 if p ≠ q)",
     [](int p, int, Format) { return log2Floor(p) + 1 + ((1 << log2Floor(p)) != p ? 1 : 0); }},
    {Algorithm::kRecursiveDoubling, "log2 q (+2 if p ≠ q)",
     [](int p, int, Format) { return log2Floor(p) + ((1 << log2Floor(p)) != p ? 2 : 0); }},
    {Algorithm::kHierarchical, "inner with N ranks (twoshot: 2, N = 1: 0)",
     [](int, int n, Format) { return twoshotOrRabenseifner(n); }},
    {Algorithm::kNative, "fp32: 0; bf16/fp16: ≤ p", [](int p, int, Format wire) { return wire == Format::kFp32 ? 0 : p; }},
};

}  // namespace

TEST_CASE("each algorithm's declared quantizations are docs/algorithms.md's Q column") {
  const std::string docs = readDoc("docs/algorithms.md");
  for (const DocsQ& row : kDocsQ) {
    INFO(algorithmName(row.algorithm));
    CHECK(docsQCell(docs, algorithmName(row.algorithm)) == row.cell);
    for (const Format wire : {Format::kFp32, Format::kFp16, Format::kFp8, Format::kTable4}) {
      if (row.algorithm == Algorithm::kNative && wire != Format::kFp32 && wire != Format::kFp16) continue;
      CHECK(quantizationsPerValue(row.algorithm, wire, 1, 1) == 0);  // one rank: the input unchanged
      for (int p = 2; p <= 40; ++p) {
        for (const int nodes : {1, 2, 3, 8, 9, 16}) {
          if (nodes > p) continue;
          INFO("p=" << p << " nodes=" << nodes << " wire=" << formatName(wire));
          CHECK(quantizationsPerValue(row.algorithm, wire, p, nodes) == row.value(p, nodes, wire));
          // adaprec-bench's #wrong allows k = P + 1 quantizations whatever the algorithm.
          CHECK(quantizationsPerValue(row.algorithm, wire, p, nodes) <= p + 1);
        }
      }
    }
  }
}

TEST_CASE("the spot values docs/algorithms.md states: twoshot 2, rabenseifner log2 q + 1") {
  CHECK(quantizationsPerValue(Algorithm::kTwoShot, Format::kFp8, 64, 64) == 2);
  CHECK(quantizationsPerValue(Algorithm::kRabenseifner, Format::kFp8, 16, 16) == 5);
  CHECK(quantizationsPerValue(Algorithm::kRabenseifner, Format::kFp8, 12, 12) == 5);
  CHECK(quantizationsPerValue(Algorithm::kRecursiveDoubling, Format::kFp8, 12, 12) == 5);
  CHECK(quantizationsPerValue(Algorithm::kHierarchical, Format::kFp8, 32, 4) == 2);
  CHECK(quantizationsPerValue(Algorithm::kHierarchical, Format::kFp8, 32, 1) == 0);
  CHECK_THROWS(quantizationsPerValue(Algorithm::kAuto, Format::kFp8, 4, 1));
}

TEST_CASE("each format's relative bound is docs/formats.md's 2^-(M+1)") {
  const std::string docs = readDoc("docs/formats.md");
  CHECK(docs.find("2^-8 (bf16), 2^-11 (fp16), 2^-3 (fp8), 2^-4 (e4m3)") != std::string::npos);
  CHECK(formatErrorModel(Format::kBf16).relative == 0x1p-8);
  CHECK(formatErrorModel(Format::kFp16).relative == 0x1p-11);
  CHECK(formatErrorModel(Format::kFp8).relative == 0x1p-3);
  CHECK(formatErrorModel(Format::kFp8s).relative == 0x1p-3);
  CHECK(formatErrorModel(Format::kE4m3).relative == 0x1p-4);
  CHECK(docs.find("the absolute floor is below `amax * 2^-31` (fp8s) and `amax * 2^-17` (e4m3)") !=
        std::string::npos);
  CHECK(formatErrorModel(Format::kFp8s).absoluteFloor == 0x1p-31);
  CHECK(formatErrorModel(Format::kE4m3).absoluteFloor == 0x1p-17);
  for (const Format table : {Format::kTable1, Format::kTable8, Format::kTable3z}) {
    CHECK(formatErrorModel(table).scale == ErrorScale::kChunkMax);
  }
}
