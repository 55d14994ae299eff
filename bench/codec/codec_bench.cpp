// adaprec-codec-bench: host codec throughput per format against memcpy of the same buffer, measured
// in the same run; plus each format's error on the data and, for Table-N, the cost of building the
// table and its deviation from exact percentiles.
//
// Throughput counts the bytes each operation must read and write:
//   memcpy      : 4n read + 4n written
//   encode      : 4n read + E written            (E = encodedBytes)
//   decode      : E read + 4n written
//   decodeAdd   : E + 4n read + 4n written
// and "xmemcpy" is that throughput divided by memcpy's (8n bytes / memcpy time).
//
// --device cuda (runOnDevice, device_bench.hpp) times the same operations on device buffers through the
// CUDA device codec, against a device-to-device copy and cub::DeviceRadixSort of the same buffer.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "../support/cli_checks.hpp"
#include "../support/cuda_probe.hpp"
#include "../support/gradient_data.hpp"
#include "../support/interleaved_timing.hpp"
#include "adaprec/codec.hpp"
#include "adaprec/error.hpp"
#include "codec/host_kernels.hpp"
#include "codec/table_build.hpp"
#include "device_bench.hpp"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double medianSeconds(int reps, F&& f) {
  std::vector<double> t;
  f();  // warm-up: page faults, caches
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

using adaprec::bench::interleavedMedians;

struct ErrorStats {
  double relRms;      // ||x - y|| / ||x||
  double flushed;     // fraction of non-zero inputs that decode to zero
  double signFlips;   // fraction of elements whose sign bit changed (must be 0)
};

ErrorStats errorStats(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  std::size_t nonzero = 0, flushed = 0, flips = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    err += d * d;
    ref += static_cast<double>(x[i]) * x[i];
    if (x[i] != 0.0f) {
      ++nonzero;
      flushed += y[i] == 0.0f;
    }
    flips += std::signbit(x[i]) != std::signbit(y[i]);
  }
  return {std::sqrt(err / ref), nonzero ? double(flushed) / nonzero : 0.0, double(flips) / x.size()};
}

