// The allreduce timeline (CommunicatorOptions::timelinePath, ADAPREC_TIMELINE) on loopback ranks: one
// file per rank, well-formed complete events, one call event per allreduce with its arguments, every
// step span inside its call, steps summing to at most the call, the tolerant reading of a file whose
// array is not closed, and instant events (the controller's decisions) between the calls.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "adaprec/communicator.hpp"
#include "adaprec/error.hpp"
#include "adaprec/transport.hpp"
#include "communicator/timeline.hpp"
#include "timeline_file.hpp"

using namespace adaprec;
using namespace adaprec::test;
using nlohmann::json;

namespace {

struct Call {
  const char* format;
  Algorithm algorithm;
  std::size_t count;
};

const Call kCalls[] = {
    {"fp32", Algorithm::kNative, 1000},
    {"fp16", Algorithm::kRing, 50000},
    {"fp8", Algorithm::kTwoShot, 30000},
    {"table4", Algorithm::kRabenseifner, 40000},
    {"bf16", Algorithm::kHierarchical, 20000},
    {"fp8s", Algorithm::kRecursiveDoubling, 5000},
    {"fp8", Algorithm::kRing, std::size_t{1} << 21},  // large and compressed: last
};
constexpr int kRanks = 4;

// What the small-timeline tests below run: a fp16 ring, the Communicator writing to `prefix`.
AllreduceOptions fp16Ring() {
  AllreduceOptions opt;
  opt.format = parseFormatSpec("fp16");
  opt.algorithm = Algorithm::kRing;
  return opt;
}

CommunicatorOptions writingTo(const std::string& prefix) {
  CommunicatorOptions options;
  options.timelinePath = prefix;
  return options;
}

std::filesystem::path freshDirectory() {
  static int serial = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("adaprec-timeline-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("timeline: one Chrome trace per rank, calls with nested steps", "[timeline]") {
  const std::filesystem::path dir = freshDirectory();
  const std::string prefix = (dir / "run").string();
  std::vector<std::vector<AllreduceStats>> stats(kRanks);
  LoopbackGroup group(kRanks, 2);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options;
    options.segmentCount = 1 << 16;
    options.timelinePath = prefix;
    Communicator comm(transport, options);
    for (const Call& call : kCalls) {
      std::vector<float> data(call.count, 0.001f * static_cast<float>(rank + 1));
      AllreduceOptions opt;
      opt.format = parseFormatSpec(call.format);
      opt.algorithm = call.algorithm;
      stats[static_cast<std::size_t>(rank)].push_back(comm.allreduce(data.data(), data.size(), opt));
    }
  });

