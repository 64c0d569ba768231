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
// them as C++ and run each block's threads as fibers on one host thread
// (Note [Threads as fibers] there; tests/tensor/cuda_direct_conv_emulation_test.cpp
// compares them with the CPU backend on every CI run). That checks the arithmetic; speed, memory
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

constexpr int kForwardTile = kDirectConvForwardTile;
constexpr int kGradInputTile = kDirectConvGradInputTile;
constexpr int kWeightChannels = 8;  // output channels a grad_weight_lanes_kernel warp sums for
constexpr int kBlockThreads = 256;  // the most threads a block gets
constexpr int kWarp = 32;

// A convolution's params and shape in the 32-bit form the kernels index
// with inside one image, a form of their own (Note [One convolution
// parameter struct] in tensor/conv.h); direct_conv_applies keeps every plane
// under 2^31 - 256 elements.
struct Geometry32 {
  int channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int out_h, out_w;
  __host__ __device__ int taps() const { return channels * kernel_h * kernel_w; }
  __host__ __device__ int in_plane() const { return height * width; }
  __host__ __device__ int out_plane() const { return out_h * out_w; }
};

// p and s in that form; direct_conv_applies has checked that they fit.
inline Geometry32 geometry32(const Conv2dParams& p, const Conv2dShape& s) {
  auto narrow = [](int64_t v) { return static_cast<int>(v); };
  return {narrow(s.channels),   narrow(s.input.h),  narrow(s.input.w),   narrow(s.kernel.h),  narrow(s.kernel.w),
          narrow(p.stride.h),   narrow(p.stride.w), narrow(p.padding.h), narrow(p.padding.w), narrow(p.dilation.h),
          narrow(p.dilation.w), narrow(s.output.h), narrow(s.output.w)};
}

// Along one axis: the output position that reads input position i through
// tap k, or -1 when none does (output_reading of im2col.cu, in 32
// bits, with stride 1 spared the division).
__device__ inline int reading_output(int i, int k, int pad, int dilation, int stride, int out) {
  const int shifted = i + pad - k * dilation;
  if (shifted < 0) return -1;
  if (stride == 1) return shifted < out ? shifted : -1;
  if (shifted % stride != 0 || shifted / stride >= out) return -1;
  return shifted / stride;
}

// ---- what the kernels share ----

// Stages channels [c0, c0 + kTileSize) of the weights as w[k * kTileSize + j]
// = weight of channel c0 + j at k, 0 past `channels`, for k < count;
// `at(c, k)` is that weight's index in `weight`. Every thread of the block
// calls it (it ends with a barrier).
template <int kTileSize, class T, class At>
__device__ inline void stage_tile(T* w, const T* weight, int count, int c0, int channels, const At& at) {
  for (int i = threadIdx.x; i < count * kTileSize; i += blockDim.x) {
    const int k = i / kTileSize, c = c0 + i % kTileSize;
    w[i] = c < channels ? weight[at(c, k)] : T(0);
  }
  __syncthreads();
}

// Writes acc[j] to at[j * plane] for the tile's channels below `channels`.
template <int kTileSize, class T>
__device__ inline void write_tile(T* at, const T (&acc)[kTileSize], int c0, int channels, int plane) {
#pragma unroll
  for (int j = 0; j < kTileSize; ++j) {
    if (c0 + j < channels) at[static_cast<int64_t>(j) * plane] = acc[j];
  }
}

// ---- any kernel size ----

