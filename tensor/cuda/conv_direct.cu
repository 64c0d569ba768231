// Kiln's direct CUDA convolution kernels (Note [Direct CUDA convolution] in
// conv_direct.h). Index names: n image, c input channel, o output channel,
// (iy, ix) input position, (oy, ox) output position, (ki, kj) kernel tap,
// t = (c * kh + ki) * kw + kj a tap's index in a weight row, j a channel's
// place in its tile.
#include <algorithm>
#include <climits>
#include <initializer_list>

#include "tensor/cuda/check.h"
#include "tensor/cuda/conv_direct.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace kiln::cuda {

namespace {

constexpr int kTile = kDirectConvChannelTile;

// The geometry in the 32-bit form the kernels index with inside one image;
// direct_conv_applies keeps every plane under 2^31 elements.
struct Geometry32 {
  int channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int out_h, out_w;
  __host__ __device__ int taps() const { return channels * kernel_h * kernel_w; }
  __host__ __device__ int in_plane() const { return height * width; }
  __host__ __device__ int out_plane() const { return out_h * out_w; }
};

Geometry32 geometry32(const ConvGeometry& g) {
  auto narrow = [](int64_t v) { return static_cast<int>(v); };
  return {narrow(g.channels),   narrow(g.height),   narrow(g.width),  narrow(g.kernel_h), narrow(g.kernel_w),
          narrow(g.stride_h),   narrow(g.stride_w), narrow(g.pad_h),  narrow(g.pad_w),    narrow(g.dilation_h),
          narrow(g.dilation_w), narrow(g.out_h()),  narrow(g.out_w())};
}

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

// A block's threads over one image plane of `plane` positions: 256, or the
// plane rounded up to whole warps when it is smaller.
unsigned plane_threads(int plane) {
  return static_cast<unsigned>(std::min<int64_t>(kThreadsPerBlock, ceil_div(plane, 32) * 32));
}

// Images go to gridDim.y, which CUDA caps at 65535; larger batches loop.
constexpr int64_t kMaxGridY = 65535;

// out (N, OC, oh, ow) = conv(x (N, C, H, W), weight (OC, taps)) + bias (OC,
// or null); all contiguous. Block (position range, image, channel tile).
template <class T>
__global__ void forward_kernel(T* out, const T* x, const T* weight, const T* bias, Geometry32 g, int out_channels,
                               int64_t images) {
  const int taps = g.taps(), o0 = blockIdx.z * kTile;
  // The tile's weights as [t][j]: a product reads kTile neighbours.
  extern __shared__ __align__(16) unsigned char staged[];
  T* w = reinterpret_cast<T*>(staged);
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
  extern __shared__ __align__(16) unsigned char staged[];
  T* w = reinterpret_cast<T*>(staged);
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
    const int hi = last_column < 0 ? 0 : min(g.out_w, last_column / g.stride_w + 1);
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
  constexpr int kWarps = kThreadsPerBlock / 32;
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

// Ranges of output rows for grad_weight: about kWeightBlocks blocks in all
// (enough to fill a large GPU at any batch size), each walking at least
// kMinRangePositions positions. Shapes alone decide, so the sums' order,
// and with it their rounding, is the same on every GPU.
constexpr int64_t kWeightBlocks = 2048;
constexpr int64_t kMinRangePositions = 256;

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

void check_operands(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    KILN_CHECK(t->is_contiguous(), op, ": the direct CUDA kernels take contiguous tensors, got strides ", t->strides());
    KILN_CHECK(t->dtype() == DType::Float32 || t->dtype() == DType::Float64, op,
               ": the direct CUDA kernels take float32 or float64, got ", dtype_name(t->dtype()));
  }
}

void check_applies(const char* op, int64_t out_channels, const ConvGeometry& g, DType dtype) {
  KILN_CHECK(direct_conv_applies(out_channels, g, dtype), op, ": the direct CUDA kernels do not take this layer (",
             out_channels, " output channels, ", g.channels, " input channels, kernel ", g.kernel_h, "x", g.kernel_w,
             ", ", dtype_name(dtype), ")");
}

template <class Fn>
void with_real_type(DType dtype, Fn&& fn) {
  if (dtype == DType::Float64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

// Grid (position blocks, images, channel tiles) for a kernel whose threads
// cover a plane of `plane` positions.
dim3 plane_grid(int plane, unsigned threads, int64_t images, int64_t channels) {
  return dim3(static_cast<unsigned>(ceil_div(plane, threads)), static_cast<unsigned>(std::min(images, kMaxGridY)),
              static_cast<unsigned>(ceil_div(channels, kTile)));
}

}  // namespace

bool direct_conv_applies(int64_t out_channels, const ConvGeometry& g, DType dtype) {
  if (dtype != DType::Float32 && dtype != DType::Float64) return false;
  const int64_t element = dtype == DType::Float64 ? 8 : 4;
  const int64_t window = g.kernel_h * g.kernel_w, weights = out_channels * g.channels * window;
  if (weights <= 0 || weights * element > static_cast<int64_t>(kDirectConvMaxWeightBytes)) return false;
  // The channel tiles' staged weights: forward [taps][kTile], grad_input [OC * window][kTile].
  const int64_t staged = std::max(g.channels, out_channels) * window * kTile * element;
  if (staged > static_cast<int64_t>(kDirectConvMaxStagedBytes)) return false;
  // Positions along an axis, padding and taps included, stay within int.
  const int64_t out_h = g.out_h(), out_w = g.out_w();
  const bool rows_fit = g.height + 2 * g.pad_h + g.dilation_h * g.kernel_h + g.stride_h <= INT_MAX;
  const bool columns_fit = g.width + 2 * g.pad_w + g.dilation_w * g.kernel_w + g.stride_w <= INT_MAX;
  return out_h > 0 && out_w > 0 && rows_fit && columns_fit && g.height * g.width <= INT_MAX && out_h * out_w <= INT_MAX;
}

void direct_conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const ConvGeometry& g) {
  check_operands("conv2d", {&out, &x, &weight, &bias});
  const int64_t out_channels = weight.size(0), images = x.size(0);
  check_applies("conv2d", out_channels, g, x.dtype());
  if (out.numel() == 0) return;
  const Geometry32 g32 = geometry32(g);
  const unsigned threads = plane_threads(g32.out_plane());
  const size_t shared = static_cast<size_t>(g32.taps()) * kTile * weight.element_size();
  cudaStream_t stream = current_raw_stream(out.device());
  with_real_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    forward_kernel<T><<<plane_grid(g32.out_plane(), threads, images, out_channels), threads, shared, stream>>>(
        static_cast<T*>(out.data_ptr()), data_or_null<T>(x), data_or_null<T>(weight), data_or_null<T>(bias), g32,
        static_cast<int>(out_channels), images);
    KILN_CUDA_CHECK_LAUNCH("conv2d forward_kernel");
  });
}

