// Runs CUDA kernels written for it on the CPU, for tests on machines without
// a GPU (Note [Emulated kernels] in tensor/cuda/conv_direct_kernels.cuh).
// Include it before the kernels' header, in a test file of its own: it
// defines threadIdx, blockIdx, blockDim, gridDim, __syncthreads and
// __shfl_down_sync as macros.
//
// Note [Threads as fibers]
// kiln::emulation::launch runs the grid's blocks one after another, and a
// block's threads as fibers (POSIX ucontext) on the calling host thread.
// Each fiber runs until it waits at a barrier (__syncthreads for the block,
// or a warp's shuffle) or ends; the block's scheduler then resumes, in
// thread order, every fiber whose barrier has opened, that is, every thread
// of its block or warp has arrived. So __syncthreads is a real barrier and a
// shuffle a real exchange, and a block whose threads wait at barriers that
// can never open (a __syncthreads some threads skip) is reported instead of
// hanging.
//
// Host threads (one per CUDA thread, with std::barrier) did the same until
// 2026-12: on a loaded 2-core machine every barrier then waited for 256 OS
// threads to be scheduled, and the direct-conv test took 690 s under ctest
// -j2 against 40 s alone. As fibers it takes 19 s, most of it in
// swapcontext (which also sets the signal mask, a system call each switch).
//
// What it cannot show: timing, races that the GPU's memory model allows and
// the sequential order hides, and anything of the hardware (occupancy,
// alignment faults). Under AddressSanitizer (KILN_FUZZ builds) the fibers'
// switches carry no annotations: the tests pass, and an exception thrown on
// a fiber's stack prints ASan's "ignoring __asan_handle_no_return" warning.
#pragma once

#define KILN_CUDA_EMULATION 1

#include <ucontext.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)

