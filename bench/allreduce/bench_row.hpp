// One line of adaprec-bench's output, and the three ways it is written: the aligned table on stdout
// (nccl-tests style), JSON (-J: a list of objects keyed by column name) and CSV (--csv).
// Formulas of the columns: docs/benchmarks.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace adaprec::bench {

struct BenchRow {
  std::size_t sizeBytes = 0;        // size: logical fp32 bytes = 4 * count
  std::size_t count = 0;            // elements
  std::string format;               // wire format ("fp32" for the baseline)
  std::string algo;                 // algorithm that ran (auto resolved: "auto:ring"), or the baseline's name
  double timeUs = 0;                // median over iterations of the max over ranks
  double algbw = 0;                 // GB/s: sizeBytes / time
  double busbw = 0;                 // GB/s: algbw * 2(P-1)/P
  double wirebw = 0;                // GB/s: bytes one rank sent per call (max over ranks) / time
  double ratio = 1;                 // fp32 bytes / encoded bytes the same algorithm sends
  std::optional<double> maxerr;     // max |out - ref| / max |ref|; empty without -c
  std::optional<std::uint64_t> wrong;  // #wrong summed over ranks; empty without -c
  double speedup = 1;               // baseline time / this row's time
  int ranks = 1;
  int nodes = 1;
  int quantizations = 0;            // times a value is quantized (the library's table; 0 when lossless)
  std::string transport;
  std::optional<double> predictedUs;  // --model
  // Where an AdaPrec row's time went (its last timed call, max over ranks; JSON/CSV only): encode,
  // decode/decodeAdd, blocked on transfers. Empty for the baseline.
  std::optional<double> encodeUs;
  std::optional<double> decodeUs;
  std::optional<double> transferUs;
};

// Column header and the row, aligned; `model` adds the predicted and model-error columns.
std::string tableHeader(bool model);
std::string tableLine(const BenchRow& row, bool model);

// Writes every row to path as JSON / CSV; throws Error(kIo) when the file cannot be written.
void writeJson(const std::string& path, const std::vector<BenchRow>& rows);
void writeCsv(const std::string& path, const std::vector<BenchRow>& rows);

// "" when path can be written (it is created if missing and keeps what it holds), else the one-line
// reason. Asked before the sweep, so that a long run does not end with results it cannot keep.
std::string outputProblem(const std::string& path);

}  // namespace adaprec::bench