// --device cuda: the rows of the host run, on the device (CUDA event times), with the copy and the
// radix sort as baselines and the chunk checked byte for byte against the host codec's.
int runOnDevice(const std::vector<adaprec::Format>& formats, std::size_t count, int reps, std::uint64_t seed,
                const std::string& jsonPath) {
  using adaprec::bench::CudaAvailability;
  const adaprec::bench::CudaProbe probe = adaprec::bench::selectCudaDevice();
  if (probe.availability == CudaAvailability::kNotBuilt) {
    std::fprintf(stderr, "adaprec-codec-bench: --device cuda: %s\n", probe.description.c_str());
    return 1;
  }
  if (probe.availability == CudaAvailability::kNoDevice) {
    std::fprintf(stderr, "adaprec-codec-bench: --device cuda: %s; nothing timed (exit 77: skipped)\n",
                 probe.description.c_str());
    return adaprec::bench::kSkippedExit;
  }
  const std::vector<float> x = adaprec::bench::gradientLikeData(count, seed);
  const auto device = adaprec::bench::makeCudaCodecBench(x);
  const double fp32Bytes = 4.0 * count;
  double copySeconds = 0, sortSeconds = 0;
  device->timeBaselines(reps, copySeconds, sortSeconds);
  const double copyRate = 2 * fp32Bytes / copySeconds;
  const double sortRate = 2 * fp32Bytes / sortSeconds;
  std::printf("# %zu elements (%.4g MiB fp32), gradient-like data, seed %llu, CUDA %s\n", count,
              fp32Bytes / (1 << 20), static_cast<unsigned long long>(seed), probe.description.c_str());
  std::printf("# device time (CUDA events), median of %d; GB/s = bytes read + written / time; x = GB/s / copy's GB/s\n",
              reps);
  std::printf("# baselines, same buffer, same run: cudaMemcpy D2D %.1f GB/s; cub::DeviceRadixSort::SortKeys "
              "%.1f GB/s (8n bytes / time) = %.3f x copy\n",
              copyRate / 1e9, sortRate / 1e9, sortRate / copyRate);
  std::printf("%-7s %6s %8s %9s %7s %9s %7s %9s %8s %7s %9s\n", "format", "ratio", "copy", "enc GB/s", "enc x",
              "dec GB/s", "dec x", "dAdd GB/s", "decAdd x", "=host", "relRMS");

  nlohmann::json rows = nlohmann::json::array();
  std::vector<unsigned char> deviceChunk, hostChunk;
  std::vector<float> decoded;
  std::vector<std::string> differing;
  for (adaprec::Format format : formats) {
    const std::size_t bytes = adaprec::encodedBytes(format, count);
    const adaprec::bench::DeviceFormatTiming t = device->timeFormat(format, reps);
    device->fetch(deviceChunk, decoded);
    hostChunk.resize(bytes);
    adaprec::encode(format, x.data(), count, hostChunk.data(), bytes);
    const bool sameBytes = deviceChunk == hostChunk;
    const ErrorStats err = errorStats(x, decoded);
    const std::string name(adaprec::formatName(format));
    if (!sameBytes) differing.push_back(name);
    const double rowCopyRate = 2 * fp32Bytes / t.copySeconds;
    const double encRate = (fp32Bytes + bytes) / t.encodeSeconds;
    const double decRate = (fp32Bytes + bytes) / t.decodeSeconds;
    const double decAddRate = (2 * fp32Bytes + bytes) / t.decodeAddSeconds;
    std::printf("%-7s %6.2f %8.1f %9.1f %7.3f %9.1f %7.3f %9.1f %8.3f %7s %9.3g\n", name.c_str(), fp32Bytes / bytes,
                rowCopyRate / 1e9, encRate / 1e9, encRate / rowCopyRate, decRate / 1e9, decRate / rowCopyRate,
                decAddRate / 1e9, decAddRate / rowCopyRate, sameBytes ? "yes" : "NO", err.relRms);
    rows.push_back({{"format", name}, {"device", "cuda"}, {"count", count}, {"ratio", fp32Bytes / bytes},
                    {"copy_s", t.copySeconds}, {"encode_s", t.encodeSeconds}, {"decode_s", t.decodeSeconds},
                    {"decode_add_s", t.decodeAddSeconds}, {"encode_x_copy", encRate / rowCopyRate},
                    {"decode_x_copy", decRate / rowCopyRate}, {"decode_add_x_copy", decAddRate / rowCopyRate},
                    {"radix_sort_s", sortSeconds}, {"radix_sort_x_copy", sortRate / copyRate},
                    {"bytes_equal_host", sameBytes}, {"rel_rms", err.relRms}});
  }
  if (!jsonPath.empty()) {
    std::ofstream out(jsonPath);
    ADAPREC_CHECK(out.good(), adaprec::ErrorCode::kIo, "cannot write " << jsonPath);
    out << rows.dump(2) << "\n";
    out.close();  // flushed here: a full disk fails only now
    ADAPREC_CHECK(!out.fail(), adaprec::ErrorCode::kIo, "error writing " << jsonPath);
  }
  if (!differing.empty()) {
    std::string list;
    for (const auto& name : differing) list += (list.empty() ? "" : ", ") + name;
    std::fprintf(stderr, "adaprec-codec-bench: the device chunk differs from the host codec's for: %s\n", list.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"adaprec-codec-bench: host codec throughput vs memcpy (same run), error per format"};
  std::size_t count = std::size_t{64} << 20;
  int reps = 5;
  std::string formatList = "all";
  std::string jsonPath;
  std::uint64_t seed = 1;
  double countOption = static_cast<double>(count);  // as double, so that 1e8 is accepted too
  app.add_option("-n,--count", countOption, "elements in the tensor, a number >= 1 such as 65536 or 1e8 (default 67108864 = 64 Mi; needs about 16 bytes each)")
      ->check(adaprec::bench::numberCheck(1, 1e15, true));
  app.add_option("-r,--reps", reps, "timed repetitions per measurement (median reported)")
      ->check(adaprec::bench::integerAtLeast(1));
  app.add_option("-f,--formats", formatList, "comma-separated formats or 'all'");
  app.add_option("-J,--json", jsonPath, "also write the rows as JSON to this file");
  app.add_option("--seed", seed, "data seed")
      ->check(adaprec::bench::integerAtLeast(0, std::numeric_limits<std::uint64_t>::max()));
  std::string device = "host";
  app.add_option("--device", device,
                 "host: the host codec on host memory; cuda: the CUDA codec on device memory (a -Dcuda=enabled "
                 "build and a GPU; exit 77 without one), against cudaMemcpy and cub::DeviceRadixSort")
      ->check(CLI::IsMember({"host", "cuda"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;  // usage errors exit 2, as adaprec-bench's
  }
  count = static_cast<std::size_t>(countOption);

  std::vector<adaprec::Format> formats;
  if (formatList == "all") {
    formats.assign(adaprec::allFormats().begin(), adaprec::allFormats().end());
  } else {
    std::stringstream ss(formatList);
    for (std::string name; std::getline(ss, name, ',');) formats.push_back(adaprec::parseFormat(name));
    ADAPREC_CHECK_ARG(!formats.empty(), "-f names no format (a comma list, or all)");
  }
  if (device == "cuda") return runOnDevice(formats, count, reps, seed, jsonPath);

  // Three fp32 buffers and the largest encoded chunk (fp32's, 4n + header): refuse what cannot fit
  // before allocating, and name -n if an allocation still fails.
  const double neededBytes = 16.0 * static_cast<double>(count);
  const double physicalBytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  ADAPREC_CHECK_ARG(physicalBytes <= 0 || neededBytes <= physicalBytes,
                    "-n " << count << " needs about " << neededBytes / (1 << 30) << " GiB (three fp32 buffers and the "
                          << "encoded chunk); this machine has " << physicalBytes / (1 << 30) << " GiB: use a smaller -n");
  std::vector<float> x, y, acc;
  try {
    x = adaprec::bench::gradientLikeData(count, seed);
    y.resize(count);
    acc.resize(count);
  } catch (const std::bad_alloc&) {
    ADAPREC_FAIL(adaprec::ErrorCode::kInvalidArgument,
                 "-n " << count << ": cannot allocate the " << neededBytes / (1 << 30) << " GiB it needs; use a smaller -n");
  }
  const double fp32Bytes = 4.0 * count;
  std::printf("# %zu elements (%.4g MiB fp32), gradient-like data, seed %llu, host kernels: %s\n", count,
              fp32Bytes / (1 << 20), static_cast<unsigned long long>(seed), adaprec::codec::hostKernels().isa);
  std::printf("# x = codec throughput / memcpy throughput, memcpy timed in turns with each format's operations\n");
  std::printf("%-7s %6s %8s %9s %7s %7s %8s %9s %9s %10s %8s\n", "format", "ratio", "memcpy", "enc GB/s", "enc x",
              "dec x", "decAdd x", "enc+dec x", "relRMS", "flushed0", "signflip");

  nlohmann::json rows = nlohmann::json::array();
  for (adaprec::Format format : formats) {
    const std::size_t bytes = adaprec::encodedBytes(format, count);
    std::vector<unsigned char> chunk;
    try {
      chunk.resize(bytes);
    } catch (const std::bad_alloc&) {
      ADAPREC_FAIL(adaprec::ErrorCode::kInvalidArgument,
                   "-n " << count << ": cannot allocate the " << bytes << "-byte encoded chunk; use a smaller -n");
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    const std::vector<double> seconds = interleavedMedians(
        reps, {[&] { std::memcpy(y.data(), x.data(), count * sizeof(float)); },
               [&] { adaprec::encode(format, x.data(), count, chunk.data(), bytes); },
               [&] { adaprec::decode(format, chunk.data(), bytes, y.data(), count); },
               [&] { adaprec::decodeAdd(format, chunk.data(), bytes, acc.data(), count); }});
    const double memcpySeconds = seconds[0], enc = seconds[1], dec = seconds[2], decAdd = seconds[3];
    const double memcpyRate = 2 * fp32Bytes / memcpySeconds;
    adaprec::decode(format, chunk.data(), bytes, y.data(), count);
    const ErrorStats err = errorStats(x, y);

    const double encRate = (fp32Bytes + bytes) / enc;
    const double decRate = (fp32Bytes + bytes) / dec;
    const double decAddRate = (2 * fp32Bytes + bytes) / decAdd;
    const double roundTripRate = 2 * (fp32Bytes + bytes) / (enc + dec);
    const std::string name(adaprec::formatName(format));
    std::printf("%-7s %6.2f %8.2f %9.2f %7.2f %7.2f %8.2f %9.2f %9.3g %10.4f %8.4f\n", name.c_str(), fp32Bytes / bytes,
                memcpyRate / 1e9, encRate / 1e9, encRate / memcpyRate, decRate / memcpyRate, decAddRate / memcpyRate,
                roundTripRate / memcpyRate, err.relRms, err.flushed, err.signFlips);
    nlohmann::json row = {{"format", name},          {"count", count},
                          {"ratio", fp32Bytes / bytes}, {"encode_s", enc},
                          {"decode_s", dec},          {"decode_add_s", decAdd},
                          {"memcpy_s", memcpySeconds}, {"encode_x_memcpy", encRate / memcpyRate},
                          {"decode_x_memcpy", decRate / memcpyRate}, {"decode_add_x_memcpy", decAddRate / memcpyRate},
                          {"roundtrip_x_memcpy", roundTripRate / memcpyRate}, {"rel_rms", err.relRms},
                          {"flushed_to_zero", err.flushed}, {"sign_flips", err.signFlips}};
    if (const unsigned bits = adaprec::tableBits(format); bits != 0) {
      // Table build cost and its deviation from the exact percentiles of the whole tensor.
      std::vector<float> sampled(std::size_t{1} << (bits - 1)), exact(sampled.size());
      const double build = medianSeconds(reps, [&] { adaprec::codec::buildTable(format, x.data(), count, sampled.data()); });
      adaprec::codec::buildExactTable(format, x.data(), count, exact.data());
      double maxDev = 0;
      for (std::size_t k = 0; k < exact.size(); ++k) {
        if (exact[k] > 0) maxDev = std::max(maxDev, std::abs(double(sampled[k]) - exact[k]) / exact[k]);
      }
      row["table_build_s"] = build;
      row["table_max_rel_dev_vs_exact"] = maxDev;
      std::printf("        table build %.3f ms (%.2f%% of encode), max relative deviation from exact percentiles %.4f\n",
                  build * 1e3, 100 * build / enc, maxDev);
    }
    rows.push_back(row);
  }
  if (!jsonPath.empty()) {
    std::ofstream out(jsonPath);
    ADAPREC_CHECK(out.good(), adaprec::ErrorCode::kIo, "cannot write " << jsonPath);
    out << rows.dump(2) << "\n";
    out.close();  // flushed here: a full disk fails only now
    ADAPREC_CHECK(!out.fail(), adaprec::ErrorCode::kIo, "error writing " << jsonPath);
  }
  ADAPREC_CHECK(adaprec::standardStreamsComplete(), adaprec::ErrorCode::kIo,
                "cannot write the results to standard output");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "adaprec-codec-bench: %s\n", adaprec::messageForUsers(e).c_str());
  const auto* error = dynamic_cast<const adaprec::Error*>(&e);
  return error != nullptr && error->code() == adaprec::ErrorCode::kInvalidArgument ? 2 : 1;
}
