#include "communicator/timeline.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <system_error>
#include <thread>
#include <utility>

#include "adaprec/error.hpp"
#include "communicator/fast_clock.hpp"

namespace adaprec::detail {
namespace {

// What this thread holds: a signal handler that calls fork() or exit() (crash reporters, clean-up on
// SIGTERM) may interrupt the thread inside a recorder or in Timeline::open; the fork handlers and the
// exit-time close must then not wait for a lock the interrupted frame below them holds (they did: the
// process hung in 3 of 3 fork-from-handler runs and 4 of 10 exit-from-handler runs).
thread_local const Timeline* tlsHeldTimeline = nullptr;
thread_local bool tlsHoldsRegistry = false;

// The registry's lock, marked held by this thread from before it is taken until after it is released,
// so that a handler running at any instant between sees the mark (a mark set after the lock, or cleared
// before the unlock, left a window: a fork from a handler there hung on the unlocking mutex).
struct RegistryLock {
  std::unique_lock<std::mutex> guard;
  explicit RegistryLock(std::mutex& m) : guard((tlsHoldsRegistry = true, m)) {}
  ~RegistryLock() {
    guard.unlock();
    tlsHoldsRegistry = false;
  }
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;
};

// Every file this process has opened, kept until exit so that a later Communicator of the same rank
// and path appends to it instead of truncating it; closed (flushed, bracket written) at exit, also
// those a Communicator never freed still holds (the preload library's on MPI_COMM_WORLD when a program
// returns without MPI_Finalize). Its thread writes events that wait while no new ones arrive.
struct Registry {
  std::mutex mutex;
  std::condition_variable wake;
  std::map<std::string, std::shared_ptr<Timeline>> open;
  std::thread flusher;  // joined at exit; replaced, never touched, in a forked child
  bool stopping = false;
  bool lockedForFork = false;  // beforeFork took the lock (not when this thread held it already)

  void startFlusher() {  // under mutex
    if (flusher.joinable()) return;
    static std::once_flag forkHandlers;
    std::call_once(forkHandlers, [] { ::pthread_atfork(&beforeFork, &afterForkInParent, &afterForkInChild); });
    // The thread takes no signal: a process-directed one goes to the program's threads, as before.
    sigset_t all, previous;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &previous);
    try {
      flusher = std::thread([this] { flushLoop(); });
    } catch (const std::system_error&) {
      // No thread: events are still written as they arrive, on errors and at exit.
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  void flushLoop() {
    // Named, so that a user who sees a thread in gdb, top -H or a core dump knows whose it is (at most
    // 15 characters).
    ::pthread_setname_np(::pthread_self(), "adaprec-timeln");
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      // A quarter of the period: an event waits at most about kFlushSeconds and a quarter.
      wake.wait_for(lock, std::chrono::duration<double>(Timeline::kFlushSeconds / 4));
      if (stopping) break;
      std::vector<std::shared_ptr<Timeline>> timelines;
      for (const auto& entry : open) timelines.push_back(entry.second);
      lock.unlock();
      try {
        for (const auto& timeline : timelines) timeline->flushIfStale();
      } catch (...) {
        // Out of memory formatting events: they are written with the next write, or dropped at exit.
      }
      timelines.clear();
      lock.lock();
    }
  }

  // fork() from a thread of the program while this process's flusher (or another thread) holds a lock
  // of the timelines would leave the child a lock no thread of it releases: the locks are taken before
  // the fork and released on both sides. The child has no flusher thread.
  // A lock this very thread holds (fork() from a signal handler) is not taken again: the frame the
  // handler interrupted releases it on both sides when it resumes.
  static void beforeFork() {
    Registry& r = registry();
    if (tlsHoldsRegistry) return;  // inside Timeline::open: the map may be changing, leave it be
    r.mutex.lock();
    r.lockedForFork = true;
    for (const auto& entry : r.open) entry.second->lockForFork();
  }
  static void unlockAfterFork(Registry& r) {
    if (!r.lockedForFork) return;
    for (const auto& entry : r.open) entry.second->unlockAfterFork();
    r.lockedForFork = false;
    r.mutex.unlock();
  }
  static void afterForkInParent() { unlockAfterFork(registry()); }
  static void afterForkInChild() {
    Registry& r = registry();
    unlockAfterFork(r);
    // The parent's thread object names a thread the child does not have: a fresh, empty one over it
    // (neither destroyed, which would terminate, nor joined; nothing allocated, nothing leaked).
    new (&r.flusher) std::thread();
    // The condition variable holds the parent's flusher as a waiter, which no thread of the child will
    // ever be: destroying it at the child's exit waited forever (glibc). A fresh one over it.
    new (&r.wake) std::condition_variable();
  }

