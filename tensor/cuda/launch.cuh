// How Kiln launches elementwise CUDA kernels.
//
// Note [CUDA launcher shape]
// Every kernel file has the same two halves:
//   template <class T> __global__ void fill_kernel(T* out, ..., int64_t n);   // device
//   void launch_fill(..., cudaStream_t stream) {                              // host
//     fill_kernel<<<grid_for(n), kThreadsPerBlock, 0, stream>>>(...);
//     KILN_CUDA_CHECK_LAUNCH("fill_kernel");
//   }
// The grid is ceil(n / kThreadsPerBlock) blocks, capped at kMaxBlocks; kernels
// walk their elements with a grid-stride loop, so a capped grid still covers
// every element and the index never needs more than int64. The check right
// after the launch catches configuration errors and "no kernel image for this
// GPU" (built for the wrong architecture) where they happen; faults inside
// the kernel surface at the next synchronizing call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace kiln::cuda {

inline constexpr int kThreadsPerBlock = 256;
// 65536 blocks of 256 threads: enough to fill any current GPU many times over.
inline constexpr int64_t kMaxBlocks = int64_t{1} << 16;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for an elementwise kernel over n > 0 elements.
inline unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min(ceil_div(n, kThreadsPerBlock), kMaxBlocks));
}

// The calling thread's first element and the grid-stride step.
__device__ inline int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace kiln::cuda
