// The emulation the CUDA kernel tests run on (tests/tensor/cuda_emulation.h,
// Note [Threads as fibers]): its barriers hold, its shuffles exchange, and a
// block that could never finish is reported rather than hung.
#include "tests/tensor/cuda_emulation.h"
// After the emulation, as in the kernel tests.
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

namespace kiln {
namespace {

using emulation::Dim3;

// Each block reverses its slice of `in` through shared memory. Without a
// barrier between the writes and the reads, thread 0 would read a slot
// thread blockDim.x - 1 has not written yet.
__global__ void reverse_kernel(int* out, const int* in) {
  KILN_DYNAMIC_SHARED(int, slots);
  const unsigned t = threadIdx.x, base = blockIdx.x * blockDim.x;
  slots[t] = in[base + t];
  __syncthreads();
  out[base + t] = slots[blockDim.x - 1 - t];
}

TEST(CudaEmulation, SyncThreadsIsABarrierForTheWholeBlock) {
  const unsigned threads = 96, blocks = 3;
  std::vector<int> in(threads * blocks), out(in.size(), -1);
  std::iota(in.begin(), in.end(), 100);
  emulation::launch(Dim3{blocks, 1, 1}, threads, threads * sizeof(int), reverse_kernel, out.data(), in.data());
  for (unsigned b = 0; b < blocks; ++b) {
    for (unsigned t = 0; t < threads; ++t) {
      EXPECT_EQ(out[b * threads + t], in[b * threads + threads - 1 - t]) << "block " << b << " thread " << t;
    }
  }
}

// Each warp sums its lanes' values with the shuffle tree CUDA kernels use;
// lane 0 writes the sum.
__global__ void warp_sum_kernel(double* sums, const double* values) {
  const unsigned t = threadIdx.x;
  const unsigned global = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + t;
  double v = values[global];
  for (int delta = 16; delta > 0; delta /= 2) v += __shfl_down_sync(0xffffffffu, v, delta);
  if (t % 32 == 0) sums[global / 32] = v;
}

TEST(CudaEmulation, ShuffleDownSumsEachWarpInEveryBlockOfATwoDimensionalGrid) {
  const unsigned threads = 64;
  const Dim3 grid{2, 3, 1};
  const unsigned n = threads * grid.x * grid.y;
  std::vector<double> values(n), sums(n / 32, -1);
  for (unsigned i = 0; i < n; ++i) values[i] = (i * 7 % 13) - 6.5;
  emulation::launch(grid, threads, 0, warp_sum_kernel, sums.data(), values.data());
  for (unsigned w = 0; w < n / 32; ++w) {
    double expected = 0;
    for (unsigned lane = 0; lane < 32; ++lane) expected += values[w * 32 + lane];
    EXPECT_EQ(sums[w], expected) << "warp " << w;
  }
}

// Thread 0 leaves before the barrier the others wait at.
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaEmulation, ABarrierNotEveryThreadReachesIsReportedNotHung) {
  std::vector<int> out(64, 0);
  try {
    emulation::launch(Dim3{1, 1, 1}, 64, 0, divergent_barrier_kernel, out.data());
    FAIL() << "the launch returned";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("block (0,0,0) has 63 threads waiting at barriers that can never open"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(out[1], 0) << "a thread passed the barrier";
}

__global__ void throwing_kernel(int* out) {
  out[threadIdx.x] = 1;
  if (blockIdx.x == 1 && threadIdx.x == 5) throw std::runtime_error("thread 5 of block 1");
}

TEST(CudaEmulation, WhatAThreadThrowsReachesTheLauncherAfterItsBlock) {
  std::vector<int> out(32, 0);
  EXPECT_THROW(
      {
        try {
          emulation::launch(Dim3{3, 1, 1}, 32, 0, throwing_kernel, out.data());
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "thread 5 of block 1");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(emulation::running_block, nullptr);
  // A later launch runs normally.
  std::vector<int> again(32, 0);
  emulation::launch(Dim3{1, 1, 1}, 32, 0, throwing_kernel, again.data());
  EXPECT_EQ(std::accumulate(again.begin(), again.end(), 0), 32);
}

}  // namespace
}  // namespace kiln