// out (N, OC, oh, ow) = conv(x (N, C, H, W), weight (OC, taps)) + bias (OC,
// or null); all contiguous. Block (position range, image, channel tile).
template <class T>
__global__ void forward_kernel(T* out, const T* x, const T* weight, const T* bias, Geometry32 g, int out_channels,
                               int64_t images) {
  const int taps = g.taps(), o0 = blockIdx.z * kForwardTile;
  // The tile's weights as [t][j]: a product reads kForwardTile neighbours.
  KILN_DYNAMIC_SHARED(T, w);
  stage_tile<kForwardTile>(w, weight, taps, o0, out_channels,
                           [taps](int o, int t) { return static_cast<int64_t>(o) * taps + t; });
  const int q = blockIdx.x * blockDim.x + threadIdx.x;  // output position in the plane
  if (q >= g.out_plane()) return;
  const int oy = q / g.out_w, ox = q % g.out_w;
  const int y0 = oy * g.stride_h - g.pad_h, x0 = ox * g.stride_w - g.pad_w;
  T start[kForwardTile];
#pragma unroll
  for (int j = 0; j < kForwardTile; ++j) start[j] = bias != nullptr && o0 + j < out_channels ? bias[o0 + j] : T(0);
  for (int64_t n = blockIdx.y; n < images; n += gridDim.y) {
    T acc[kForwardTile];
#pragma unroll
    for (int j = 0; j < kForwardTile; ++j) acc[j] = start[j];
    const T* image = x + n * g.channels * static_cast<int64_t>(g.in_plane());
    for (int c = 0; c < g.channels; ++c) {
      const T* plane = image + c * static_cast<int64_t>(g.in_plane());
      for (int ki = 0; ki < g.kernel_h; ++ki) {
        const int iy = y0 + ki * g.dilation_h;
        if (iy < 0 || iy >= g.height) continue;
        const T* row = plane + iy * g.width;
        const T* wt = w + ((c * g.kernel_h + ki) * g.kernel_w) * kForwardTile;
        for (int kj = 0; kj < g.kernel_w; ++kj) {
          const int ix = x0 + kj * g.dilation_w;
          if (ix < 0 || ix >= g.width) continue;
          const T v = row[ix];
#pragma unroll
          for (int j = 0; j < kForwardTile; ++j) acc[j] += v * wt[kj * kForwardTile + j];
        }
      }
    }
    write_tile(out + (n * out_channels + o0) * static_cast<int64_t>(g.out_plane()) + q, acc, o0, out_channels,
               g.out_plane());
  }
}

