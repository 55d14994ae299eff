// One worker thread that runs posted jobs in order: the trainer's communication thread. Every
// reduction of an overlapped or double-buffered step runs here, so this thread is the only one inside
// the reducer (and its MPI calls) while a reduction is in flight; the training thread calls MPI itself
// only after wait() (the trainer waits before every collective of its own), which is what
// MPI_THREAD_SERIALIZED asks for. Knows nothing of MPI: tested on its own under ThreadSanitizer.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace adaprec::trainer {

class CommThread {
 public:
  CommThread();
  // Drops the jobs not yet started and waits for a running one (owners wait() first); a job still
  // running when the owner unwinds from an error (its peers may never answer) is left to the
  // process's end: the thread is detached.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `job` after the jobs already posted.
  void post(std::function<void()> job);
  // Blocks until every posted job has run. Rethrows the first exception a job threw (once; the jobs
  // posted after a failed one are dropped, not run).
  void wait();
  // Whether every posted job has run (no wait needed).
  bool idle() const;

 private:
  // Shared with the thread, so that a detached thread never touches freed memory.
  struct State {
    std::mutex mutex;
    std::condition_variable work, done;
    std::deque<std::function<void()>> queue;
    bool busy = false;
    bool stop = false;
    std::exception_ptr failure;
  };
  static void run(std::shared_ptr<State> state);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace adaprec::trainer