  for (int rank = 0; rank < kRanks; ++rank) {
    INFO("rank " << rank);
    const std::string file = prefix + ".rank" + std::to_string(rank) + ".json";
    REQUIRE(std::filesystem::exists(file));
    const std::string text = readTextFile(file);
    // Flushed when the Communicator was destroyed; the bracket is closed only at process exit.
    REQUIRE(text.rfind("[\n", 0) == 0);
    const json events = parseTimelineText(text);
    REQUIRE(events.is_array());

    std::vector<json> calls;
    std::vector<json> steps;
    for (const json& e : events) {
      REQUIRE(e.is_object());
      REQUIRE(e.at("ph") == "X");
      REQUIRE(e.at("pid") == rank);
      REQUIRE(e.at("tid").is_number_integer());
      REQUIRE(e.at("ts").is_number());
      REQUIRE(e.at("dur").is_number());
      CHECK(e.at("ts").get<double>() >= 0);
      CHECK(e.at("dur").get<double>() >= 0);
      const std::string name = e.at("name");
      if (name == "allreduce") {
        calls.push_back(e);
      } else {
        CHECK((name == "agreement" || name == "encode" || name == "decode" || name == "decodeAdd" ||
               name == "wait"));
        steps.push_back(e);
      }
    }
    REQUIRE(calls.size() == std::size(kCalls));
    std::vector<double> inside(calls.size(), 0.0);
    for (std::size_t c = 0; c < calls.size(); ++c) {
      const json& args = calls[c].at("args");
      const AllreduceStats& s = stats[static_cast<std::size_t>(rank)][c];
      CHECK(args.at("format") == std::string(formatName(s.format)));
      CHECK(args.at("algorithm") == std::string(algorithmName(s.algorithm)));
      CHECK(args.at("count") == kCalls[c].count);
      CHECK(args.at("wireBytes") == s.wireBytes);
      CHECK(args.at("fp32Bytes") == s.fp32Bytes);
      CHECK(std::abs(calls[c].at("dur").get<double>() - s.totalSeconds * 1e6) < 0.01);
    }
    // Every step lies inside exactly one call (timestamps are written with 3 decimals: 0.002 us slack).
    constexpr double kSlack = 0.002;
    for (const json& step : steps) {
      const double begin = step.at("ts");
      const double end = begin + step.at("dur").get<double>();
      int owners = 0;
      for (std::size_t c = 0; c < calls.size(); ++c) {
        const double cb = calls[c].at("ts");
        const double ce = cb + calls[c].at("dur").get<double>();
        if (begin >= cb - kSlack && end <= ce + kSlack) {
          ++owners;
          inside[c] += end - begin;
        }
      }
      INFO("step " << step.dump());
      CHECK(owners == 1);
    }
    for (std::size_t c = 0; c < calls.size(); ++c) {
      INFO("call " << calls[c].dump() << " steps " << inside[c]);
      CHECK(inside[c] <= calls[c].at("dur").get<double>() + kSlack * 64);
    }
    // The large compressed call has steps (codec work and waiting). Their share of the call is not
    // asserted: it is a timing (45 % to 98 % seen on 2 cores, 23 % once under a parallel test run that
    // descheduled the threads outside their steps), and timings belong in benchmarks.
    INFO("large call " << calls.back().dump() << " steps " << inside.back());
    CHECK(inside.back() > 0);
    // The native fp32 call has no steps.
    CHECK(inside.front() == 0.0);

    // A copy cut inside its last line, as a kill during a write could leave it: the whole lines before
    // the cut still parse.
    const std::size_t lastLine = text.rfind("\n,{");
    REQUIRE(lastLine != std::string::npos);
    const json cut = parseTimelineText(text.substr(0, lastLine + 20));
    CHECK(cut.size() == events.size() - 1);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline: a file closed at exit is plain JSON; tolerant reading of an open one", "[timeline]") {
  CHECK(parseTimelineText("[\n{\"name\":\"a\"}\n,{\"name\":\"b\"}\n]\n").size() == 2);
  CHECK(parseTimelineText("[\n{\"name\":\"a\"}\n,{\"name\":\"b\"}\n").size() == 2);
  CHECK(parseTimelineText("[\n{\"name\":\"a\"}\n,{\"name\":\"b\"").size() == 1);
  CHECK(parseTimelineText("[\n").empty());
}

TEST_CASE("timeline: a second Communicator of the same rank and path appends", "[timeline]") {
  const std::filesystem::path dir = freshDirectory();
  const std::string prefix = (dir / "twice").string();
  for (int round = 0; round < 2; ++round) {
    LoopbackGroup group(2, 0);
    runLoopback(group, [&](int, std::shared_ptr<Transport> transport) {
      Communicator comm(transport, writingTo(prefix));
      std::vector<float> data(4096, 1.0f);
      const AllreduceOptions opt = fp16Ring();
      comm.allreduce(data.data(), data.size(), opt);
    });
  }
  for (int rank = 0; rank < 2; ++rank) {
    const json events = parseTimelineText(readTextFile(prefix + ".rank" + std::to_string(rank) + ".json"));
    int calls = 0;
    for (const json& e : events) calls += e.at("name") == "allreduce" ? 1 : 0;
    CHECK(calls == 2);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline: an unwritable path is refused when the Communicator is built", "[timeline]") {
  LoopbackGroup group(1, 0);
  bool refused = false;
  runLoopback(group, [&](int, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options;
    options.timelinePath = "/nonexistent-adaprec-dir/x";
    try {
      Communicator comm(transport, options);
    } catch (const Error& e) {
      refused = e.code() == ErrorCode::kInvalidArgument;
    }
  });
  CHECK(refused);
}

TEST_CASE("timeline: instant events between the calls, with their arguments", "[timeline]") {
  const std::filesystem::path dir = freshDirectory();
  const std::string prefix = (dir / "instants").string();
  std::vector<int> refused(2, 0);
  LoopbackGroup group(2, 0);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    CommunicatorOptions options;
    options.timelinePath = prefix;
    Communicator comm(transport, options);
    // The recorder the Communicator writes to: the controller reaches it the same way.
    const std::shared_ptr<detail::Timeline> timeline = detail::Timeline::open(prefix, rank);
    std::vector<float> data(4096, 1.0f);
    AllreduceOptions opt;
    opt.format = parseFormatSpec("fp16");
    opt.algorithm = Algorithm::kRing;
    comm.allreduce(data.data(), data.size(), opt);
    timeline->instant("decision", R"({"choice":"fp16","candidates":[{"name":"fp16","chosen":true}]})");
    comm.allreduce(data.data(), data.size(), opt);
    timeline->instant("mark", "");
    // Catch2's assertions are not thread-safe: the verdicts are checked after the ranks joined.
    for (const auto& [name, args] : {std::pair<const char*, const char*>{"a \"quoted\" name", ""}, {"x", "{\n}"}}) {
      try {
        timeline->instant(name, args);
      } catch (const Error& e) {
        refused[static_cast<std::size_t>(rank)] += e.code() == ErrorCode::kInvalidArgument;
      }
    }
  });
  CHECK(refused == std::vector<int>{2, 2});
  for (int rank = 0; rank < 2; ++rank) {
    const json events = parseTimelineText(readTextFile(prefix + ".rank" + std::to_string(rank) + ".json"));
    std::vector<std::string> order;
    std::vector<double> times;
    for (const json& e : events) {
      if (e.at("name") == "allreduce" || e.at("ph") == "i") {
        order.push_back(e.at("name"));
        times.push_back(e.at("ts"));
      }
      if (e.at("ph") != "i") continue;
      CHECK(e.at("s") == "t");
      CHECK(e.at("pid") == rank);
      CHECK(e.at("tid") == 0);
      CHECK_FALSE(e.contains("dur"));
      if (e.at("name") == "decision") {
        CHECK(e.at("args").at("choice") == "fp16");
        CHECK(e.at("args").at("candidates")[0].at("chosen") == true);
      } else {
        CHECK_FALSE(e.contains("args"));
      }
    }
    // Written in the order they happened, each instant after the call before it.
    CHECK(order == std::vector<std::string>{"allreduce", "decision", "allreduce", "mark"});
    CHECK(std::is_sorted(times.begin(), times.end()));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline: a failing call is recorded and written before the error leaves", "[timeline]") {
  // The program usually ends on the error (MPI's fatal handler aborts), so what led there must already
  // be in the file: read here while the Communicator is alive, before any destructor could flush.
  const std::filesystem::path dir = freshDirectory();
  const std::string prefix = (dir / "failing").string();
  std::vector<std::string> texts(2), codes(2);
  LoopbackGroup group(2, 0);
  runLoopback(group, [&](int rank, std::shared_ptr<Transport> transport) {
    Communicator comm(transport, writingTo(prefix));
    std::vector<float> data(4096, 1.0f);
    const AllreduceOptions opt = fp16Ring();
    comm.allreduce(data.data(), data.size(), opt);
    try {
      comm.allreduce(data.data(), rank == 0 ? 4096 : 4000, opt);  // ranks disagree on the count
    } catch (const Error& e) {
      codes[static_cast<std::size_t>(rank)] = errorCodeName(e.code());
    }
    texts[static_cast<std::size_t>(rank)] = readTextFile(prefix + ".rank" + std::to_string(rank) + ".json");
  });
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    CHECK(codes[static_cast<std::size_t>(rank)] == "mismatch");
    const json events = parseTimelineText(texts[static_cast<std::size_t>(rank)]);
    std::vector<std::string> order;
    for (const json& e : events) {
      if (e.at("name") == "allreduce" || e.at("ph") == "i") order.push_back(e.at("name"));
      if (e.at("name") != "allreduce error") continue;
      CHECK(e.at("args").at("code") == "mismatch");
      CHECK(e.at("args").at("count") == (rank == 0 ? 4096 : 4000));
      CHECK_THAT(e.at("args").at("message").get<std::string>(), Catch::StartsWith("adaprec: "));
    }
    CHECK(order == std::vector<std::string>{"allreduce", "allreduce error"});
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline: events reach the file within a second, not only every 4096 events", "[timeline]") {
  // A rank killed because another failed keeps what it did up to about a second before.
  const std::filesystem::path dir = freshDirectory();
  const std::string prefix = (dir / "periodic").string();
  std::string text;
  LoopbackGroup group(1, 0);
  runLoopback(group, [&](int, std::shared_ptr<Transport> transport) {
    Communicator comm(transport, writingTo(prefix));
    std::vector<float> data(4096, 1.0f);
    const AllreduceOptions opt = fp16Ring();
    comm.allreduce(data.data(), data.size(), opt);
    std::this_thread::sleep_for(std::chrono::duration<double>(detail::Timeline::kFlushSeconds * 1.1));
    comm.allreduce(data.data(), data.size(), opt);
    text = readTextFile(prefix + ".rank0.json");
  });
  // The second call's first event came over a second after the last write and wrote what was buffered:
  // the first call (the second call's own events may still be buffered). Without the rule: nothing.
  int calls = 0;
  for (const json& e : parseTimelineText(text)) calls += e.at("name") == "allreduce" ? 1 : 0;
  CHECK(calls >= 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline: events are written within a few seconds even when no event follows them", "[timeline]") {
  // The process's flushing thread: a rank idle after a burst (an evaluation, a stuck peer) and then
  // killed had lost the whole burst (only `[` in the file).
  const std::filesystem::path dir = freshDirectory();
  const std::string prefix = (dir / "idle").string();
  std::string text;
  LoopbackGroup group(1, 0);
  runLoopback(group, [&](int, std::shared_ptr<Transport> transport) {
    Communicator comm(transport, writingTo(prefix));
    std::vector<float> data(4096, 1.0f);
    for (int i = 0; i < 3; ++i) comm.allreduce(data.data(), data.size(), fp16Ring());
    std::this_thread::sleep_for(std::chrono::duration<double>(detail::Timeline::kFlushSeconds * 3.5));
    text = readTextFile(prefix + ".rank0.json");  // the Communicator is still alive: no close yet
  });
  int calls = 0;
  for (const json& e : parseTimelineText(text)) calls += e.at("name") == "allreduce" ? 1 : 0;
  CHECK(calls == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline: a write that fails leaves the file at its last whole write, and nothing after it",
          "[timeline]") {
  // A full disk: the first write that fails is reported, the file cut back to whole lines, and no later
  // write lands after a gap (space freed later had left files with a hole in the middle). A file size
  // limit stands in for the full disk (writes past it fail with EFBIG).
  const std::filesystem::path dir = freshDirectory();
  const std::string name = (dir / "limited.json").string();
  const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "[\n", 2) == 2);
  std::uintmax_t sizeAfterFirst = 0;
  {
    detail::Timeline timeline(fd, name, 0);
    timeline.span(detail::Timeline::Kind::kEncode, 10, 20);
    timeline.flush();
    sizeAfterFirst = std::filesystem::file_size(name);
    struct rlimit old {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = static_cast<rlim_t>(sizeAfterFirst + 100);  // room for one more event, not for many
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    for (int i = 0; i < 200; ++i) timeline.span(detail::Timeline::Kind::kDecode, 30, 40);
    timeline.flush();  // fails: cut back
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
    std::signal(SIGXFSZ, previousHandler);
    timeline.span(detail::Timeline::Kind::kWait, 50, 60);
    timeline.flush();  // room again: still nothing written
  }  // close(): no closing bracket after a failure
  CHECK(std::filesystem::file_size(name) == sizeAfterFirst);
  const std::vector<json> events = parseTimelineText(readTextFile(name));
  REQUIRE(events.size() == 1);
  CHECK(events[0].at("name") == "encode");
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline: threads recording into one file get tids of their own", "[timeline]") {
  // Calls of several threads (each on its own communicator, MPI_THREAD_MULTIPLE) overlap in time: on
  // one tid they could not nest, and the summary gave steps to the wrong calls.
  const std::filesystem::path dir = freshDirectory();
  const std::string prefix = (dir / "threads").string();
  {
    const std::shared_ptr<detail::Timeline> timeline = detail::Timeline::open(prefix, 0);
    timeline->span(detail::Timeline::Kind::kEncode, 1, 2);
    std::thread other([&] {
      timeline->span(detail::Timeline::Kind::kDecode, 3, 4);
      timeline->span(detail::Timeline::Kind::kWait, 5, 6);
    });
    other.join();
    timeline->span(detail::Timeline::Kind::kEncode, 7, 8);
    timeline->flush();
  }
  std::vector<int> tids;
  for (const json& e : parseTimelineText(readTextFile(prefix + ".rank0.json"))) tids.push_back(e.at("tid").get<int>());
  CHECK(tids == std::vector<int>{0, 1, 1, 0});
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline: a forked child's exit neither hangs nor writes into the parent's file", "[timeline]") {
  // The child inherits the buffered events and the registry; its exit must not write them (or a
  // closing bracket) into the parent's file, nor wait on a lock the parent's flusher thread held.
  const std::filesystem::path dir = freshDirectory();
  const std::string prefix = (dir / "fork").string();
  const std::shared_ptr<detail::Timeline> timeline = detail::Timeline::open(prefix, 0);
  timeline->span(detail::Timeline::Kind::kEncode, 1, 2);  // buffered, not yet written
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) std::exit(0);  // static destructors run: the registry's included
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 1000 && done == 0; ++i) {
    done = ::waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) ::kill(child, SIGKILL);
  REQUIRE(done == child);  // it ended within 10 s
  CHECK(WIFEXITED(status));
  timeline->span(detail::Timeline::Kind::kDecode, 3, 4);
  timeline->flush();
  const std::string text = readTextFile(prefix + ".rank0.json");
  CHECK(text.find(']') == std::string::npos);  // no bracket from the child's exit
  std::vector<std::string> names;
  for (const json& e : parseTimelineText(text)) names.push_back(e.at("name").get<std::string>());
  CHECK(names == std::vector<std::string>{"encode", "decode"});
  std::filesystem::remove_all(dir);
}