void direct_conv2d_grad_input(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                              const ConvGeometry& g) {
  check_operands("conv2d_backward", {&grad_input, &grad_out, &weight});
  const int64_t out_channels = weight.size(0), images = grad_input.size(0);
  check_applies("conv2d_backward", out_channels, g, weight.dtype());
  if (grad_input.numel() == 0) return;
  const Geometry32 g32 = geometry32(g);
  const unsigned threads = plane_threads(g32.in_plane());
  const size_t shared = static_cast<size_t>(out_channels * g.kernel_h * g.kernel_w) * kTile * weight.element_size();
  cudaStream_t stream = current_raw_stream(grad_input.device());
  with_real_type(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    grad_input_kernel<T><<<plane_grid(g32.in_plane(), threads, images, g.channels), threads, shared, stream>>>(
        static_cast<T*>(grad_input.data_ptr()), data_or_null<T>(grad_out), data_or_null<T>(weight), g32,
        static_cast<int>(out_channels), images);
    KILN_CUDA_CHECK_LAUNCH("conv2d grad_input_kernel");
  });
}

void direct_conv2d_grad_weight(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                               const Tensor& x, const ConvGeometry& g) {
  check_operands("conv2d_backward", {&grad_weight, &grad_bias, &grad_out, &x});
  const int64_t out_channels = grad_weight.size(0), weights = grad_weight.numel();
  check_applies("conv2d_backward", out_channels, g, x.dtype());
  KILN_CHECK(!grad_bias.defined() || grad_bias.numel() == out_channels, "conv2d_backward: grad_bias has ",
             grad_bias.numel(), " elements for ", out_channels, " output channels");
  if (weights == 0) return;
  const Geometry32 g32 = geometry32(g);
  const int64_t rows = x.size(0) * g32.out_h;
  if (rows == 0) {
    // Sums of no terms.
    backend().fill(grad_weight, Scalar(0));
    if (grad_bias.defined()) backend().fill(grad_bias, Scalar(0));
    return;
  }
  // Ranges: about kWeightBlocks blocks, at least kMinRangePositions positions each.
  const int64_t wanted = std::max<int64_t>(1, kWeightBlocks / out_channels);
  const int64_t range_rows = std::max(ceil_div(kMinRangePositions, g32.out_w), ceil_div(rows, wanted));
  const int64_t ranges = ceil_div(rows, range_rows);
  const int64_t entries = weights + (grad_bias.defined() ? out_channels : 0);
  const Tensor partial =
      ranges > 1 ? Tensor::empty({entries * ranges}, {DType::Float64, grad_weight.device()}) : Tensor();
  double* partial_data = ranges > 1 ? static_cast<double*>(partial.data_ptr()) : nullptr;
  const int64_t per_channel = entries / out_channels;  // taps, and the bias's sum when wanted
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>(kThreadsPerBlock, ceil_div(per_channel, 32) * 32));
  cudaStream_t stream = current_raw_stream(grad_weight.device());
  with_real_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* weight_out = static_cast<T*>(grad_weight.data_ptr());
    T* bias_out = grad_bias.defined() ? static_cast<T*>(grad_bias.data_ptr()) : nullptr;
    grad_weight_kernel<T>
        <<<dim3(static_cast<unsigned>(ranges), static_cast<unsigned>(out_channels)), threads, 0, stream>>>(
            weight_out, bias_out, partial_data, data_or_null<T>(grad_out), data_or_null<T>(x), g32,
            static_cast<int>(out_channels), rows, range_rows);
    KILN_CUDA_CHECK_LAUNCH("conv2d grad_weight_kernel");
    if (ranges > 1) {
      grad_weight_sum_kernel<T>
          <<<static_cast<unsigned>(ceil_div(entries, kThreadsPerBlock / 32)), kThreadsPerBlock, 0, stream>>>(
              weight_out, bias_out, partial_data, weights, entries, static_cast<int>(ranges));
      KILN_CUDA_CHECK_LAUNCH("conv2d grad_weight_sum_kernel");
    }
  });
}

}  // namespace kiln::cuda
