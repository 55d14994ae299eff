#include "bench_row.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "adaprec/error.hpp"

namespace adaprec::bench {

namespace {

std::string format(const char* pattern, auto... values) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, pattern, values...);
  return buffer;
}

double modelError(const BenchRow& row) { return (*row.predictedUs - row.timeUs) / row.timeUs; }

std::ofstream openOutput(const std::string& path, std::ios::openmode mode) {
  errno = 0;
  std::ofstream out(path, std::ios::out | mode);
  ADAPREC_CHECK(out.good(), ErrorCode::kIo, "cannot write " << path << ": " << (errno ? std::strerror(errno) : "open failed"));
  return out;
}

// Flushed and closed before the check: a full disk (or /dev/full) fails only then.
void finishOutput(std::ofstream& out, const std::string& path) {
  errno = 0;
  out.close();
  ADAPREC_CHECK(!out.fail(), ErrorCode::kIo, "error writing " << path << ": " << (errno ? std::strerror(errno) : "write failed"));
}

}  // namespace

std::string tableHeader(bool model) {
  std::string header = format("# %12s %11s %10s %22s %11s %8s %8s %8s %7s %9s %8s %8s", "size", "count",
                              "format", "algo", "time(us)", "algbw", "busbw", "wirebw", "ratio", "maxerr",
                              "#wrong", "speedup");
  if (model) header += format(" %11s %8s", "pred(us)", "moderr");
  header += '\n';
  header += format("# %12s %11s %10s %22s %11s %8s %8s %8s %7s %9s %8s %8s", "(B)", "(elems)", "", "",
                          "", "(GB/s)", "(GB/s)", "(GB/s)", "", "", "", "");
  return header;
}

std::string tableLine(const BenchRow& row, bool model) {
  std::string line = format("  %12zu %11zu %10s %22s %11.1f %8.3f %8.3f %8.3f %7.2f", row.sizeBytes, row.count,
                            row.format.c_str(), row.algo.c_str(), row.timeUs, row.algbw, row.busbw, row.wirebw,
                            row.ratio);
  line += row.maxerr ? format(" %9.2e", *row.maxerr) : format(" %9s", "N/A");
  line += row.wrong ? format(" %8llu", static_cast<unsigned long long>(*row.wrong)) : format(" %8s", "N/A");
  line += format(" %8.2f", row.speedup);
  if (model) {
    line += row.predictedUs ? format(" %11.1f %+7.1f%%", *row.predictedUs, 100.0 * modelError(row))
                            : format(" %11s %8s", "-", "-");
  }
  return line;
}

void writeJson(const std::string& path, const std::vector<BenchRow>& rows) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& row : rows) {
    nlohmann::json object = {
        {"size", row.sizeBytes}, {"count", row.count},   {"format", row.format}, {"algo", row.algo},
        {"time", row.timeUs},    {"algbw", row.algbw},   {"busbw", row.busbw},   {"wirebw", row.wirebw},
        {"ratio", row.ratio},    {"speedup", row.speedup}, {"ranks", row.ranks}, {"nodes", row.nodes},
        {"transport", row.transport}, {"quantizations", row.quantizations},
    };
    // JSON has no infinity (nlohmann writes null, which means "not checked"): a result that was not
    // finite is the string "inf".
    object["maxerr"] = !row.maxerr                  ? nlohmann::json(nullptr)
                       : std::isfinite(*row.maxerr) ? nlohmann::json(*row.maxerr)
                                                    : nlohmann::json("inf");
    object["#wrong"] = row.wrong ? nlohmann::json(*row.wrong) : nlohmann::json(nullptr);
    if (row.predictedUs) {
      object["predicted"] = *row.predictedUs;
      object["model_error"] = modelError(row);
    }
    if (row.encodeUs) {
      object["encode_us"] = *row.encodeUs;
      object["decode_us"] = *row.decodeUs;
      object["transfer_us"] = *row.transferUs;
    }
    list.push_back(std::move(object));
  }
  std::ofstream out = openOutput(path, std::ios::trunc);
  out << list.dump(1) << "\n";
  finishOutput(out, path);
}

void writeCsv(const std::string& path, const std::vector<BenchRow>& rows) {
  std::ofstream out = openOutput(path, std::ios::trunc);
  out << "size,count,format,algo,time,algbw,busbw,wirebw,ratio,maxerr,#wrong,speedup,ranks,nodes,transport,"
         "quantizations,predicted,model_error,encode_us,decode_us,transfer_us\n";
  for (const auto& row : rows) {
    out << row.sizeBytes << ',' << row.count << ',' << row.format << ',' << row.algo << ','
        << format("%.3f,%.6f,%.6f,%.6f,%.4f,", row.timeUs, row.algbw, row.busbw, row.wirebw, row.ratio)
        << (row.maxerr ? format("%.6e", *row.maxerr) : std::string()) << ','
        << (row.wrong ? std::to_string(*row.wrong) : std::string()) << ',' << format("%.4f", row.speedup) << ','
        << row.ranks << ',' << row.nodes << ',' << row.transport << ',' << row.quantizations << ','
        << (row.predictedUs ? format("%.3f,%.6f", *row.predictedUs, modelError(row)) : std::string(",")) << ','
        << (row.encodeUs ? format("%.3f,%.3f,%.3f", *row.encodeUs, *row.decodeUs, *row.transferUs) : std::string(",,"))
        << "\n";
  }
  finishOutput(out, path);
}

std::string outputProblem(const std::string& path) {
  try {
    // Emptied now: a sweep that does not finish (killed at a job's walltime) leaves an empty file, not an
    // earlier run's rows that read as this run's (a cluster template's --json bench-JOB.json).
    std::ofstream out = openOutput(path, std::ios::trunc);
    finishOutput(out, path);
  } catch (const Error& e) {
    return messageForUsers(e);
  }
  return {};
}

}  // namespace adaprec::bench
