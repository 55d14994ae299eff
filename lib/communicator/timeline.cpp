#include "communicator/timeline.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <map>

#include "adaprec/error.hpp"
#include "communicator/fast_clock.hpp"

namespace adaprec::detail {
namespace {

// Every file this process has opened, kept until exit so that a later Communicator of the same rank
// and path appends to it instead of truncating it; destroyed (flushed, bracket closed) at exit.
struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Timeline>> open;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

// The per-process origin of the timestamps: the first timeline opened.
std::uint64_t originTicks() {
  static const std::uint64_t origin = fastClockTicks();
  return origin;
}

const char* kindName(Timeline::Kind kind) {
  switch (kind) {
    case Timeline::Kind::kAllreduce: return "allreduce";
    case Timeline::Kind::kAgreement: return "agreement";
    case Timeline::Kind::kEncode: return "encode";
    case Timeline::Kind::kDecode: return "decode";
    case Timeline::Kind::kDecodeAdd: return "decodeAdd";
    case Timeline::Kind::kWait: return "wait";
    case Timeline::Kind::kInstant: return "instant";
  }
  return "unknown";
}

double microsFromOrigin(std::uint64_t ticks) {
  const std::uint64_t origin = originTicks();
  const double micros = static_cast<double>(ticks - origin) * fastClockSecondsPerTick() * 1e6;
  return ticks >= origin ? micros : -static_cast<double>(origin - ticks) * fastClockSecondsPerTick() * 1e6;
}

}  // namespace

std::string Timeline::fileName(const std::string& path, int rank) {
  return path + ".rank" + std::to_string(rank) + ".json";
}

std::shared_ptr<Timeline> Timeline::open(const std::string& path, int rank) {
  originTicks();
  const std::string name = fileName(path, rank);
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.open.find(name);
  if (it != r.open.end()) return it->second;
  std::FILE* file = std::fopen(name.c_str(), "w");
  ADAPREC_CHECK_ARG(file != nullptr, "timeline file " << name << " cannot be created: " << std::strerror(errno));
  auto timeline = std::make_shared<Timeline>(file, rank);
  r.open.emplace(name, timeline);
  return timeline;
}

Timeline::Timeline(std::FILE* file, int rank) : lastWriteTicks_(fastClockTicks()), file_(file), rank_(rank) {
  events_.reserve(kFlushEvents);
  std::fputs("[\n", file_);
  std::fflush(file_);
}

Timeline::~Timeline() {
  const std::lock_guard<std::mutex> lock(mutex_);
  writeLocked();
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

void Timeline::push(const Event& event) {
  const std::lock_guard<std::mutex> lock(mutex_);
  pushLocked(event);
}

void Timeline::pushLocked(const Event& event) {
  events_.push_back(event);
  // Events are pushed when they end, so event.end is now (instants: their moment).
  if (events_.size() >= kFlushEvents || fastClockSeconds(lastWriteTicks_, event.end) >= kFlushSeconds)
    writeLocked();
}

void Timeline::span(Kind kind, std::uint64_t startTicks, std::uint64_t endTicks) {
  push(Event{kind, startTicks, endTicks, Format::kFp32, Algorithm::kNative, 0, 0, 0});
}

void Timeline::call(std::uint64_t startTicks, std::uint64_t endTicks, const AllreduceStats& stats) {
  push(Event{Kind::kAllreduce, startTicks, endTicks, stats.format, stats.algorithm, stats.count, stats.wireBytes,
             stats.fp32Bytes});
}

void Timeline::instant(const std::string& name, const std::string& argsJson) {
  for (const char c : name) {
    ADAPREC_CHECK_ARG(c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20,
                      "timeline event name '" << name << "' must not hold quotes, backslashes or control characters");
  }
  // One event per line is what keeps a killed rank's file readable (docs/timeline.md).
  ADAPREC_CHECK_ARG(argsJson.find('\n') == std::string::npos, "timeline event arguments must be one line");
  const std::uint64_t now = fastClockTicks();
  const std::lock_guard<std::mutex> lock(mutex_);
  instants_.emplace_back(name, argsJson);
  pushLocked(Event{Kind::kInstant, now, now, Format::kFp32, Algorithm::kNative, instants_.size() - 1, 0, 0});
}

namespace {

// `text` as a JSON string literal, quotes included (an error message may hold anything).
std::string jsonString(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

void Timeline::failure(std::string_view code, std::string_view message, std::size_t count) {
  instant("allreduce error", "{\"code\":" + jsonString(code) + ",\"message\":" + jsonString(message) +
                                 ",\"count\":" + std::to_string(count) + "}");
  flush();
}

void Timeline::flush() {
  const std::lock_guard<std::mutex> lock(mutex_);
  writeLocked();
}

void Timeline::writeLocked() {
  lastWriteTicks_ = fastClockTicks();
  if (events_.empty()) return;
  text_.clear();
  char line[512];
  for (const Event& e : events_) {
    const double ts = microsFromOrigin(e.start);
    if (e.kind == Kind::kInstant) {
      const auto& [name, args] = instants_[e.count];
      const int n = std::snprintf(line, sizeof line, "%s{\"name\":\"", first_ ? "" : ",");
      text_.append(line, static_cast<std::size_t>(n));
      text_ += name;
      const int m = std::snprintf(line, sizeof line, "\",\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":0,\"ts\":%.3f",
                                  rank_, ts);
      text_.append(line, static_cast<std::size_t>(m));
      if (!args.empty()) text_ += ",\"args\":" + args;
      text_ += "}\n";
      first_ = false;
      continue;
    }
    const double dur = fastClockSeconds(e.start, e.end) * 1e6;
    // Every event after the first starts with the comma, so the file up to any flush is a JSON array
    // that lacks only its closing bracket.
    int n = std::snprintf(line, sizeof line, "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f",
                          first_ ? "" : ",", kindName(e.kind), rank_, ts, dur);
    first_ = false;
    text_.append(line, static_cast<std::size_t>(n));
    if (e.kind == Kind::kAllreduce) {
      const std::string format(formatName(e.format));
      const std::string algorithm(algorithmName(e.algorithm));
      n = std::snprintf(line, sizeof line,
                        ",\"args\":{\"format\":\"%s\",\"algorithm\":\"%s\",\"count\":%zu,\"wireBytes\":%zu,"
                        "\"fp32Bytes\":%zu}",
                        format.c_str(), algorithm.c_str(), e.count, e.wireBytes, e.fp32Bytes);
      text_.append(line, static_cast<std::size_t>(n));
    }
    text_ += "}\n";
  }
  events_.clear();
  instants_.clear();
  // One write per flush: a rank killed between flushes leaves whole lines.
  std::fwrite(text_.data(), 1, text_.size(), file_);
  std::fflush(file_);
}

}  // namespace adaprec::detail
