// Deterministic sums across a thread block, for the normalization kernels.
//
// Every thread holds a partial value; block_sum adds them in a fixed tree
// order (warp shuffles, then the warps' results through shared memory), so
// the result depends only on the inputs and the block size, never on which
// warp finishes first. Kiln's CUDA reductions never use floating-point
// atomics for the same reason (Note [Normalization statistics] in
// tensor/norm.h asks for results that do not vary from run to run).
#pragma once

#include <cuda_runtime.h>

namespace kiln::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr int kMaxWarpsPerBlock = 32;

// A pair of double sums: the normalization kernels always want two.
struct SumPair {
  double first = 0, second = 0;
  __device__ SumPair& operator+=(const SumPair& other) {
    first += other.first;
    second += other.second;
    return *this;
  }
};

__device__ inline SumPair warp_sum(SumPair value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value.first += __shfl_down_sync(0xffffffffu, value.first, offset);
    value.second += __shfl_down_sync(0xffffffffu, value.second, offset);
  }
  return value;
}

// The sum over the block, returned to every thread. blockDim.x must be a
// multiple of 32 (at most 1024), and every thread of the block must call it.
__device__ inline SumPair block_sum(SumPair value) {
  __shared__ SumPair warp_sums[kMaxWarpsPerBlock];
  __shared__ SumPair total;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  value = warp_sum(value);
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  if (warp == 0) {
    SumPair sum = lane < warps ? warp_sums[lane] : SumPair{};
    sum = warp_sum(sum);
    if (lane == 0) total = sum;
  }
  __syncthreads();
  SumPair result = total;
  // The shared slots are reused by the next call; nobody may overwrite them
  // before every thread has read `total`.
  __syncthreads();
  return result;
}

}  // namespace kiln::cuda