namespace kiln::emulation {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

// The running thread's place in the grid, and the launch's shape.
inline Dim3 thread_index;
inline Dim3 block_index;
inline Dim3 block_dim, grid_dim;

constexpr unsigned kWarpLanes = 32;
constexpr size_t kFiberStackBytes = 256 * 1024;  // a kernel's frame is small; this is ample

// A barrier `size` threads arrive at. It opens when the last arrives, which
// starts its next generation.
struct Barrier {
  unsigned size = 0, arrived = 0;
  uint64_t generation = 0;
};

// One CUDA thread: its context, stack, and the barrier it waits at.
struct Fiber {
  ucontext_t context{};
  std::unique_ptr<char[]> stack{new char[kFiberStackBytes]};
  const Barrier* waiting = nullptr;
  uint64_t waiting_generation = 0;
  bool done = false;
};

// What the threads of the running block share.
struct Block {
  Block(unsigned threads, size_t shared_bytes)
      : fibers(threads), lanes(threads), shared(new std::max_align_t[shared_bytes / sizeof(std::max_align_t) + 1]) {
    all.size = threads;
    warps.resize(threads / kWarpLanes);
    for (Barrier& w : warps) w.size = kWarpLanes;
  }
  std::vector<Fiber> fibers;
  Barrier all;                                       // __syncthreads
  std::vector<Barrier> warps;                        // a warp's shuffles
  std::vector<std::array<unsigned char, 16>> lanes;  // each thread's value in a shuffle
  std::unique_ptr<std::max_align_t[]> shared;        // dynamic shared memory
  ucontext_t scheduler{};
  unsigned running = 0;        // the fiber now resumed
  std::function<void()> body;  // the kernel with its arguments
  std::exception_ptr failure;  // what a thread threw, rethrown by launch
};

inline Block* running_block = nullptr;  // blocks run one at a time

// The running thread arrives at b and yields until b opens.
inline void wait_at(Barrier& b) {
  Block& block = *running_block;
  Fiber& f = block.fibers[block.running];
  f.waiting = &b;
  f.waiting_generation = b.generation;
  if (++b.arrived == b.size) {
    b.arrived = 0;
    ++b.generation;
  }
  swapcontext(&f.context, &block.scheduler);
}

inline void sync_threads() { wait_at(running_block->all); }

// The running thread's warp meets: the step between a warp's lanes writing
// their values and reading each other's.
inline void sync_warp() { wait_at(running_block->warps[thread_index.x / kWarpLanes]); }

inline void* shared_memory() { return running_block->shared.get(); }

// __shfl_down_sync over a whole warp: every lane gets the value of the lane
// `delta` above it, or keeps its own past the warp's end.
template <class V>
V shuffle_down(unsigned /*mask: every lane takes part*/, V value, int delta) {
  static_assert(sizeof(V) <= 16, "shuffle_down moves values of up to 16 bytes");
  const unsigned t = thread_index.x, lane = t % kWarpLanes;
  std::memcpy(running_block->lanes[t].data(), &value, sizeof(V));
  sync_warp();
  V result = value;
  if (lane + static_cast<unsigned>(delta) < kWarpLanes)
    std::memcpy(&result, running_block->lanes[t + delta].data(), sizeof(V));
  sync_warp();  // nobody overwrites a value before every lane has read it
  return result;
}

// Where every fiber starts: the kernel, then back to the scheduler for good.
inline void fiber_main() {
  Block& block = *running_block;
  try {
    block.body();
  } catch (...) {
    if (!block.failure) block.failure = std::current_exception();
  }
  block.fibers[block.running].done = true;
  setcontext(&block.scheduler);
}

// Runs the running block's threads to their end (Note [Threads as fibers]).
inline void run_block() {
  Block& block = *running_block;
  for (Fiber& f : block.fibers) {
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kFiberStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_main, 0);
    f.waiting = nullptr;
    f.done = false;
  }
  size_t unfinished = block.fibers.size();
  while (unfinished > 0) {
    bool resumed = false;
    for (unsigned t = 0; t < block.fibers.size(); ++t) {
      Fiber& f = block.fibers[t];
      if (f.done || (f.waiting != nullptr && f.waiting->generation == f.waiting_generation)) continue;
      f.waiting = nullptr;
      block.running = t;
      thread_index = {t, 0, 0};
      swapcontext(&block.scheduler, &f.context);
      resumed = true;
      if (f.done) --unfinished;
    }
    if (!resumed) {
      throw std::logic_error("emulation::launch: block (" + std::to_string(block_index.x) + "," +
                             std::to_string(block_index.y) + "," + std::to_string(block_index.z) + ") has " +
                             std::to_string(unfinished) +
                             " threads waiting at barriers that can never open: a __syncthreads or shuffle that "
                             "not every thread of its block or warp reaches");
    }
  }
}

// kernel(args...) over the blocks of `grid`, each of `threads` threads (a
// multiple of 32) with `shared_bytes` of dynamic shared memory.
template <class Kernel, class... Args>
void launch(Dim3 grid, unsigned threads, size_t shared_bytes, Kernel kernel, Args... args) {
  if (threads == 0 || threads % kWarpLanes != 0)
    throw std::invalid_argument("emulation::launch: threads per block must be a positive multiple of 32");
  Block block(threads, shared_bytes);
  block.body = [&] { kernel(args...); };
  running_block = &block;
  grid_dim = grid;
  block_dim = {threads, 1, 1};
  struct Reset {
    ~Reset() { running_block = nullptr; }
  } reset;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        block_index = {x, y, z};
        run_block();
        if (block.failure) std::rethrow_exception(block.failure);
      }
    }
  }
}

}  // namespace kiln::emulation

#define threadIdx ::kiln::emulation::thread_index
#define blockIdx ::kiln::emulation::block_index
#define blockDim ::kiln::emulation::block_dim
#define gridDim ::kiln::emulation::grid_dim
#define __syncthreads() ::kiln::emulation::sync_threads()
#define __shfl_down_sync(mask, value, delta) ::kiln::emulation::shuffle_down(mask, value, delta)
#define KILN_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::kiln::emulation::shared_memory())