  ~Registry() {
    // exit() from a signal handler that interrupted this thread in Timeline::open: the map may be half
    // changed and its lock is ours; leave the files as their last writes left them.
    if (tlsHoldsRegistry) {
      if (flusher.joinable()) flusher.detach();
      return;
    }
    {
      const RegistryLock lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    // Interrupted inside a recorder, this thread holds its lock, on which the flusher may be waiting:
    // not joined then (the process is ending), and that recorder is not closed (Timeline::close).
    if (flusher.joinable()) {
      if (tlsHeldTimeline != nullptr) {
        flusher.detach();
      } else {
        flusher.join();
      }
    }
    const RegistryLock lock(mutex);
    for (const auto& entry : open) entry.second->close();
  }

  static Registry& registry();
};

Registry& Registry::registry() {
  static Registry instance;
  return instance;
}

Registry& registry() { return Registry::registry(); }

// Each Timeline's serial number: what the per-thread cache of threadNumberLocked is keyed by (an
// address could be reused by a later Timeline).
std::atomic<std::uint64_t> nextSerial{1};

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
  const RegistryLock lock(r.mutex);
  auto it = r.open.find(name);
  if (it != r.open.end()) return it->second;
  const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ADAPREC_CHECK_ARG(fd >= 0, "timeline file " << name << " cannot be created: " << std::strerror(errno));
  // The opening bracket is written here, so that a file on a full disk is refused now, not left empty.
  const ssize_t n = ::write(fd, "[\n", 2);
  const int err = n == 2 ? 0 : (n < 0 ? errno : ENOSPC);
  if (err != 0) {
    ::close(fd);
    ::unlink(name.c_str());
    ADAPREC_FAIL(ErrorCode::kInvalidArgument, "timeline file " << name << " cannot be written: " << std::strerror(err));
  }
  auto timeline = std::make_shared<Timeline>(fd, name, rank);
  r.open.emplace(name, timeline);
  r.startFlusher();
  return timeline;
}

Timeline::Timeline(int fd, std::string name, int rank)
    : serial_(nextSerial.fetch_add(1)), lastWriteTicks_(fastClockTicks()), fd_(fd), name_(std::move(name)),
      writtenBytes_(2), pid_(::getpid()), rank_(rank) {
  events_.reserve(kFlushEvents);
  text_.reserve(kWriteBytes);
}

Timeline::~Timeline() { close(); }

void Timeline::close() {
  // exit() from a signal handler that interrupted this thread inside this recorder: its lock is ours and
  // its buffer half written; the file keeps its last whole write (readable with the tolerant rule).
  if (tlsHeldTimeline == this) return;
  const Held lock(*this);
  if (fd_ < 0) return;
  if (::getpid() != pid_) {  // a forked child's exit: the file is the parent's
    ::close(fd_);
    fd_ = -1;
    return;
  }
  writeLocked();
  if (fd_ >= 0 && writeText("\n]\n")) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool Timeline::writeText(std::string_view text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      // Whole lines only: a part of this write would leave a cut event, or (if space came back later)
      // events after a gap.
      const bool cut = ::ftruncate(fd_, static_cast<off_t>(writtenBytes_)) == 0;
      std::fprintf(stderr, "adaprec: timeline file %s: cannot write (%s); it %s its last whole write, and rank %d "
                   "writes no more events to it\n", name_.c_str(), std::strerror(err), cut ? "ends at" : "may be cut after",
                   rank_);
      std::fflush(stderr);
      ::close(fd_);
      fd_ = -1;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  writtenBytes_ += text.size();
  return true;
}

void Timeline::push(const Event& event) {
  const Held lock(*this);
  pushLocked(event);
}

void Timeline::pushLocked(const Event& event) {
  if (fd_ < 0) return;  // closed, or a write failed: nothing more reaches the file
  events_.push_back(event);
  events_.back().thread = threadNumberLocked();
  // Events are pushed when they end, so event.end is now (instants: their moment).
  if (events_.size() >= kFlushEvents || fastClockSeconds(lastWriteTicks_, event.end) >= kFlushSeconds)
    writeLocked();
}

std::uint32_t Timeline::threadNumberLocked() {
  thread_local std::uint64_t cachedSerial = 0;
  thread_local std::uint32_t cachedNumber = 0;
  if (cachedSerial != serial_) {
    cachedNumber = threads_.emplace(std::this_thread::get_id(), static_cast<std::uint32_t>(threads_.size())).first->second;
    cachedSerial = serial_;
  }
  return cachedNumber;
}

void Timeline::span(Kind kind, std::uint64_t startTicks, std::uint64_t endTicks) {
  push(Event{kind, 0, startTicks, endTicks, Format::kFp32, Algorithm::kNative, 0, 0, 0});
}

void Timeline::call(std::uint64_t startTicks, std::uint64_t endTicks, const AllreduceStats& stats) {
  push(Event{Kind::kAllreduce, 0, startTicks, endTicks, stats.format, stats.algorithm, stats.count, stats.wireBytes,
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
  const Held lock(*this);
  if (fd_ < 0) return;
  instants_.emplace_back(name, argsJson);
  pushLocked(Event{Kind::kInstant, 0, now, now, Format::kFp32, Algorithm::kNative, instants_.size() - 1, 0, 0});
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
  const Held lock(*this);
  writeLocked();
}

// Marked from before the lock is taken until after it is released (RegistryLock says why); the previous
// mark is kept: exit-time closes of other recorders run while the interrupted frame below still holds
// its own. A handler that runs after the mark but before the lock is taken skips that recorder: the
// frame takes the lock when it resumes.
Timeline::Held::Held(Timeline& t) : previous(std::exchange(tlsHeldTimeline, &t)), guard(t.mutex_) {}
Timeline::Held::~Held() {
  guard.unlock();
  tlsHeldTimeline = previous;
}

void Timeline::lockForFork() {
  if (tlsHeldTimeline == this) return;  // fork() from a handler that interrupted this thread here
  mutex_.lock();
  lockedForFork_ = true;
}

void Timeline::unlockAfterFork() {
  if (!lockedForFork_) return;
  lockedForFork_ = false;
  mutex_.unlock();
}

void Timeline::flushIfStale() {
  const Held lock(*this);
  if (!events_.empty() && fastClockSeconds(lastWriteTicks_, fastClockTicks()) >= kFlushSeconds) writeLocked();
}

bool Timeline::appendLine(std::string_view line) {
  if (text_.size() + line.size() > kWriteBytes && !text_.empty()) {
    const bool written = writeText(text_);
    text_.clear();  // keeps the capacity
    if (!written) return false;
  }
  if (line.size() > kWriteBytes) return writeText(line);  // an instant with long arguments
  text_ += line;
  return true;
}

void Timeline::writeLocked() {
  lastWriteTicks_ = fastClockTicks();
  if (events_.empty()) return;
  if (fd_ < 0 || ::getpid() != pid_) {
    events_.clear();
    instants_.clear();
    return;
  }
  text_.clear();
  bool ok = true;
  char line[512];
  for (const Event& e : events_) {
    if (!ok) break;
    const double ts = microsFromOrigin(e.start);
    // Every event after the first starts with the comma, so the file up to any write is a JSON array
    // that lacks only its closing bracket.
    const char* comma = first_ ? "" : ",";
    first_ = false;
    if (e.kind == Kind::kInstant) {
      // Instants are not on the hot path (Timeline::instant copies its strings): this line may allocate.
      const auto& [name, args] = instants_[e.count];
      const int m = std::snprintf(line, sizeof line, "\",\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f",
                                  rank_, static_cast<unsigned>(e.thread), ts);
      std::string text = std::string(comma) + "{\"name\":\"" + name;
      text.append(line, static_cast<std::size_t>(m));
      if (!args.empty()) text += ",\"args\":" + args;
      text += "}\n";
      ok = appendLine(text);
      continue;
    }
    const double dur = fastClockSeconds(e.start, e.end) * 1e6;
    // At most ~300 characters: fixed text, two short names, five integers and two times.
    int n = std::snprintf(line, sizeof line, "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f",
                          comma, kindName(e.kind), rank_, static_cast<unsigned>(e.thread), ts, dur);
    if (e.kind == Kind::kAllreduce) {
      n += std::snprintf(line + n, sizeof line - static_cast<std::size_t>(n),
                         ",\"args\":{\"format\":\"%.*s\",\"algorithm\":\"%.*s\",\"count\":%zu,\"wireBytes\":%zu,"
                         "\"fp32Bytes\":%zu}",
                         static_cast<int>(formatName(e.format).size()), formatName(e.format).data(),
                         static_cast<int>(algorithmName(e.algorithm).size()), algorithmName(e.algorithm).data(), e.count,
                         e.wireBytes, e.fp32Bytes);
    }
    n += std::snprintf(line + n, sizeof line - static_cast<std::size_t>(n), "}\n");
    ok = appendLine(std::string_view(line, static_cast<std::size_t>(n)));
  }
  events_.clear();
  instants_.clear();
  // Whole lines per write: a rank killed between writes leaves whole lines.
  if (ok && !text_.empty()) writeText(text_);
  text_.clear();
}

}  // namespace adaprec::detail
