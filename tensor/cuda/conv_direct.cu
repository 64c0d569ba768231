// Kiln's direct CUDA convolution kernels (Note [Direct CUDA convolution] in
// conv_direct.h). Index names: b image, c input channel, o output channel,
// (iy, ix) input position, (oy, ox) output position, (ki, kj) kernel tap.
#include "tensor/cuda/conv_direct.h"

#include <algorithm>
#include <initializer_list>

#include "tensor/cuda/block_reduce.cuh"
#include "tensor/cuda/check.h"
#include "tensor/cuda/conv_geometry.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace kiln::cuda {

namespace {

// Copies weight (OC, C*kh*kw) into the block's shared memory; every thread
// of the block must call it.
template <class T>
__device__ const T* stage_weight(const T* weight, int64_t count) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* staged = reinterpret_cast<T*>(shared_bytes);
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) staged[i] = weight[i];
  __syncthreads();
  return staged;
}

// out: (N, OC, oh, ow), x: (N, C, H, W), weight: (OC, C, kh, kw), bias: (OC) or null; all contiguous.
template <class T>
__global__ void forward_kernel(T* out, const T* x, const T* weight, const T* bias, DeviceGeometry g,
                               int64_t out_channels, int64_t total) {
  const int64_t taps = g.kernel_h * g.kernel_w;
  const T* w = stage_weight(weight, out_channels * g.channels * taps);
  for (int64_t index = global_thread_index(); index < total; index += grid_stride()) {
    const int64_t ox = index % g.out_w, oy = (index / g.out_w) % g.out_h;
    const int64_t o = (index / (g.out_w * g.out_h)) % out_channels, b = index / (g.out_w * g.out_h * out_channels);
    T sum = bias != nullptr ? bias[o] : T(0);
    for (int64_t c = 0; c < g.channels; ++c) {
      const T* plane = x + (b * g.channels + c) * g.height * g.width;  // (H, W)
      const T* taps_of = w + (o * g.channels + c) * taps;              // (kh, kw)
      for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
        const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dilation_h;
        if (iy < 0 || iy >= g.height) continue;
        for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
          const int64_t ix = ox * g.stride_w - g.pad_w + kj * g.dilation_w;
          if (ix < 0 || ix >= g.width) continue;
          sum += plane[iy * g.width + ix] * taps_of[ki * g.kernel_w + kj];
        }
      }
    }
    out[index] = sum;
  }
}

// grad_input: (N, C, H, W); grad_out: (N, OC, oh, ow); weight: (OC, C, kh, kw); all contiguous.
// The taps that read input (iy, ix) are found by output_reading
// (conv_geometry.cuh), the gather im2col.cu's col2im does.
template <class T>
__global__ void grad_input_kernel(T* grad_input, const T* grad_out, const T* weight, DeviceGeometry g,
                                  int64_t out_channels, int64_t total) {
  const int64_t taps = g.kernel_h * g.kernel_w;
  const T* w = stage_weight(weight, out_channels * g.channels * taps);
  for (int64_t index = global_thread_index(); index < total; index += grid_stride()) {
    const int64_t ix = index % g.width, iy = (index / g.width) % g.height;
    const int64_t c = (index / (g.width * g.height)) % g.channels, b = index / (g.width * g.height * g.channels);
    T sum = 0;
    for (int64_t o = 0; o < out_channels; ++o) {
      const T* plane = grad_out + (b * out_channels + o) * g.out_h * g.out_w;  // (oh, ow)
      const T* taps_of = w + (o * g.channels + c) * taps;                      // (kh, kw)
      for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
        const int64_t oy = output_reading(iy, ki, g.pad_h, g.dilation_h, g.stride_h, g.out_h);
        if (oy < 0) continue;
        for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
          const int64_t ox = output_reading(ix, kj, g.pad_w, g.dilation_w, g.stride_w, g.out_w);
          if (ox < 0) continue;
          sum += plane[oy * g.out_w + ox] * taps_of[ki * g.kernel_w + kj];
        }
      }
    }
    grad_input[index] = sum;
  }
}

