#include "bench_options.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <sstream>

#include <CLI/CLI.hpp>

#include "../support/cli_checks.hpp"
#include "adaprec/error.hpp"

namespace adaprec::bench {

std::size_t parseByteSize(const std::string& text) {
  ADAPREC_CHECK_ARG(!text.empty(), "empty size");
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  ADAPREC_CHECK_ARG(digits > 0 && digits <= 15, "invalid size '" << text << "' (expected e.g. 64, 4K, 16M, 1G)");
  const std::size_t value = std::stoull(text.substr(0, digits));
  const std::string suffix = text.substr(digits);
  std::size_t scale = 1;
  if (suffix == "K" || suffix == "k") scale = std::size_t{1} << 10;
  else if (suffix == "M" || suffix == "m") scale = std::size_t{1} << 20;
  else if (suffix == "G" || suffix == "g") scale = std::size_t{1} << 30;
  else ADAPREC_CHECK_ARG(suffix.empty(), "invalid size suffix in '" << text << "' (use K, M or G)");
  ADAPREC_CHECK_ARG(value <= std::numeric_limits<std::size_t>::max() / scale, "size '" << text << "' is too large");
  return value * scale;
}

namespace {

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (!item.empty()) items.push_back(item);
  }
  ADAPREC_CHECK_ARG(!items.empty(), "empty list '" << text << "'");
  return items;
}

}  // namespace

std::vector<FormatSpec> parseFormatList(const std::string& text) {
  std::vector<FormatSpec> specs;
  if (text == "all") {
    for (Format format : allFormats()) specs.push_back(FormatSpec{Selection::kFixed, format, false});
    return specs;
  }
  // The valid values named in messages are exactly what this option takes (not 'adaptive').
  const std::string valid = validFormatNames() + " (each optionally with +ef), fastest, or all";
  for (const auto& item : splitList(text)) {
    FormatSpec spec;
    try {
      spec = parseFormatSpec(item);
    } catch (const Error&) {
      ADAPREC_FAIL(ErrorCode::kInvalidArgument, "--formats: unknown format '" << item << "'; valid: " << valid);
    }
    ADAPREC_CHECK_ARG(spec.selection != Selection::kAdaptive,
                      "--formats: 'adaptive' is the training controller's choice, not a benchmark format; valid: "
                          << valid);
    specs.push_back(spec);
  }
  return specs;
}

std::vector<Algorithm> parseAlgorithmList(const std::string& text) {
  if (text == "all") {
    auto all = allAlgorithms();
    return {all.begin(), all.end()};
  }
  std::vector<Algorithm> algorithms;
  for (const auto& item : splitList(text)) algorithms.push_back(parseAlgorithm(item));
  return algorithms;
}

std::vector<std::size_t> sweepCounts(const BenchOptions& options) {
  std::vector<std::size_t> counts;
  double bytes = static_cast<double>(options.minBytes);
  while (bytes <= static_cast<double>(options.maxBytes) * (1 + 1e-12)) {
    const std::size_t count = std::max<std::size_t>(1, static_cast<std::size_t>(bytes) / sizeof(float));
    if (counts.empty() || counts.back() != count) counts.push_back(count);
    if (options.factor <= 1.0) break;  // one size only
    bytes *= options.factor;
  }
  return counts;
}

