// Runs CUDA kernels written for it on the CPU, for tests on machines without
// a GPU (Note [Emulated kernels] in tensor/cuda/conv_direct_kernels.cuh).
// Include it before the kernels' header, in a test file of its own: it
// defines threadIdx, blockIdx, blockDim, gridDim, __syncthreads and
// __shfl_down_sync as macros.
//
// kiln::emulation::launch runs the grid's blocks one after another; the
// threads of a block are host threads, so that __syncthreads is a real
// barrier and a warp's shuffles a real exchange (a barrier per warp). What it
// cannot show: timing, races that the GPU's memory model allows and a host
// barrier hides, and anything of the hardware (occupancy, alignment faults).
#pragma once

#define KILN_CUDA_EMULATION 1

#include <array>
#include <barrier>
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)

namespace kiln::emulation {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

// The calling host thread's place in the grid, and the launch's shape.
inline thread_local Dim3 thread_index;
inline thread_local Dim3 block_index;
inline Dim3 block_dim, grid_dim;

constexpr unsigned kWarpLanes = 32;

// What the threads of the running block share.
struct Block {
  explicit Block(unsigned threads, size_t shared_bytes)
      : all(threads), lanes(threads), shared(new std::max_align_t[shared_bytes / sizeof(std::max_align_t) + 1]) {
    for (unsigned w = 0; w < threads / kWarpLanes; ++w) warps.push_back(std::make_unique<std::barrier<>>(kWarpLanes));
  }
  std::barrier<> all;                                  // __syncthreads
  std::vector<std::unique_ptr<std::barrier<>>> warps;  // a warp's shuffles
  std::vector<std::array<unsigned char, 16>> lanes;    // each thread's value in a shuffle
  std::unique_ptr<std::max_align_t[]> shared;          // dynamic shared memory
};

inline Block* running_block = nullptr;  // blocks run one at a time

inline void sync_threads() { running_block->all.arrive_and_wait(); }

inline void* shared_memory() { return running_block->shared.get(); }

// __shfl_down_sync over a whole warp: every lane gets the value of the lane
// `delta` above it, or keeps its own past the warp's end.
template <class V>
V shuffle_down(unsigned /*mask: every lane takes part*/, V value, int delta) {
  static_assert(sizeof(V) <= 16, "shuffle_down moves values of up to 16 bytes");
  const unsigned t = thread_index.x, lane = t % kWarpLanes;
  std::barrier<>& warp = *running_block->warps[t / kWarpLanes];
  std::memcpy(running_block->lanes[t].data(), &value, sizeof(V));
  warp.arrive_and_wait();
  V result = value;
  if (lane + static_cast<unsigned>(delta) < kWarpLanes)
    std::memcpy(&result, running_block->lanes[t + delta].data(), sizeof(V));
  warp.arrive_and_wait();  // nobody overwrites a value before every lane has read it
  return result;
}

// kernel(args...) over the blocks of `grid`, each of `threads` threads (a
// multiple of 32) with `shared_bytes` of dynamic shared memory.
template <class Kernel, class... Args>
void launch(Dim3 grid, unsigned threads, size_t shared_bytes, Kernel kernel, Args... args) {
  if (threads == 0 || threads % kWarpLanes != 0)
    throw std::invalid_argument("emulation::launch: threads per block must be a positive multiple of 32");
  Block block(threads, shared_bytes);
  running_block = &block;
  grid_dim = grid;
  block_dim = {threads, 1, 1};
  std::barrier<> block_done(threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      thread_index = {t, 0, 0};
      for (unsigned z = 0; z < grid.z; ++z) {
        for (unsigned y = 0; y < grid.y; ++y) {
          for (unsigned x = 0; x < grid.x; ++x) {
            block_index = {x, y, z};
            kernel(args...);
            block_done.arrive_and_wait();  // the next block reuses the shared memory
          }
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  running_block = nullptr;
}

}  // namespace kiln::emulation

#define threadIdx ::kiln::emulation::thread_index
#define blockIdx ::kiln::emulation::block_index
#define blockDim ::kiln::emulation::block_dim
#define gridDim ::kiln::emulation::grid_dim
#define __syncthreads() ::kiln::emulation::sync_threads()
#define __shfl_down_sync(mask, value, delta) ::kiln::emulation::shuffle_down(mask, value, delta)
#define KILN_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::kiln::emulation::shared_memory())
