// The allreduce timeline (ADAPREC_TIMELINE, CommunicatorOptions::timelinePath): a Chrome Trace Event
// Format file per rank, `<path>.rank<N>.json`, holding one complete event ("ph":"X") per allreduce call
// and nested ones for its agreement check and every encode, decode, decodeAdd and transfer wait, and
// instant events ("ph":"i") that callers above the engine add (the precision controller's decisions).
// docs/timeline.md describes the file.
//
// Events are buffered in memory and written when the buffer holds kFlushEvents events, when an event
// arrives kFlushSeconds or more after the last write, by a background thread of the process every
// kFlushSeconds while events wait (a rank idle in an evaluation, or stuck, has written what it did
// before), when an allreduce fails (the Communicator records an "allreduce error" instant and flushes
// before the error leaves it), when a Communicator using the file is destroyed and at process exit
// (also without MPI_Finalize, from a Communicator never freed), so memory stays bounded and a killed
// rank leaves a file that is readable up to its last write (at most the last second lost): the file is
// a JSON array written one event per line, and its closing bracket is only written at process exit
// (the Trace Event Format allows an unterminated array). A write that fails (a full disk) is reported
// once on stderr, the file cut back to its last whole write, and nothing more is written to it. One
// Timeline per file per process, shared by every Communicator of that rank and path, thread-safe;
// `tid` numbers the threads recording into the file in the order of their first event (0, 1, ...). Timestamps are
// fast-clock ticks (communicator/fast_clock.hpp), converted to microseconds from a per-process origin
// when written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "adaprec/communicator.hpp"

namespace adaprec::detail {

class Timeline {
 public:
  enum class Kind : std::uint8_t { kAllreduce, kAgreement, kEncode, kDecode, kDecodeAdd, kWait, kInstant };
  static constexpr std::size_t kFlushEvents = 4096;
  static constexpr double kFlushSeconds = 1.0;
  // Formatted events are written in pieces of whole lines of at most this size, from a buffer reserved
  // once: recording and writing spans and calls allocate nothing after the first event of each thread
  // (a signal handler that fork()s or exit()s must not find this thread inside malloc: glibc's fork()
  // then waits for ever on the allocator's lock the interrupted frame holds).
  static constexpr std::size_t kWriteBytes = 64 * 1024;

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
  // Writes the buffered events to the file.
  void flush();
  // flush() when events wait and the last write is kFlushSeconds old (the background thread's call).
  void flushIfStale();
  // flush(), the closing bracket, and the file closed; later events are dropped. Idempotent.
  void close();
  // The recorder's lock, held across a fork() (pthread_atfork, timeline.cpp) so that no child starts
  // with it taken by a thread it does not have.
  void lockForFork();
  void unlockAfterFork();

  // fd: the file, open for writing and empty; name: its name, for messages.
  Timeline(int fd, std::string name, int rank);
  ~Timeline();  // close()
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

 private:
  struct Event {
    Kind kind;
    std::uint32_t thread;  // the pushing thread's number (the event's tid)
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
  // Appends one formatted line to text_, writing text_ out first when the line would not fit in
  // kWriteBytes; false once a write failed.
  bool appendLine(std::string_view line);

  // Writes text whole at the end of the file; false (after one report, the file cut back to its last
  // whole write and closed for writing) when it cannot.
  bool writeText(std::string_view text);

  // The calling thread's number in this file (0 for the first thread to record here, then 1, ...).
  std::uint32_t threadNumberLocked();

  // The recorder's lock, marked held by this thread while it is (timeline.cpp: for signal handlers).
  struct Held {
    const Timeline* previous;
    std::unique_lock<std::mutex> guard;
    explicit Held(Timeline& t);
    ~Held();
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
  };
  bool lockedForFork_ = false;  // lockForFork took the lock (not when this thread held it already)

  std::mutex mutex_;
  const std::uint64_t serial_;  // unique per Timeline of the process
  std::map<std::thread::id, std::uint32_t> threads_;
  std::uint64_t lastWriteTicks_ = 0;
  int fd_;             // -1 once closed or failed
  std::string name_;
  std::uint64_t writtenBytes_ = 0;  // whole writes so far: where a failed one is cut back to
  int pid_;            // the process that opened the file: a forked child (its copy of the buffered
                       // events, its exit) must not write into the parent's file
  int rank_;
  bool first_ = true;
  std::vector<Event> events_;
  std::vector<std::pair<std::string, std::string>> instants_;  // name, args of buffered instant events
  std::string text_;  // formatted lines not yet written; capacity kWriteBytes, reserved once
};

}  // namespace adaprec::detail
