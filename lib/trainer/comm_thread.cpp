#include "comm_thread.hpp"

#include <utility>

namespace adaprec::trainer {

CommThread::CommThread() : state_(std::make_shared<State>()), thread_(run, state_) {}

CommThread::~CommThread() {
  std::unique_lock lock(state_->mutex);
  const bool running = state_->busy || !state_->queue.empty();
  state_->stop = true;
  state_->queue.clear();
  lock.unlock();
  state_->work.notify_all();
  // A job still inside a collective whose peers are gone would block join() forever; the owner is
  // unwinding from an error and the process ends (or aborts the job) next. The thread keeps the
  // state alive.
  if (running && std::uncaught_exceptions() > 0) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

void CommThread::post(std::function<void()> job) {
  {
    std::lock_guard lock(state_->mutex);
    // After a failure nothing more runs until the owner has seen it in wait(): a job posted after the
    // failed one may already have been posted when it failed (dropped then) or not yet (dropped here),
    // and which one is only a matter of timing.
    if (state_->failure) return;
    state_->queue.push_back(std::move(job));
  }
  state_->work.notify_one();
}

void CommThread::wait() {
  std::unique_lock lock(state_->mutex);
  state_->done.wait(lock, [this] { return !state_->busy && state_->queue.empty(); });
  if (state_->failure) std::rethrow_exception(std::exchange(state_->failure, nullptr));
}

bool CommThread::idle() const {
  std::lock_guard lock(state_->mutex);
  return !state_->busy && state_->queue.empty();
}

void CommThread::run(std::shared_ptr<State> state) {
  std::unique_lock lock(state->mutex);
  for (;;) {
    state->work.wait(lock, [&] { return state->stop || !state->queue.empty(); });
    if (state->queue.empty()) return;  // stopped
    std::function<void()> job = std::move(state->queue.front());
    state->queue.pop_front();
    state->busy = true;
    lock.unlock();
    std::exception_ptr failed;
    try {
      job();
    } catch (...) {
      failed = std::current_exception();
    }
    job = nullptr;  // its captures die outside the lock, before the owner can see the thread idle
    lock.lock();
    state->busy = false;
    if (failed && !state->failure) {
      state->failure = failed;
      state->queue.clear();
    }
    if (state->queue.empty()) state->done.notify_all();
  }
}

}  // namespace adaprec::trainer
