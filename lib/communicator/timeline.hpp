// The allreduce timeline (ADAPREC_TIMELINE, CommunicatorOptions::timelinePath): a Chrome Trace Event
// Format file per rank, `<path>.rank<N>.json`, holding one complete event ("ph":"X") per allreduce call
// and nested ones for its agreement check and every encode, decode, decodeAdd and transfer wait, and
// instant events ("ph":"i") that callers above the engine add (the precision controller's decisions).
// docs/timeline.md describes the file.
//
// Events are buffered in memory and written when the buffer holds kFlushEvents events, when an event
// arrives kFlushSeconds or more after the last write, when an allreduce fails (the Communicator records
// an "allreduce error" instant and flushes before the error leaves it), when a Communicator using the
// file is destroyed and at process exit, so memory stays bounded and a killed rank leaves a file that
// is readable up to its last flush (a job that aborts on an error, or kills its ranks when another
// failed, loses at most the last second): the file is a JSON array written one event
// per line, and its closing bracket is only written at process exit (the Trace Event Format allows an
// unterminated array). One Timeline per file per process, shared by every Communicator of that rank
// and path, thread-safe. Timestamps are fast-clock ticks (communicator/fast_clock.hpp), converted to
// microseconds from a per-process origin when written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adaprec/communicator.hpp"

namespace adaprec::detail {

class Timeline {
 public:
  enum class Kind : std::uint8_t { kAllreduce, kAgreement, kEncode, kDecode, kDecodeAdd, kWait, kInstant };
  static constexpr std::size_t kFlushEvents = 4096;
  static constexpr double kFlushSeconds = 1.0;

  // The shared recorder of `path + ".rank" + rank + ".json"`; the file is created (truncated) the first
  // time this process opens it. Throws Error(kInvalidArgument) when it cannot be created.
  static std::shared_ptr<Timeline> open(const std::string& path, int rank);
  static std::string fileName(const std::string& path, int rank);

  // A span on this rank's track (a step or the agreement check).
  void span(Kind kind, std::uint64_t startTicks, std::uint64_t endTicks);
  // The span of a whole allreduce call, with its arguments.
  void call(std::uint64_t startTicks, std::uint64_t endTicks, const AllreduceStats& stats);
  // An instant event ("ph":"i", thread scope) at this moment on this rank's track. `name` is plain text
  // (no quote, backslash or control character: Error(kInvalidArgument) otherwise); `argsJson` is the
  // one-line text of a JSON object (e.g. nlohmann::json::dump()), written as the event's "args" (empty: none). Not for the hot path: it copies
  // both strings.
  void instant(const std::string& name, const std::string& argsJson);
  // An "allreduce error" instant with the error's code, message and the call's count, then flush():
  // the failing call is the one event a run that ends on the error must not lose.
  void failure(std::string_view code, std::string_view message, std::size_t count);
  // Writes the buffered events to the file (and fflush).
  void flush();

  Timeline(std::FILE* file, int rank);
  ~Timeline();  // flushes and writes the closing bracket
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

 private:
  struct Event {
    Kind kind;
    std::uint64_t start;  // kInstant: `count` indexes instants_
    std::uint64_t end;
    Format format;
    Algorithm algorithm;
    std::size_t count;
    std::size_t wireBytes;
    std::size_t fp32Bytes;
  };
  void push(const Event& event);
  void writeLocked();

  void pushLocked(const Event& event);

  std::mutex mutex_;
  std::uint64_t lastWriteTicks_ = 0;
  std::FILE* file_;
  int rank_;
  bool first_ = true;
  std::vector<Event> events_;
  std::vector<std::pair<std::string, std::string>> instants_;  // name, args of buffered instant events
  std::string text_;
};

}  // namespace adaprec::detail