// grad_weight: (OC, C, kh, kw); grad_out: (N, OC, oh, ow); x: (N, C, H, W); all contiguous.
// One block per weight element; blockDim.x a multiple of 32.
template <class T>
__global__ void grad_weight_kernel(T* grad_weight, const T* grad_out, const T* x, DeviceGeometry g,
                                   int64_t images, int64_t out_channels) {
  const int64_t taps = g.kernel_h * g.kernel_w, weights = out_channels * g.channels * taps;
  const int64_t positions = images * g.out_h * g.out_w;
  for (int64_t k = blockIdx.x; k < weights; k += gridDim.x) {
    const int64_t kj = k % g.kernel_w, ki = (k / g.kernel_w) % g.kernel_h;
    const int64_t c = (k / taps) % g.channels, o = k / (taps * g.channels);
    double partial = 0;
    for (int64_t p = threadIdx.x; p < positions; p += blockDim.x) {
      const int64_t ox = p % g.out_w, oy = (p / g.out_w) % g.out_h, b = p / (g.out_w * g.out_h);
      const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dilation_h;
      const int64_t ix = ox * g.stride_w - g.pad_w + kj * g.dilation_w;
      if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
      partial += static_cast<double>(grad_out[((b * out_channels + o) * g.out_h + oy) * g.out_w + ox]) *
                 static_cast<double>(x[((b * g.channels + c) * g.height + iy) * g.width + ix]);
    }
    const SumPair total = block_sum(SumPair{partial, 0});
    if (threadIdx.x == 0) grad_weight[k] = static_cast<T>(total.first);
  }
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

void check_operands(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    KILN_CHECK(t->is_contiguous(), op, ": the direct CUDA kernels take contiguous tensors, got strides ",
               t->strides());
    KILN_CHECK(t->dtype() == DType::Float32 || t->dtype() == DType::Float64, op,
               ": the direct CUDA kernels take float32 or float64, got ", dtype_name(t->dtype()));
  }
}

template <class Fn>
void with_real_type(DType dtype, Fn&& fn) {
  if (dtype == DType::Float64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

}  // namespace

bool direct_conv_applies(int64_t out_channels, const ConvGeometry& g, DType dtype) {
  if (dtype != DType::Float32 && dtype != DType::Float64) return false;
  const int64_t weights = out_channels * g.channels * g.kernel_h * g.kernel_w;
  return weights > 0 && static_cast<size_t>(weights) * (dtype == DType::Float64 ? 8 : 4) <= kDirectConvMaxWeightBytes;
}

void direct_conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const ConvGeometry& g) {
  check_operands("conv2d", {&out, &x, &weight, &bias});
  const int64_t out_channels = weight.size(0), total = out.numel();
  KILN_CHECK(direct_conv_applies(out_channels, g, x.dtype()), "conv2d: the layer's weight ", weight.shape(),
             " does not fit the direct CUDA kernels' shared memory");
  if (total == 0) return;
  const size_t shared = static_cast<size_t>(weight.numel()) * weight.element_size();
  cudaStream_t stream = current_raw_stream(out.device());
  with_real_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    forward_kernel<T><<<grid_for(total), kThreadsPerBlock, shared, stream>>>(
        static_cast<T*>(out.data_ptr()), data_or_null<T>(x), data_or_null<T>(weight), data_or_null<T>(bias),
        device_geometry(g), out_channels, total);
    KILN_CUDA_CHECK_LAUNCH("conv2d forward_kernel");
  });
}

void direct_conv2d_grad_input(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                              const ConvGeometry& g) {
  check_operands("conv2d_backward", {&grad_input, &grad_out, &weight});
  const int64_t out_channels = weight.size(0), total = grad_input.numel();
  KILN_CHECK(direct_conv_applies(out_channels, g, weight.dtype()), "conv2d_backward: the layer's weight ",
             weight.shape(), " does not fit the direct CUDA kernels' shared memory");
  if (total == 0) return;
  const size_t shared = static_cast<size_t>(weight.numel()) * weight.element_size();
  cudaStream_t stream = current_raw_stream(grad_input.device());
  with_real_type(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    grad_input_kernel<T><<<grid_for(total), kThreadsPerBlock, shared, stream>>>(
        static_cast<T*>(grad_input.data_ptr()), data_or_null<T>(grad_out), data_or_null<T>(weight),
        device_geometry(g), out_channels, total);
    KILN_CUDA_CHECK_LAUNCH("conv2d grad_input_kernel");
  });
}

void direct_conv2d_grad_weight(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x,
                               const ConvGeometry& g) {
  check_operands("conv2d_backward", {&grad_weight, &grad_out, &x});
  const int64_t out_channels = grad_weight.size(0), weights = grad_weight.numel();
  if (weights == 0) return;
  cudaStream_t stream = current_raw_stream(grad_weight.device());
  with_real_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(weights, kMaxBlocks));
    grad_weight_kernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(static_cast<T*>(grad_weight.data_ptr()),
                                                                  data_or_null<T>(grad_out), data_or_null<T>(x),
                                                                  device_geometry(g), x.size(0), out_channels);
    KILN_CUDA_CHECK_LAUNCH("conv2d grad_weight_kernel");
  });
}

}  // namespace kiln::cuda