// gcc says __SANITIZE_ADDRESS__, clang __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define TIMELINE_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TIMELINE_TEST_UNDER_ASAN 1
#endif
#endif

namespace {

// Runs body in a child process; true when the child ended by itself, with status 0, within 30 s.
template <class Body>
bool endsWithin30s(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    std::exit(0);  // static destructors: the timeline registry's exit path
  }
  int status = 0;
  for (int i = 0; i < 3000; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return false;
}

void forkFromHandler(int) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  if (child > 0) ::waitpid(child, nullptr, 0);
}

void exitFromHandler(int) { std::exit(0); }

// Records events as fast as it can for `seconds` (or until a handler ends the process).
void recordBusily(const std::shared_ptr<detail::Timeline>& timeline, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (std::uint64_t i = 0; std::chrono::steady_clock::now() < end; ++i)
    timeline->span(detail::Timeline::Kind::kEncode, i, i + 1);
}

}  // namespace

TEST_CASE("timeline: fork() or exit() from a signal handler that interrupted a recorder does not hang",
          "[timeline]") {
  // Crash reporters fork from signal handlers and programs exit() from a SIGTERM handler; the fork
  // handlers and the exit-time close waited for the recorder's lock that the interrupted frame held
  // (a hostile pass: 3 of 3 and 4 of 10 runs hung).
  const std::filesystem::path dir = freshDirectory();
#if !defined(TIMELINE_TEST_UNDER_ASAN)
  // Not under AddressSanitizer: its fork() takes its allocator's locks, which a handler interrupting
  // an allocation holds (fork() is not async-signal-safe). glibc's fork() does the same with malloc's
  // locks: the recording loop below must not allocate, and does not once this thread has its number
  // (the first span) and the write buffer is reserved (Timeline::kWriteBytes; the buffer grew during
  // the first writes before, and 2 of 30 runs under load hung in a fork from a handler inside malloc).
  CHECK(endsWithin30s([&] {
    const auto timeline = detail::Timeline::open((dir / "fork").string(), 0);
    timeline->span(detail::Timeline::Kind::kEncode, 0, 1);
    std::signal(SIGALRM, forkFromHandler);
    const itimerval every{{0, 2000}, {0, 2000}};  // a fork every 2 ms while recording
    ::setitimer(ITIMER_REAL, &every, nullptr);
    recordBusily(timeline, 1.5);
    const itimerval off{};
    ::setitimer(ITIMER_REAL, &off, nullptr);
  }));
#endif
  for (int run = 0; run < 5; ++run) {
    INFO("exit from the handler, run " << run);
    CHECK(endsWithin30s([&] {
      const auto timeline = detail::Timeline::open((dir / ("exit" + std::to_string(run))).string(), 0);
      timeline->span(detail::Timeline::Kind::kEncode, 0, 1);
      std::signal(SIGALRM, exitFromHandler);
      const itimerval once{{0, 0}, {0, 30000 + 7000 * run}};
      ::setitimer(ITIMER_REAL, &once, nullptr);
      recordBusily(timeline, 10);
    }));
  }
  std::filesystem::remove_all(dir);
}
