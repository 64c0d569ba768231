// Kiln's direct CUDA convolutions (Note [Direct CUDA convolution] in
// conv_direct.h): checks, then the kernels of conv_direct_kernels.cuh
// launched on the current stream.
#include <algorithm>
#include <climits>
#include <initializer_list>

#include "tensor/cuda/check.h"
#include "tensor/cuda/conv_direct.h"
#include "tensor/cuda/conv_direct_kernels.cuh"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace kiln::cuda {

namespace {

using direct_conv::Geometry32;
using direct_conv::kTile;
using direct_conv::LaunchShape;

Geometry32 geometry32(const ConvGeometry& g) {
  auto narrow = [](int64_t v) { return static_cast<int>(v); };
  return {narrow(g.channels),   narrow(g.height),   narrow(g.width),  narrow(g.kernel_h), narrow(g.kernel_w),
          narrow(g.stride_h),   narrow(g.stride_w), narrow(g.pad_h),  narrow(g.pad_w),    narrow(g.dilation_h),
          narrow(g.dilation_w), narrow(g.out_h()),  narrow(g.out_w())};
}

dim3 grid_of(const LaunchShape& s) { return dim3(s.grid_x, s.grid_y, s.grid_z); }

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
  const LaunchShape s = direct_conv::forward_shape(g32, images, out_channels, weight.element_size());
  cudaStream_t stream = current_raw_stream(out.device());
  with_real_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    direct_conv::forward_kernel<T><<<grid_of(s), s.threads, s.shared_bytes, stream>>>(
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
  const LaunchShape s = direct_conv::grad_input_shape(g32, images, out_channels, weight.element_size());
  cudaStream_t stream = current_raw_stream(grad_input.device());
  with_real_type(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    direct_conv::grad_input_kernel<T><<<grid_of(s), s.threads, s.shared_bytes, stream>>>(
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
  const direct_conv::WeightPlan plan = direct_conv::grad_weight_plan(g32, x.size(0), out_channels, grad_bias.defined());
  if (plan.rows == 0) {
    // Sums of no terms.
    backend().fill(grad_weight, Scalar(0));
    if (grad_bias.defined()) backend().fill(grad_bias, Scalar(0));
    return;
  }
  const Tensor partial =
      plan.ranges > 1 ? Tensor::empty({plan.entries * plan.ranges}, {DType::Float64, grad_weight.device()}) : Tensor();
  double* partial_data = plan.ranges > 1 ? static_cast<double*>(partial.data_ptr()) : nullptr;
  cudaStream_t stream = current_raw_stream(grad_weight.device());
  with_real_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* weight_out = static_cast<T*>(grad_weight.data_ptr());
    T* bias_out = grad_bias.defined() ? static_cast<T*>(grad_bias.data_ptr()) : nullptr;
    direct_conv::grad_weight_kernel<T><<<grid_of(plan.partial), plan.partial.threads, 0, stream>>>(
        weight_out, bias_out, partial_data, data_or_null<T>(grad_out), data_or_null<T>(x), g32,
        static_cast<int>(out_channels), plan.rows, plan.range_rows);
    KILN_CUDA_CHECK_LAUNCH("conv2d grad_weight_kernel");
    if (plan.ranges > 1) {
      direct_conv::grad_weight_sum_kernel<T><<<grid_of(plan.sum), plan.sum.threads, 0, stream>>>(
          weight_out, bias_out, partial_data, plan.weights, plan.entries, static_cast<int>(plan.ranges));
      KILN_CUDA_CHECK_LAUNCH("conv2d grad_weight_sum_kernel");
    }
  });
}

}  // namespace kiln::cuda
