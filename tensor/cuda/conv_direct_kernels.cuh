// The direct CUDA convolution kernels (Note [Direct CUDA convolution] in
// conv_direct.h) and the shapes they are launched with, in a header that
// plain C++ can include too (Note [Emulated kernels]). Index names: n image,
// c input channel, o output channel, (iy, ix) input position, (oy, ox)
// output position, (ki, kj) kernel tap, t = (c * kh + ki) * kw + kj a tap's
// index in a weight row, j a channel's place in its tile.
//
// Note [Emulated kernels]
// A machine without a GPU cannot run a kernel, yet most of what can be wrong
// in one is its index arithmetic, which does not need a GPU to check. So
// these kernels use nothing but CUDA's thread and block indices,
// __syncthreads, __shfl_down_sync and dynamic shared memory (through
// KILN_DYNAMIC_SHARED below), and tests/tensor/cuda_emulation.h can compile
// them as C++ and run each block's threads as host threads
// (tests/tensor/cuda_direct_conv_emulation_test.cpp compares them with the
// CPU backend on every CI run). That checks the arithmetic; speed, memory
// ordering and the real hardware are checked by the CUDA tests on a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tensor/cuda/conv_direct.h"

#ifndef KILN_CUDA_EMULATION
#include <cuda_runtime.h>
// A kernel's dynamic shared memory (the launch's third parameter) as T*.
#define KILN_DYNAMIC_SHARED(T, name)                              \
  extern __shared__ __align__(16) unsigned char name##_storage[]; \
  T* name = reinterpret_cast<T*>(name##_storage)
#endif

namespace kiln::cuda::direct_conv {

constexpr int kTile = kDirectConvChannelTile;
constexpr int kBlockThreads = 256;  // the most threads a block gets
constexpr int kWarp = 32;

// The geometry in the 32-bit form the kernels index with inside one image;
// direct_conv_applies keeps every plane under 2^31 elements.
struct Geometry32 {
  int channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int out_h, out_w;
  __host__ __device__ int taps() const { return channels * kernel_h * kernel_w; }
  __host__ __device__ int in_plane() const { return height * width; }
  __host__ __device__ int out_plane() const { return out_h * out_w; }
};

// Along one axis: the output position that reads input position i through
// tap k, or -1 when none does (output_reading of conv_geometry.cuh, in 32
// bits, with stride 1 spared the division).
__device__ inline int reading_output(int i, int k, int pad, int dilation, int stride, int out) {
  const int shifted = i + pad - k * dilation;
  if (shifted < 0) return -1;
  if (stride == 1) return shifted < out ? shifted : -1;
  if (shifted % stride != 0 || shifted / stride >= out) return -1;
  return shifted / stride;
}

// out (N, OC, oh, ow) = conv(x (N, C, H, W), weight (OC, taps)) + bias (OC,
// or null); all contiguous. Block (position range, image, channel tile).
template <class T>
__global__ void forward_kernel(T* out, const T* x, const T* weight, const T* bias, Geometry32 g, int out_channels,
                               int64_t images) {
  const int taps = g.taps(), o0 = blockIdx.z * kTile;
  // The tile's weights as [t][j]: a product reads kTile neighbours.
  KILN_DYNAMIC_SHARED(T, w);
  for (int i = threadIdx.x; i < taps * kTile; i += blockDim.x) {
    const int t = i / kTile, o = o0 + i % kTile;
    w[i] = o < out_channels ? weight[static_cast<int64_t>(o) * taps + t] : T(0);
  }
  __syncthreads();
  const int q = blockIdx.x * blockDim.x + threadIdx.x;  // output position in the plane
  if (q >= g.out_plane()) return;
  const int oy = q / g.out_w, ox = q % g.out_w;
  const int y0 = oy * g.stride_h - g.pad_h, x0 = ox * g.stride_w - g.pad_w;
  T start[kTile];
#pragma unroll
  for (int j = 0; j < kTile; ++j) start[j] = bias != nullptr && o0 + j < out_channels ? bias[o0 + j] : T(0);
  for (int64_t n = blockIdx.y; n < images; n += gridDim.y) {
    T acc[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc[j] = start[j];
    const T* image = x + n * g.channels * static_cast<int64_t>(g.in_plane());
    for (int c = 0; c < g.channels; ++c) {
      const T* plane = image + c * static_cast<int64_t>(g.in_plane());
      for (int ki = 0; ki < g.kernel_h; ++ki) {
        const int iy = y0 + ki * g.dilation_h;
        if (iy < 0 || iy >= g.height) continue;
        const T* row = plane + iy * g.width;
        const T* wt = w + ((c * g.kernel_h + ki) * g.kernel_w) * kTile;
        for (int kj = 0; kj < g.kernel_w; ++kj) {
          const int ix = x0 + kj * g.dilation_w;
          if (ix < 0 || ix >= g.width) continue;
          const T v = row[ix];
#pragma unroll
          for (int j = 0; j < kTile; ++j) acc[j] += v * wt[kj * kTile + j];
        }
      }
    }
    T* o_at = out + (n * out_channels + o0) * static_cast<int64_t>(g.out_plane()) + q;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      if (o0 + j < out_channels) o_at[static_cast<int64_t>(j) * g.out_plane()] = acc[j];
    }
  }
}

// grad_input (N, C, H, W) from grad_out (N, OC, oh, ow) and weight (OC, taps);
// all contiguous. Block (position range, image, channel tile).
template <class T>
__global__ void grad_input_kernel(T* grad_input, const T* grad_out, const T* weight, Geometry32 g, int out_channels,
                                  int64_t images) {
  const int window = g.kernel_h * g.kernel_w, c0 = blockIdx.z * kTile;
  // The tile's weights as [o][ki][kj][j].
  KILN_DYNAMIC_SHARED(T, w);
  for (int i = threadIdx.x; i < out_channels * window * kTile; i += blockDim.x) {
    const int j = i % kTile, k = (i / kTile) % window, o = i / (kTile * window), c = c0 + j;
    w[i] = c < g.channels ? weight[(static_cast<int64_t>(o) * g.channels + c) * window + k] : T(0);
  }
  __syncthreads();
  const int q = blockIdx.x * blockDim.x + threadIdx.x;  // input position in the plane
  if (q >= g.in_plane()) return;
  const int iy = q / g.width, ix = q % g.width;
  for (int64_t n = blockIdx.y; n < images; n += gridDim.y) {
    T acc[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc[j] = T(0);
    const T* image = grad_out + n * out_channels * static_cast<int64_t>(g.out_plane());
    for (int o = 0; o < out_channels; ++o) {
      const T* plane = image + o * static_cast<int64_t>(g.out_plane());
      for (int ki = 0; ki < g.kernel_h; ++ki) {
        const int oy = reading_output(iy, ki, g.pad_h, g.dilation_h, g.stride_h, g.out_h);
        if (oy < 0) continue;
        const T* row = plane + oy * g.out_w;
        const T* wt = w + (o * window + ki * g.kernel_w) * kTile;
        for (int kj = 0; kj < g.kernel_w; ++kj) {
          const int ox = reading_output(ix, kj, g.pad_w, g.dilation_w, g.stride_w, g.out_w);
          if (ox < 0) continue;
          const T v = row[ox];
#pragma unroll
          for (int j = 0; j < kTile; ++j) acc[j] += v * wt[kj * kTile + j];
        }
      }
    }
    T* i_at = grad_input + (n * g.channels + c0) * static_cast<int64_t>(g.in_plane()) + q;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      if (c0 + j < g.channels) i_at[static_cast<int64_t>(j) * g.in_plane()] = acc[j];
    }
  }
}

// Block (range, o): every tap t = (c, ki, kj) of output channel o summed
// over output rows [range * range_rows, ...) of the N*oh rows, walked image
// by image. Along a row the tap reads input columns ox * stride_w + kx, so
// the columns inside the image are one interval [lo, hi) found once per
// thread, and the inner loop is two loads and a product, with no bounds
// check or division. Within a range the products are summed in T
// (converting each to double would cost more than the product: the GPU
// converts at a fraction of its FMA rate), the ranges' sums in double; two
// accumulators take alternate columns, so two sums are in flight. When
// grad_bias is not null, thread t = taps sums grad_out itself over the same
// rows: the bias's gradient. Entry e is weight e (o * taps + t) below
// OC * taps, bias e - OC * taps above; with one range its sum is the
// gradient's value, otherwise it goes to partial[e * ranges + range].
template <class T>
__global__ void grad_weight_kernel(T* grad_weight, T* grad_bias, double* partial, const T* grad_out, const T* x,
                                   Geometry32 g, int out_channels, int64_t rows, int64_t range_rows) {
  const int o = blockIdx.y, taps = g.taps(), ranges = gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * range_rows;
  const int64_t count = rows - first < range_rows ? rows - first : range_rows;
  const int64_t grad_image = static_cast<int64_t>(out_channels) * g.out_plane();
  const int64_t x_image = static_cast<int64_t>(g.channels) * g.in_plane();
  const int64_t weights = static_cast<int64_t>(out_channels) * taps;
  auto finish = [&](int64_t entry, T even, T odd) {
    const double sum = static_cast<double>(even) + static_cast<double>(odd);
    if (ranges > 1) {
      partial[entry * ranges + blockIdx.x] = sum;
    } else if (entry < weights) {
      grad_weight[entry] = static_cast<T>(sum);
    } else {
      grad_bias[entry - weights] = static_cast<T>(sum);
    }
  };
  const int64_t n = first / g.out_h;
  const int first_row = static_cast<int>(first % g.out_h);
  if (grad_bias != nullptr && threadIdx.x == (taps % blockDim.x)) {
    // The bias: every column of every row of the range.
    const T* dy_plane = grad_out + n * grad_image + o * static_cast<int64_t>(g.out_plane());
    int oy = first_row;
    T even = 0, odd = 0;
    for (int64_t r = 0; r < count; ++r) {
      const T* dy_row = dy_plane + oy * g.out_w;
      int ox = 0;
      for (; ox + 1 < g.out_w; ox += 2) {
        even += dy_row[ox];
        odd += dy_row[ox + 1];
      }
      if (ox < g.out_w) even += dy_row[ox];
      if (++oy == g.out_h) {
        oy = 0;
        dy_plane += grad_image;
      }
    }
    finish(weights + o, even, odd);
  }
  for (int t = threadIdx.x; t < taps; t += blockDim.x) {
    const int kj = t % g.kernel_w, ki = (t / g.kernel_w) % g.kernel_h, c = t / (g.kernel_w * g.kernel_h);
    const int ky = ki * g.dilation_h - g.pad_h, kx = kj * g.dilation_w - g.pad_w;
    // Output columns ox with 0 <= ox * stride_w + kx < width.
    const int lo = kx >= 0 ? 0 : (-kx + g.stride_w - 1) / g.stride_w;
    const int last_column = g.width - 1 - kx;
    const int hi =
        last_column < 0 ? 0 : (last_column / g.stride_w + 1 < g.out_w ? last_column / g.stride_w + 1 : g.out_w);
    int oy = first_row;
    const T* dy_plane = grad_out + n * grad_image + o * static_cast<int64_t>(g.out_plane());
    const T* x_plane = x + n * x_image + c * static_cast<int64_t>(g.in_plane());
    T even = 0, odd = 0;
    for (int64_t r = 0; r < count; ++r) {
      const int iy = oy * g.stride_h + ky;
      if (iy >= 0 && iy < g.height) {
        const T* dy_row = dy_plane + oy * g.out_w;
        const int base = iy * g.width + kx;  // x_plane[base + ox * stride_w] is the tap's input
        int ox = lo;
        for (; ox + 1 < hi; ox += 2) {
          even += dy_row[ox] * x_plane[base + ox * g.stride_w];
          odd += dy_row[ox + 1] * x_plane[base + (ox + 1) * g.stride_w];
        }
        if (ox < hi) even += dy_row[ox] * x_plane[base + ox * g.stride_w];
      }
      if (++oy == g.out_h) {
        oy = 0;
        dy_plane += grad_image;
        x_plane += x_image;
      }
    }
    finish(static_cast<int64_t>(o) * taps + t, even, odd);
  }
}

// Entry e's gradient (grad_weight_kernel's entries) = the sum of
// partial[e * ranges ...], a warp per entry: lane l adds ranges l, l + 32,
// ..., then the lanes combine in a fixed tree.
template <class T>
__global__ void grad_weight_sum_kernel(T* grad_weight, T* grad_bias, const double* partial, int64_t weights,
                                       int64_t entries, int ranges) {
  constexpr int kWarps = kBlockThreads / kWarp;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (e >= entries) return;  // the whole warp: e is the same for its lanes
  double sum = 0;
  for (int r = lane; r < ranges; r += 32) sum += partial[e * ranges + r];
#pragma unroll
  for (int delta = 16; delta > 0; delta /= 2) sum += __shfl_down_sync(0xffffffffu, sum, delta);
  if (lane == 0) {
    if (e < weights) {
      grad_weight[e] = static_cast<T>(sum);
    } else {
      grad_bias[e - weights] = static_cast<T>(sum);
    }
  }
}

// ---- launch shapes (host) ----

// A kernel's grid (x, y, z), threads per block and dynamic shared bytes.
struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned threads = kBlockThreads;
  size_t shared_bytes = 0;
};

// Images go to grid y, which CUDA caps at 65535; larger batches loop.
constexpr int64_t kMaxGridY = 65535;

inline int64_t divide_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A block's threads over one image plane of `plane` positions:
// kBlockThreads, or the plane rounded up to whole warps when it is smaller.
inline unsigned plane_threads(int64_t plane) {
  return static_cast<unsigned>(std::min<int64_t>(kBlockThreads, divide_up(plane, kWarp) * kWarp));
}

// Grid (position blocks, images, channel tiles) over planes of `plane`
// positions, with `staged` weights of `element` bytes in shared memory.
inline LaunchShape plane_shape(int64_t plane, int64_t images, int64_t channels, int64_t staged, size_t element) {
  LaunchShape s;
  s.threads = plane_threads(plane);
  s.grid_x = static_cast<unsigned>(divide_up(plane, s.threads));
  s.grid_y = static_cast<unsigned>(std::min(images, kMaxGridY));
  s.grid_z = static_cast<unsigned>(divide_up(channels, kTile));
  s.shared_bytes = static_cast<size_t>(staged) * kTile * element;
  return s;
}

inline LaunchShape forward_shape(const Geometry32& g, int64_t images, int64_t out_channels, size_t element) {
  return plane_shape(g.out_plane(), images, out_channels, g.taps(), element);
}

inline LaunchShape grad_input_shape(const Geometry32& g, int64_t images, int64_t out_channels, size_t element) {
  return plane_shape(g.in_plane(), images, g.channels, out_channels * g.kernel_h * g.kernel_w, element);
}

// Ranges of output rows for grad_weight: about kWeightBlocks blocks in all
// (enough to fill a large GPU at any batch size), each walking at least
// kMinRangePositions positions. Shapes alone decide, so the sums' order,
// and with it their rounding, is the same on every GPU.
constexpr int64_t kWeightBlocks = 2048;
constexpr int64_t kMinRangePositions = 256;

// grad_weight_kernel's split of the N*oh output rows, and both launches.
struct WeightPlan {
  int64_t rows = 0, range_rows = 0, ranges = 0;
  int64_t weights = 0, entries = 0;  // entries: the weights, and the biases when wanted
  LaunchShape partial, sum;          // sum: only when ranges > 1
};

inline WeightPlan grad_weight_plan(const Geometry32& g, int64_t images, int64_t out_channels, bool bias) {
  WeightPlan p;
  p.rows = images * g.out_h;
  p.weights = out_channels * g.taps();
  p.entries = p.weights + (bias ? out_channels : 0);
  const int64_t wanted = std::max<int64_t>(1, kWeightBlocks / out_channels);
  p.range_rows = std::max(divide_up(kMinRangePositions, g.out_w), divide_up(p.rows, wanted));
  p.ranges = divide_up(p.rows, p.range_rows);
  const int64_t per_channel = p.entries / out_channels;  // taps, and the bias's sum when wanted
  p.partial.grid_x = static_cast<unsigned>(p.ranges);
  p.partial.grid_y = static_cast<unsigned>(out_channels);
  p.partial.threads = static_cast<unsigned>(std::min<int64_t>(kBlockThreads, divide_up(per_channel, kWarp) * kWarp));
  p.sum.grid_x = static_cast<unsigned>(divide_up(p.entries, kBlockThreads / kWarp));
  p.sum.threads = kBlockThreads;
  return p;
}

}  // namespace kiln::cuda::direct_conv
