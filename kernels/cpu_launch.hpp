// CPU launchers of the kernel functors (kernels/execution_context.cuh): the same source nvcc compiles,
// run on the host so tests can check it bit for bit against the host codec without a GPU.
//   launchSerial:   one thread per block, blocks in order, sync() does nothing. Proves the indexing and
//                   the arithmetic for every block, and that nothing depends on the block size.
//   launchThreaded: `threads` real threads per block sharing one Shared struct, sync() a std::barrier,
//                   blocks one after another. Proves the barrier and shared-memory logic; under
//                   ThreadSanitizer (tools/test --tsan) a missing sync() is reported as a data race.
// Both poison Shared before each block (a GPU block's shared memory starts as garbage). Host only.
#pragma once

#include <barrier>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "execution_context.cuh"

namespace adaprec::kernels {

inline constexpr unsigned char kSharedPoison = 0xa5;

template <class Shared>
struct SerialContext {
  unsigned block;
  unsigned grid;
  Shared* sharedMemory;
  unsigned blockIndex() const { return block; }
  unsigned threadIndex() const { return 0; }
  unsigned threadsPerBlock() const { return 1; }
  unsigned gridSize() const { return grid; }
  void sync() const {}
  Shared& shared() const { return *sharedMemory; }
};

template <class Shared>
struct ThreadedContext {
  unsigned block;
  unsigned thread;
  unsigned threads;
  unsigned grid;
  std::barrier<>* barrier;
  Shared* sharedMemory;
  unsigned blockIndex() const { return block; }
  unsigned threadIndex() const { return thread; }
  unsigned threadsPerBlock() const { return threads; }
  unsigned gridSize() const { return grid; }
  void sync() const { barrier->arrive_and_wait(); }
  Shared& shared() const { return *sharedMemory; }
};

template <class Shared>
void poison(Shared& shared) {
  static_assert(std::is_trivially_copyable_v<Shared>, "shared memory must be a trivial type");
  std::memset(static_cast<void*>(&shared), kSharedPoison, sizeof shared);
}

inline void checkShape(unsigned grid, unsigned threads) {
  if (grid == 0 || threads == 0 || threads > kMaxThreadsPerBlock) {
    throw std::invalid_argument("kernel launch needs grid >= 1 and 1..kMaxThreadsPerBlock threads per block");
  }
}

// The launch signature the dispatchers (kernels/codec_dispatch.cuh) call: (grid, threads, functor).
struct SerialLauncher {
  template <class F>
  void operator()(unsigned grid, unsigned threads, const F& f) const {
    checkShape(grid, threads);
    typename F::Shared shared;
    for (unsigned b = 0; b < grid; ++b) {
      poison(shared);
      SerialContext<typename F::Shared> ctx{b, grid, &shared};
      f(ctx);
    }
  }
};

struct ThreadedLauncher {
  template <class F>
  void operator()(unsigned grid, unsigned threads, const F& f) const {
    checkShape(grid, threads);
    typename F::Shared shared;
    poison(shared);
    std::barrier<> barrier(static_cast<std::ptrdiff_t>(threads));
    auto body = [&](unsigned t) {
      for (unsigned b = 0; b < grid; ++b) {
        ThreadedContext<typename F::Shared> ctx{b, t, threads, grid, &barrier, &shared};
        f(ctx);
        barrier.arrive_and_wait();  // the block is done: nobody touches its shared memory any more
        if (t == 0) poison(shared);
        barrier.arrive_and_wait();  // the next block starts on garbage
      }
    };
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(body, t);
    for (std::thread& th : pool) th.join();
  }
};

}  // namespace adaprec::kernels
