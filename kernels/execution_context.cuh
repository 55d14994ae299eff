// The execution context of a kernel functor, and the device side of running one.
//
// Every kernel body in kernels/ is a functor with
//   struct Shared { ... };                                   // the block's shared memory (trivial type)
//   template <class Ctx> ADAPREC_HD void operator()(Ctx& ctx) const;
// that asks its context, never CUDA's built-ins, where it runs:
//   ctx.blockIndex(), ctx.threadIndex(), ctx.threadsPerBlock(), ctx.gridSize(), ctx.sync(), ctx.shared().
// nvcc runs it through runKernel below (DeviceContext over blockIdx/threadIdx/__syncthreads); the CPU
// runs the very same functor through kernels/cpu_launch.hpp (a serial and a threaded launcher), which is
// how the tests verify every kernel on machines without a GPU. The pattern is alpaka's serial
// accelerator / Kokkos' serial team policy. Rules a functor keeps so both agree:
//   - correct for any threadsPerBlock from 1 to kMaxThreadsPerBlock and any gridSize >= 1 (loops
//     stride by threadsPerBlock and by gridSize * threadsPerBlock);
//   - every thread of a block reaches the same sync() calls (no sync() under a thread-dependent branch);
//   - shared memory starts as garbage (the CPU launchers poison it before each block).
#pragma once

#include "adaprec/detail/scalar_convert.hpp"  // ADAPREC_HD

namespace adaprec::kernels {

// Largest block a functor must support: it sizes the per-thread arrays of Shared structs.
inline constexpr unsigned kMaxThreadsPerBlock = 256;

#if defined(__CUDACC__)
template <class Shared>
struct DeviceContext {
  Shared& sharedMemory;
  __device__ __forceinline__ unsigned blockIndex() const { return blockIdx.x; }
  __device__ __forceinline__ unsigned threadIndex() const { return threadIdx.x; }
  __device__ __forceinline__ unsigned threadsPerBlock() const { return blockDim.x; }
  __device__ __forceinline__ unsigned gridSize() const { return gridDim.x; }
  __device__ __forceinline__ void sync() const { __syncthreads(); }
  __device__ __forceinline__ Shared& shared() const { return sharedMemory; }
};

// The one __global__ function: every kernel is runKernel<Functor><<<grid, threads, 0, stream>>>(f).
template <class F>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) runKernel(const F f) {
  __shared__ typename F::Shared shared;
  DeviceContext<typename F::Shared> ctx{shared};
  f(ctx);
}
#endif

}  // namespace adaprec::kernels