bool parseBenchOptions(int argc, char** argv, bool printMessages, BenchOptions& options, int& exitCode) {
  CLI::App app{
      "adaprec-bench: allreduce time, bandwidth and error per wire format and algorithm, against native "
      "MPI_Allreduce fp32 measured in the same run. Columns and formulas: docs/benchmarks.md."};
  std::string minText = "4";
  std::string maxText = "64M";
  std::string formatsText = "fp32,bf16,fp16,fp8,table4,table2,table1";
  std::string algosText = "auto";
  std::string transportText = "mpi";
  std::string deviceText = "host";
  int check = 1;
  app.add_option("-b,--minbytes", minText, "smallest fp32 buffer in bytes (K/M/G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", maxText, "largest fp32 buffer in bytes (K/M/G suffixes)")->capture_default_str();
  app.add_option("-f,--stepfactor", options.factor,
                 "size multiplier between rows, > 1: rows at -b, -b*f, -b*f^2, ... up to -e (ignored when -b = -e)")
      ->check(numberCheck(1, std::numeric_limits<double>::infinity(), false))
      ->capture_default_str();
  app.add_option("-n,--iters", options.iterations, "timed iterations per row")
      ->check(integerAtLeast(1))->capture_default_str();
  app.add_option("-w,--warmup_iters", options.warmup, "untimed warm-up iterations per row")
      ->check(integerAtLeast(0))->capture_default_str();
  app.add_flag("--interleave", options.interleave,
               "time each size's rows in rounds, one call of every row per round (after every row's warm-up and "
               "check; each round starts one row later), so that the machine's load changes reach every row alike");
  app.add_option("-c,--check", check, "1: compare with the fp64 reference and count #wrong; 0: skip")
      ->check(numberCheck(0, 1, true))->capture_default_str();
  app.add_option("--formats", formatsText, "comma list of formats (fp8, table1+ef, fastest, ...) or 'all'")
      ->capture_default_str();
  app.add_option("--algos", algosText, "comma list of algorithms, 'auto' or 'all'")->capture_default_str();
  app.add_option("--transport", transportText, "mpi | loopback | nccl")
      ->check(CLI::IsMember({"mpi", "loopback", "nccl"}))->capture_default_str();
  app.add_option("--device", deviceText,
                 "host | cuda (buffers on the GPU through the device seam; needs a -Dcuda=enabled build and a GPU "
                 "per rank, exits 77 without one)")->check(CLI::IsMember({"host", "cuda"}))->capture_default_str();
  app.add_option("--ranks", options.loopbackRanks, "ranks (threads) for --transport loopback")
      ->check(integerAtLeast(1))->capture_default_str();
  app.add_option("--ranks-per-node", options.loopbackRanksPerNode,
                 "loopback: emulate nodes of this many consecutive ranks (0: one node)")
      ->check(integerAtLeast(0))->capture_default_str();
  app.add_flag("--model", options.model, "predict each row's time with the alpha-beta + codec cost model");
  app.add_option("-J,--json", options.jsonPath, "write the rows as a JSON list to this file");
  app.add_option("--csv", options.csvPath, "write the rows as CSV to this file");
  app.add_option("--seed", options.seed, "seed of the input data")
      ->check(integerAtLeast(0, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    options.minBytes = parseByteSize(minText);
    options.maxBytes = parseByteSize(maxText);
    ADAPREC_CHECK_ARG(options.minBytes >= 1 && options.minBytes <= options.maxBytes,
                      "-b must be between 1 and -e (got -b " << minText << " -e " << maxText << ")");
    // MPI_Allreduce's count is an int: at most 2^31 - 1 floats.
    ADAPREC_CHECK_ARG(options.maxBytes / sizeof(float) <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
                      "-e must be below 8G (MPI counts are int: at most 2^31 - 1 floats)");
    // -f 1 with -b < -e would print the -b row alone and stop, as if the sweep were broken.
    ADAPREC_CHECK_ARG(options.factor > 1.0 || options.minBytes == options.maxBytes,
                      "-f " << options.factor << " never grows the size from -b " << minText << " towards -e "
                            << maxText << ": the sweep multiplies the size by -f per row, so use -f > 1 (e.g. 2), "
                            << "or -b = -e for one size");
    // A factor barely above 1 would make rows without end (or none that grow: a hang).
    const double sizes = options.minBytes == options.maxBytes
                             ? 1
                             : std::log(static_cast<double>(options.maxBytes) / static_cast<double>(options.minBytes)) /
                                   std::log(options.factor);
    ADAPREC_CHECK_ARG(sizes <= kMaxSweepSizes, "-f " << std::setprecision(17) << options.factor << std::setprecision(6) << " makes about " << std::ceil(sizes)
                                                      << " sizes from -b " << minText << " to -e " << maxText
                                                      << "; at most " << kMaxSweepSizes << " (use a larger -f)");
    ADAPREC_CHECK_ARG(app.count("--json") == 0 || !options.jsonPath.empty(), "-J/--json needs a file name");
    ADAPREC_CHECK_ARG(app.count("--csv") == 0 || !options.csvPath.empty(), "--csv needs a file name");
    ADAPREC_CHECK_ARG(options.jsonPath.empty() || options.jsonPath != options.csvPath,
                      "-J and --csv name the same file " << options.jsonPath << ": the CSV would replace the JSON");
    // Under mpirun the ranks and nodes are the job's (ADAPREC_RANKS_PER_NODE groups them): these two
    // would be ignored without a word, the header still naming the job's.
    ADAPREC_CHECK_ARG(transportText == "loopback" || (app.count("--ranks") == 0 && app.count("--ranks-per-node") == 0),
                      "--ranks and --ranks-per-node are for --transport loopback; under mpirun the ranks are -np's "
                      "(and ADAPREC_RANKS_PER_NODE groups them into nodes)");
    options.formats = parseFormatList(formatsText);
    options.algorithms = parseAlgorithmList(algosText);
    options.check = check != 0;
    options.transport = transportText == "mpi"        ? TransportKind::kMpi
                        : transportText == "loopback" ? TransportKind::kLoopback
                                                      : TransportKind::kNccl;
    options.cudaDevice = deviceText == "cuda";
  } catch (const CLI::ParseError& e) {
    exitCode = printMessages ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    if (exitCode != 0) exitCode = 2;
    return false;
  } catch (const Error& e) {
    if (printMessages) std::fprintf(stderr, "adaprec-bench: %s\n", adaprec::messageForUsers(e).c_str());
    exitCode = 2;
    return false;
  }
  return true;
}

}  // namespace adaprec::bench
