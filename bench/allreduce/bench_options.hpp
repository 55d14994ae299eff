// adaprec-bench's command line: nccl-tests' flags (-b -e -f -n -w -c) plus the format/algorithm sweep,
// the transport, and the outputs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "adaprec/communicator.hpp"
#include "adaprec/format.hpp"

namespace adaprec::bench {

enum class TransportKind { kMpi, kLoopback, kNccl };

struct BenchOptions {
  std::size_t minBytes = 4;          // -b: smallest fp32 buffer, bytes
  std::size_t maxBytes = 64 << 20;   // -e: largest fp32 buffer, bytes
  double factor = 2.0;               // -f: size multiplier between rows
  int iterations = 20;               // -n: timed iterations per row
  int warmup = 5;                    // -w: untimed iterations per row
  bool interleave = false;           // --interleave: each size's timed calls go round its rows
  bool check = true;                 // -c: compare with the fp64 reference, count #wrong
  std::vector<FormatSpec> formats;   // --formats
  std::vector<Algorithm> algorithms; // --algos
  TransportKind transport = TransportKind::kMpi;
  bool cudaDevice = false;           // --device cuda
  int loopbackRanks = 4;             // --ranks (loopback only)
  int loopbackRanksPerNode = 0;      // --ranks-per-node (loopback only; 0 = one node)
  bool model = false;                // --model: print the cost model's prediction next to each row
  std::string jsonPath;              // -J
  std::string csvPath;               // --csv
  std::uint64_t seed = 12345;        // --seed: input data
};

// "64", "4K", "16M", "1G" (powers of 1024) -> bytes. Throws Error(kInvalidArgument) otherwise.
std::size_t parseByteSize(const std::string& text);

// "fp8,table1+ef" or "all" (every wire format) -> specs.
std::vector<FormatSpec> parseFormatList(const std::string& text);
// "ring,twoshot", "all" (auto and every algorithm) or "auto" -> algorithms.
std::vector<Algorithm> parseAlgorithmList(const std::string& text);

// The most sizes one sweep may have (-b, -e, -f): a factor barely above 1 would make millions.
inline constexpr double kMaxSweepSizes = 1000;

// The fp32 buffer sizes of the sweep: min, min*f, ... <= max, rounded down to whole floats (>= 1).
std::vector<std::size_t> sweepCounts(const BenchOptions& options);

// Parses argv. Returns false when the program should exit with `exitCode` (--help, or a usage error
// already printed by rank 0).
bool parseBenchOptions(int argc, char** argv, bool printMessages, BenchOptions& options, int& exitCode);

}  // namespace adaprec::bench
