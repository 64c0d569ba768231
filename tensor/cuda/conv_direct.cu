// Kiln's direct CUDA convolutions (Note [Direct CUDA convolution] in
// conv_direct.h): checks, then the kernels of conv_direct_kernels.cuh
// launched on the current stream.
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
using direct_conv::geometry32;
using direct_conv::LaunchShape;

// direct_conv's launcher: `kernel` on `stream` with `launch`'s grid, checked.
struct StreamLaunch {
  cudaStream_t stream;
  template <class... Params, class... Args>
  void operator()(void (*kernel)(Params...), const LaunchShape& launch, Args... args) const {
    kernel<<<dim3(launch.grid_x, launch.grid_y, launch.grid_z), launch.threads, launch.shared_bytes, stream>>>(args...);
    KILN_CUDA_CHECK_LAUNCH("direct convolution kernel");
  }
};

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

void check_applies(const char* op, int64_t out_channels, const Conv2dParams& p, const Conv2dShape& s, DType dtype) {
  KILN_CHECK(direct_conv_applies(out_channels, p, s, dtype), op, ": the direct CUDA kernels do not take this layer (",
             out_channels, " output channels, ", s.channels, " input channels, kernel ", s.kernel.h, "x", s.kernel.w,
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

void direct_conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Conv2dParams& p, const Conv2dShape& s) {
  check_operands("conv2d", {&out, &x, &weight, &bias});
  const int64_t out_channels = weight.size(0), images = x.size(0);
  check_applies("conv2d", out_channels, p, s, x.dtype());
  if (out.numel() == 0) return;
  const Geometry32 g32 = geometry32(p, s);
  with_real_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    direct_conv::run_forward<T>(StreamLaunch{current_raw_stream(out.device())}, static_cast<T*>(out.data_ptr()),
                                data_or_null<T>(x), data_or_null<T>(weight), data_or_null<T>(bias), g32,
                                static_cast<int>(out_channels), images);
  });
}

void direct_conv2d_grad_input(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                              const Conv2dParams& p, const Conv2dShape& s) {
  check_operands("conv2d_backward", {&grad_input, &grad_out, &weight});
  const int64_t out_channels = weight.size(0), images = grad_input.size(0);
  check_applies("conv2d_backward", out_channels, p, s, weight.dtype());
  if (grad_input.numel() == 0) return;
  const Geometry32 g32 = geometry32(p, s);
  with_real_type(weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    direct_conv::run_grad_input<T>(StreamLaunch{current_raw_stream(grad_input.device())},
                                   static_cast<T*>(grad_input.data_ptr()), data_or_null<T>(grad_out),
                                   data_or_null<T>(weight), g32, static_cast<int>(out_channels), images);
  });
}

void direct_conv2d_grad_weight(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                               const Tensor& x, const Conv2dParams& p, const Conv2dShape& s) {
  check_operands("conv2d_backward", {&grad_weight, &grad_bias, &grad_out, &x});
  const int64_t out_channels = grad_weight.size(0), weights = grad_weight.numel();
  check_applies("conv2d_backward", out_channels, p, s, x.dtype());
  KILN_CHECK(!grad_bias.defined() || grad_bias.numel() == out_channels, "conv2d_backward: grad_bias has ",
             grad_bias.numel(), " elements for ", out_channels, " output channels");
  if (weights == 0) return;
  const Geometry32 g32 = geometry32(p, s);
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
  with_real_type(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    direct_conv::run_grad_weight<T>(
        StreamLaunch{current_raw_stream(grad_weight.device())}, plan, static_cast<T*>(grad_weight.data_ptr()),
        grad_bias.defined() ? static_cast<T*>(grad_bias.data_ptr()) : nullptr, partial_data, data_or_null<T>(grad_out),
        data_or_null<T>(x), g32, static_cast<int>(out_channels), x.size(0));
  });
}

}  // namespace kiln::cuda