// grad_input (N, C, H, W) from grad_out (N, OC, oh, ow) and weight (OC, taps);
// all contiguous. Block (position range, image, channel tile).
template <class T>
__global__ void grad_input_kernel(T* grad_input, const T* grad_out, const T* weight, Geometry32 g, int out_channels,
                                  int64_t images) {
  const int window = g.kernel_h * g.kernel_w, c0 = blockIdx.z * kGradInputTile;
  // The tile's weights as [o][ki][kj][j].
  KILN_DYNAMIC_SHARED(T, w);
  const int channels = g.channels;
  stage_tile<kGradInputTile>(w, weight, out_channels * window, c0, channels, [window, channels](int c, int ok) {
    return (static_cast<int64_t>(ok / window) * channels + c) * window + ok % window;  // ok = o * window + k
  });
  const int q = blockIdx.x * blockDim.x + threadIdx.x;  // input position in the plane
  if (q >= g.in_plane()) return;
  const int iy = q / g.width, ix = q % g.width;
  for (int64_t n = blockIdx.y; n < images; n += gridDim.y) {
    T acc[kGradInputTile];
#pragma unroll
    for (int j = 0; j < kGradInputTile; ++j) acc[j] = T(0);
    const T* image = grad_out + n * out_channels * static_cast<int64_t>(g.out_plane());
    for (int o = 0; o < out_channels; ++o) {
      const T* plane = image + o * static_cast<int64_t>(g.out_plane());
      for (int ki = 0; ki < g.kernel_h; ++ki) {
        const int oy = reading_output(iy, ki, g.pad_h, g.dilation_h, g.stride_h, g.out_h);
        if (oy < 0) continue;
        const T* row = plane + oy * g.out_w;
        const T* wt = w + (o * window + ki * g.kernel_w) * kGradInputTile;
        for (int kj = 0; kj < g.kernel_w; ++kj) {
          const int ox = reading_output(ix, kj, g.pad_w, g.dilation_w, g.stride_w, g.out_w);
          if (ox < 0) continue;
          const T v = row[ox];
#pragma unroll
          for (int j = 0; j < kGradInputTile; ++j) acc[j] += v * wt[kj * kGradInputTile + j];
        }
      }
    }
    write_tile(grad_input + (n * g.channels + c0) * static_cast<int64_t>(g.in_plane()) + q, acc, c0, g.channels,
               g.in_plane());
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

// ---- 3x3 and 5x5: the kernel size known at compile time ----
// The same work as the kernels above, with the taps unrolled: which taps
// fall inside the image is a bit mask computed once per thread (it depends
// on the position only, not on the image or channel), and the loads go
// from one pointer per (image, channel) with constant offsets, so a tap is a
// load, a shared-memory read of the tile's weights and its products. On an
// H100 this took LeNet's forward and grad_input 2 to 3 times below the
// kernels above (session 12's review, measured kernel by kernel).

template <class T, int KH, int KW>
__global__ void __launch_bounds__(kBlockThreads, 4)
    forward_fixed_kernel(T* out, const T* x, const T* weight, const T* bias, Geometry32 g, int out_channels,
                         int64_t images) {
  constexpr int kTileSize = kForwardTile;
  const int taps = g.channels * KH * KW, o0 = blockIdx.z * kTileSize;
  KILN_DYNAMIC_SHARED(T, w);  // the tile's weights as [t][j]
  stage_tile<kTileSize>(w, weight, taps, o0, out_channels,
                        [taps](int o, int t) { return static_cast<int64_t>(o) * taps + t; });
  const int q = blockIdx.x * blockDim.x + threadIdx.x;  // output position in the plane
  if (q >= g.out_plane()) return;
  const int oy = q / g.out_w, ox = q % g.out_w;
  const int y0 = oy * g.stride_h - g.pad_h, x0 = ox * g.stride_w - g.pad_w;
  unsigned rows = 0, cols = 0;  // bit k: tap row (column) k reads inside the image
#pragma unroll
  for (int k = 0; k < KH; ++k) rows |= (y0 + k * g.dilation_h >= 0 && y0 + k * g.dilation_h < g.height) ? 1u << k : 0u;
#pragma unroll
  for (int k = 0; k < KW; ++k) cols |= (x0 + k * g.dilation_w >= 0 && x0 + k * g.dilation_w < g.width) ? 1u << k : 0u;
  const int row_step = g.dilation_h * g.width, col_step = g.dilation_w, in_plane = g.in_plane();
  T start[kTileSize];
#pragma unroll
  for (int j = 0; j < kTileSize; ++j) start[j] = bias != nullptr && o0 + j < out_channels ? bias[o0 + j] : T(0);
  for (int64_t n = blockIdx.y; n < images; n += gridDim.y) {
    T acc[kTileSize];
#pragma unroll
    for (int j = 0; j < kTileSize; ++j) acc[j] = start[j];
    // p[ki * row_step + kj * col_step] is tap (ki, kj)'s input: p is the
    // window's corner, which with padding lies outside the plane (only the
    // taps inside are read).
    const T* p = x + n * g.channels * static_cast<int64_t>(in_plane) + (y0 * g.width + x0);
    for (int c = 0; c < g.channels; ++c, p += in_plane) {
      const T* wc = w + c * (KH * KW * kTileSize);
#pragma unroll
      for (int ki = 0; ki < KH; ++ki) {
#pragma unroll
        for (int kj = 0; kj < KW; ++kj) {
          if ((rows >> ki) & (cols >> kj) & 1u) {
            const T v = p[ki * row_step + kj * col_step];
#pragma unroll
            for (int j = 0; j < kTileSize; ++j) acc[j] += v * wc[(ki * KW + kj) * kTileSize + j];
          }
        }
      }
    }
    write_tile(out + (n * out_channels + o0) * static_cast<int64_t>(g.out_plane()) + q, acc, o0, out_channels,
               g.out_plane());
  }
}

template <class T, int KH, int KW>
__global__ void __launch_bounds__(kBlockThreads, 3)
    grad_input_fixed_kernel(T* grad_input, const T* grad_out, const T* weight, Geometry32 g, int out_channels,
                            int64_t images) {
  constexpr int kTileSize = kGradInputTile, kWindow = KH * KW;
  const int c0 = blockIdx.z * kTileSize;
  KILN_DYNAMIC_SHARED(T, w);  // the tile's weights as [o][ki][kj][j]
  const int channels = g.channels;
  stage_tile<kTileSize>(w, weight, out_channels * kWindow, c0, channels, [channels](int c, int ok) {
    return (static_cast<int64_t>(ok / kWindow) * channels + c) * kWindow + ok % kWindow;  // ok = o * kWindow + k
  });
  const int q = blockIdx.x * blockDim.x + threadIdx.x;  // input position in the plane
  if (q >= g.in_plane()) return;
  const int iy = q / g.width, ix = q % g.width;
  // Where each tap's output sits in an output plane, and which taps have one.
  int at[KH][KW];
  unsigned valid = 0;
#pragma unroll
  for (int ki = 0; ki < KH; ++ki) {
    const int oy = reading_output(iy, ki, g.pad_h, g.dilation_h, g.stride_h, g.out_h);
#pragma unroll
    for (int kj = 0; kj < KW; ++kj) {
      const int ox = reading_output(ix, kj, g.pad_w, g.dilation_w, g.stride_w, g.out_w);
      at[ki][kj] = oy * g.out_w + ox;
      if (oy >= 0 && ox >= 0) valid |= 1u << (ki * KW + kj);
    }
  }
  const int out_plane = g.out_plane();
  for (int64_t n = blockIdx.y; n < images; n += gridDim.y) {
    T acc[kTileSize];
#pragma unroll
    for (int j = 0; j < kTileSize; ++j) acc[j] = T(0);
    const T* plane = grad_out + n * out_channels * static_cast<int64_t>(out_plane);
    for (int o = 0; o < out_channels; ++o, plane += out_plane) {
      const T* wo = w + o * (kWindow * kTileSize);
#pragma unroll
      for (int ki = 0; ki < KH; ++ki) {
#pragma unroll
        for (int kj = 0; kj < KW; ++kj) {
          if ((valid >> (ki * KW + kj)) & 1u) {
            const T v = plane[at[ki][kj]];
#pragma unroll
            for (int j = 0; j < kTileSize; ++j) acc[j] += v * wo[(ki * KW + kj) * kTileSize + j];
          }
        }
      }
    }
    write_tile(grad_input + (n * g.channels + c0) * static_cast<int64_t>(g.in_plane()) + q, acc, c0, g.channels,
               g.in_plane());
  }
}

// grad_weight with lanes over output positions: a warp per (c, ki, group of
// kWeightChannels output channels), its lane l summing, over the range's
// images, the products of positions l, l + 32, ... for the group's channels
// and the row's KW taps (each x load feeds kWeightChannels products, and a
// warp's loads are neighbouring positions); then the lanes combine in a
// fixed shuffle tree. With grad_bias, one more warp per group sums grad_out
// itself. Entries and partial sums as grad_weight_kernel's. On an H100 this
// took LeNet's weight gradients 2 to 5 times below the rows kernel above.
template <class T, int KW>
__global__ void __launch_bounds__(128)
    grad_weight_lanes_kernel(T* grad_weight, T* grad_bias, double* partial, const T* grad_out, const T* x, Geometry32 g,
                             int out_channels, int64_t images, int64_t range_images) {
  constexpr int kGroup = kWeightChannels;
  const int lane = threadIdx.x % kWarp, ranges = gridDim.x;
  const int warp = blockIdx.y * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int groups = (out_channels + kGroup - 1) / kGroup;
  const int tap_warps = g.channels * g.kernel_h * groups;
  const bool is_bias = warp >= tap_warps;
  if (warp >= tap_warps + (grad_bias != nullptr ? groups : 0)) return;  // a whole warp
  const int group = is_bias ? warp - tap_warps : warp % groups;
  const int row = is_bias ? 0 : warp / groups, c = row / g.kernel_h, ki = row % g.kernel_h;  // row = c * kh + ki
  const int o0 = group * kGroup;
  const int plane = g.out_plane(), in_plane = g.in_plane(), taps = g.taps();
  const int64_t weights = static_cast<int64_t>(out_channels) * taps;
  const int64_t grad_image = static_cast<int64_t>(out_channels) * plane;
  const int64_t x_image = static_cast<int64_t>(g.channels) * in_plane;
  T acc[kGroup][KW];
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
#pragma unroll
    for (int k = 0; k < KW; ++k) acc[j][k] = T(0);
  }
  const int64_t first = static_cast<int64_t>(blockIdx.x) * range_images;
  const int64_t last = images - first < range_images ? images : first + range_images;
  for (int q = lane; q < plane; q += kWarp) {
    const int oy = q / g.out_w, ox = q - oy * g.out_w;
    const int iy = oy * g.stride_h + ki * g.dilation_h - g.pad_h;
    const bool row_inside = !is_bias && iy >= 0 && iy < g.height;
    const int x0 = ox * g.stride_w - g.pad_w;
    unsigned cols = 0;  // bit k: tap column k reads inside the image
#pragma unroll
    for (int k = 0; k < KW; ++k) cols |= (x0 + k * g.dilation_w >= 0 && x0 + k * g.dilation_w < g.width) ? 1u << k : 0u;
    // xq[k * dilation_w] is tap (ki, k)'s input; read only when inside.
    const int64_t x_at = static_cast<int64_t>(iy) * g.width + x0;
    const T* xq = x + first * x_image + c * static_cast<int64_t>(in_plane);
    const T* dq = grad_out + first * grad_image + static_cast<int64_t>(o0) * plane + q;
    for (int64_t n = first; n < last; ++n, xq += x_image, dq += grad_image) {
      T d[kGroup];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) d[j] = o0 + j < out_channels ? dq[static_cast<int64_t>(j) * plane] : T(0);
      if (is_bias) {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) acc[j][0] += d[j];
      } else if (row_inside) {
#pragma unroll
        for (int k = 0; k < KW; ++k) {
          if ((cols >> k) & 1u) {
            const T v = xq[x_at + k * g.dilation_w];
#pragma unroll
            for (int j = 0; j < kGroup; ++j) acc[j][k] += d[j] * v;
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kGroup; ++j) {
#pragma unroll
    for (int k = 0; k < KW; ++k) {
      T v = acc[j][k];
#pragma unroll
      for (int delta = kWarp / 2; delta > 0; delta /= 2) v += __shfl_down_sync(0xffffffffu, v, delta);
      if (lane == 0 && o0 + j < out_channels && (!is_bias || k == 0)) {
        const int64_t e = is_bias ? weights + o0 + j : static_cast<int64_t>(o0 + j) * taps + row * KW + k;
        if (ranges > 1) {
          partial[e * ranges + blockIdx.x] = static_cast<double>(v);
        } else if (e < weights) {
          grad_weight[e] = v;
        } else {
          grad_bias[e - weights] = v;
        }
      }
    }
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

// Grid (position blocks, images, channel tiles of `tile`) over planes of
// `plane` positions, with `staged` weights per tile place of `element`
// bytes in shared memory.
inline LaunchShape plane_shape(int64_t plane, int64_t images, int64_t channels, int tile, int64_t staged,
                               size_t element) {
  LaunchShape s;
  s.threads = plane_threads(plane);
  s.grid_x = static_cast<unsigned>(divide_up(plane, s.threads));
  s.grid_y = static_cast<unsigned>(std::min(images, kMaxGridY));
  s.grid_z = static_cast<unsigned>(divide_up(channels, tile));
  s.shared_bytes = static_cast<size_t>(staged) * tile * element;
  return s;
}

inline LaunchShape forward_shape(const Geometry32& g, int64_t images, int64_t out_channels, size_t element) {
  return plane_shape(g.out_plane(), images, out_channels, kForwardTile, g.taps(), element);
}

inline LaunchShape grad_input_shape(const Geometry32& g, int64_t images, int64_t out_channels, size_t element) {
  return plane_shape(g.in_plane(), images, g.channels, kGradInputTile, out_channels * g.kernel_h * g.kernel_w, element);
}

// Whether the compile-time kernels take this kernel size: 3x3 and 5x5.
inline bool fixed_size(int kernel) { return kernel == 3 || kernel == 5; }

// Ranges of grad_weight's work: about kWeightBlocks blocks in all for the
// rows kernel (each walking at least kMinRangePositions positions), about
// kWeightWarps warps' worth of images for the lanes kernel. Shapes alone
// decide, so the sums' order, and with it their rounding, is the same on
// every GPU.
constexpr int64_t kWeightBlocks = 2048;
constexpr int64_t kMinRangePositions = 256;
constexpr int64_t kWeightWarps = 2048;

// How grad_weight runs: which kernel, the split of its work into ranges,
// and both launches.
struct WeightPlan {
  bool lanes = false;                // grad_weight_lanes_kernel (kernel width 3 or 5), else grad_weight_kernel
  int64_t rows = 0, range_rows = 0;  // the rows kernel's: output rows, and rows per range
  int64_t range_images = 0;          // the lanes kernel's: images per range
  int64_t ranges = 0;
  int64_t weights = 0, entries = 0;  // entries: the weights, and the biases when wanted
  LaunchShape partial, sum;          // sum: only when ranges > 1
};

inline WeightPlan grad_weight_plan(const Geometry32& g, int64_t images, int64_t out_channels, bool bias) {
  WeightPlan p;
  p.rows = images * g.out_h;
  p.weights = out_channels * g.taps();
  p.entries = p.weights + (bias ? out_channels : 0);
  if (fixed_size(g.kernel_w)) {
    p.lanes = true;
    const int64_t groups = divide_up(out_channels, kWeightChannels);
    const int64_t warps = g.channels * g.kernel_h * groups + (bias ? groups : 0);
    p.range_images = std::max<int64_t>(1, (images * warps + kWeightWarps / 2) / kWeightWarps);
    p.ranges = divide_up(images, p.range_images);
    p.partial.threads = 128;
    p.partial.grid_x = static_cast<unsigned>(p.ranges);
    p.partial.grid_y = static_cast<unsigned>(divide_up(warps, p.partial.threads / kWarp));
  } else {
    const int64_t wanted = std::max<int64_t>(1, kWeightBlocks / out_channels);
    p.range_rows = std::max(divide_up(kMinRangePositions, g.out_w), divide_up(p.rows, wanted));
    p.ranges = divide_up(p.rows, p.range_rows);
    const int64_t per_channel = p.entries / out_channels;  // taps, and the bias's sum when wanted
    p.partial.grid_x = static_cast<unsigned>(p.ranges);
    p.partial.grid_y = static_cast<unsigned>(out_channels);
    p.partial.threads = static_cast<unsigned>(std::min<int64_t>(kBlockThreads, divide_up(per_channel, kWarp) * kWarp));
  }
  p.sum.grid_x = static_cast<unsigned>(divide_up(p.entries, kBlockThreads / kWarp));
  p.sum.threads = kBlockThreads;
  return p;
}

// ---- which kernel runs ----
// launch(kernel, shape, args...) launches `kernel` (a __global__ function)
// with `shape`: with <<<...>>> on a stream in conv_direct.cu, as fibers
// on the CPU in the emulation test (Note [Emulated kernels]), so that both run
// the same choice.

template <class T, class Launch>
void run_forward(const Launch& launch, T* out, const T* x, const T* weight, const T* bias, const Geometry32& g,
                 int out_channels, int64_t images) {
  const LaunchShape s = forward_shape(g, images, out_channels, sizeof(T));
  if (g.kernel_h == 5 && g.kernel_w == 5) {
    launch(forward_fixed_kernel<T, 5, 5>, s, out, x, weight, bias, g, out_channels, images);
  } else if (g.kernel_h == 3 && g.kernel_w == 3) {
    launch(forward_fixed_kernel<T, 3, 3>, s, out, x, weight, bias, g, out_channels, images);
  } else {
    launch(forward_kernel<T>, s, out, x, weight, bias, g, out_channels, images);
  }
}

template <class T, class Launch>
void run_grad_input(const Launch& launch, T* grad_input, const T* grad_out, const T* weight, const Geometry32& g,
                    int out_channels, int64_t images) {
  const LaunchShape s = grad_input_shape(g, images, out_channels, sizeof(T));
  if (g.kernel_h == 5 && g.kernel_w == 5) {
    launch(grad_input_fixed_kernel<T, 5, 5>, s, grad_input, grad_out, weight, g, out_channels, images);
  } else if (g.kernel_h == 3 && g.kernel_w == 3) {
    launch(grad_input_fixed_kernel<T, 3, 3>, s, grad_input, grad_out, weight, g, out_channels, images);
  } else {
    launch(grad_input_kernel<T>, s, grad_input, grad_out, weight, g, out_channels, images);
  }
}

// `partial` holds plan.entries * plan.ranges doubles when plan.ranges > 1.
template <class T, class Launch>
void run_grad_weight(const Launch& launch, const WeightPlan& plan, T* grad_weight, T* grad_bias, double* partial,
                     const T* grad_out, const T* x, const Geometry32& g, int out_channels, int64_t images) {
  if (!plan.lanes) {
    launch(grad_weight_kernel<T>, plan.partial, grad_weight, grad_bias, partial, grad_out, x, g, out_channels,
           plan.rows, plan.range_rows);
  } else if (g.kernel_w == 5) {
    launch(grad_weight_lanes_kernel<T, 5>, plan.partial, grad_weight, grad_bias, partial, grad_out, x, g, out_channels,
           images, plan.range_images);
  } else {
    launch(grad_weight_lanes_kernel<T, 3>, plan.partial, grad_weight, grad_bias, partial, grad_out, x, g, out_channels,
           images, plan.range_images);
  }
  if (plan.ranges > 1) {
    launch(grad_weight_sum_kernel<T>, plan.sum, grad_weight, grad_bias, static_cast<const double*>(partial),
           plan.weights, plan.entries, static_cast<int>(plan.ranges));
  }
}

}  // namespace kiln::cuda::direct_conv
