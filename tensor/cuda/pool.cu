// CUDA 2-d pooling: max, average and adaptive average, forward and backward.
//
// Every tensor arrives contiguous as P = N*C planes (tensor/backend.h).
// The kernels take the op's options and the sizes by value (Note [One
// pooling parameter struct] in tensor/pool.h), and beside them what device
// code cannot read from the options' std::optional fields: the stride, as
// o.stride_or_kernel(), and divisor_override as an int, 0 for none.
// Forward kernels run one thread per output element and visit its window's
// taps in row-major order, so ties, NaN and the order of the sums are the
// CPU's (tensor/cpu/pool.cpp) and the results are its bits.
//
// The backward kernels must sum overlapping windows without float atomics,
// so that a result never depends on thread timing:
// - average and adaptive average pooling run one thread per input element,
//   which gathers the shares of the windows that cover it. It adds them in
//   the order the CPU's scatter loops reach that element (for avg_pool2d:
//   output rows ascending, and within a row output columns descending,
//   because the CPU walks kernel columns outside output columns), so the
//   sums round alike.
// - max pooling's backward runs one thread per input element too, which
//   visits the outputs whose windows cover it and adds the gradient of
//   those whose winner it is, in ascending output order: the order in
//   which the CPU's scatter loop reaches that element. (A winner always
//   lies in its own window; one that does not is never visited, as in
//   torch's kernel.) The same threads check every index against the plane.
// 16-bit floats accumulate in float, as on the CPU.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/kernel_errors.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

// The compute type of device type D: float for the 16-bit floats.
template <class D>
using Acc = decltype(to_compute(D{}));

// ---- max pooling ----

// values, indices: (P, oh, ow); x: (P, H, W). indices may be null (values only).
template <class D>
__global__ void max_pool_kernel(D* values, int64_t* indices, const D* x, MaxPool2dOptions o, Size2d stride,
                                Pool2dShape s, int64_t n) {
  const int64_t height = s.input.h, width = s.input.w, oh = s.output.h, ow = s.output.w;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t ox = i % ow, oy = (i / ow) % oh, p = i / (ow * oh);
    const D* plane = x + p * height * width;
    Acc<D> best = -static_cast<Acc<D>>(INFINITY);
    int64_t where = -1;
    for (int64_t ki = 0; ki < o.kernel.h; ++ki) {
      const int64_t iy = oy * stride.h - o.padding.h + ki * o.dilation.h;
      if (iy < 0 || iy >= height) continue;
      for (int64_t kj = 0; kj < o.kernel.w; ++kj) {
        const int64_t ix = ox * stride.w - o.padding.w + kj * o.dilation.w;
        if (ix < 0 || ix >= width) continue;
        const Acc<D> v = to_compute(plane[iy * width + ix]);
        // Larger, or NaN (a later NaN over an earlier one); the first tap
        // inside the input is taken whatever its value, as torch.
        if (v > best || v != v || where < 0) {
          best = v;
          where = iy * width + ix;
        }
      }
    }
    values[i] = from_compute<D>(best);
    if (indices != nullptr) indices[i] = where;
  }
}

// ---- average pooling ----

// The divisor of window (oy, ox) along one dim, as window_counts in
// tensor/cpu/pool.cpp: the tap count clipped to the padded input
// (count_include_pad) or to the input; 0 for a window with no element inside.
__device__ int64_t window_count(int64_t o, int64_t kernel, int64_t stride, int64_t pad, int64_t size,
                                bool count_include_pad) {
  const int64_t start = o * stride - pad;
  const int64_t end = min(start + kernel, size + pad);
  const int64_t inside = min(end, size) - max(start, int64_t{0});
  return inside <= 0 ? 0 : count_include_pad ? end - start : inside;
}

// A divisor_override (0: none) replaces the product of the counts, keeping
// the empty windows' zeros.
__device__ int64_t window_divisor(int64_t oy, int64_t ox, const AvgPool2dOptions& o, Size2d stride,
                                  const Pool2dShape& s, int64_t divisor_override) {
  const int64_t rows = window_count(oy, o.kernel.h, stride.h, o.padding.h, s.input.h, o.count_include_pad);
  const int64_t cols = window_count(ox, o.kernel.w, stride.w, o.padding.w, s.input.w, o.count_include_pad);
  if (divisor_override != 0) return rows == 0 || cols == 0 ? 0 : divisor_override;
  return rows * cols;
}

// out: (P, oh, ow); x: (P, H, W).
template <class D>
__global__ void avg_pool_kernel(D* out, const D* x, AvgPool2dOptions o, Size2d stride, Pool2dShape s,
                                int64_t divisor_override, int64_t n) {
  const int64_t height = s.input.h, width = s.input.w, oh = s.output.h, ow = s.output.w;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t ox = i % ow, oy = (i / ow) % oh, p = i / (ow * oh);
    const D* plane = x + p * height * width;
    Acc<D> sum{};
    for (int64_t ki = 0; ki < o.kernel.h; ++ki) {
      const int64_t iy = oy * stride.h - o.padding.h + ki;
      if (iy < 0 || iy >= height) continue;
      for (int64_t kj = 0; kj < o.kernel.w; ++kj) {
        const int64_t ix = ox * stride.w - o.padding.w + kj;
        if (ix < 0 || ix >= width) continue;
        sum = sum + to_compute(plane[iy * width + ix]);
      }
    }
    const int64_t divisor = window_divisor(oy, ox, o, stride, s, divisor_override);
    out[i] = divisor == 0 ? from_compute<D>(Acc<D>{}) : from_compute<D>(sum / static_cast<Acc<D>>(divisor));
  }
}

// The outputs [lo, hi] along one dim whose windows (of `kernel` taps from
// o*stride - pad) contain input position i; empty when lo > hi.
__device__ void covering_outputs(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out, int64_t& lo,
                                 int64_t& hi) {
  const int64_t first = i + pad - kernel + 1;  // o*stride >= first
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  hi = min((i + pad) / stride, out - 1);
}

// grad_x: (P, H, W), overwritten; grad_out, indices: (P, oh, ow). Threads
// i < n_in gather input element i's gradient; threads o < n_out check index
// o, recording a bad one as (index, position, plane).
template <class D>
__global__ void max_pool_backward_kernel(D* grad_x, const D* grad_out, const int64_t* indices, MaxPool2dOptions o,
                                         Size2d stride, Pool2dShape s, int64_t n_in, int64_t n_out, ErrorSlot bad) {
  const int64_t width = s.input.w, plane_size = s.input.h * width, out_plane = s.output.h * s.output.w;
  // The extent of a window: its taps span (kernel - 1) * dilation + 1 inputs.
  const int64_t span_h = (o.kernel.h - 1) * o.dilation.h + 1, span_w = (o.kernel.w - 1) * o.dilation.w + 1;
  for (int64_t i = global_thread_index(); i < n_in; i += grid_stride()) {
    const int64_t at = i % plane_size, p = i / plane_size;
    int64_t oy_lo, oy_hi, ox_lo, ox_hi;
    covering_outputs(at / width, span_h, stride.h, o.padding.h, s.output.h, oy_lo, oy_hi);
    covering_outputs(at % width, span_w, stride.w, o.padding.w, s.output.w, ox_lo, ox_hi);
    const D* go = grad_out + p * out_plane;
    const int64_t* won = indices + p * out_plane;
    Acc<D> acc{};
    for (int64_t oy = oy_lo; oy <= oy_hi; ++oy) {
      for (int64_t ox = ox_lo; ox <= ox_hi; ++ox) {
        const int64_t k = oy * s.output.w + ox;
        if (won[k] == at) acc = acc + to_compute(go[k]);
      }
    }
    grad_x[i] = from_compute<D>(acc);
  }
  for (int64_t k = global_thread_index(); k < n_out; k += grid_stride()) {
    const int64_t at = indices[k];
    if (at != -1 && (at < 0 || at >= plane_size)) bad.record(at, k % out_plane, k / out_plane);
  }
}

// grad_x: (P, H, W), overwritten; grad_out: (P, oh, ow).
template <class D>
__global__ void avg_pool_backward_kernel(D* grad_x, const D* grad_out, AvgPool2dOptions o, Size2d stride, Pool2dShape s,
                                         int64_t divisor_override, int64_t n) {
  const int64_t height = s.input.h, width = s.input.w, ow = s.output.w;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t ix = i % width, iy = (i / width) % height, p = i / (width * height);
    const D* go = grad_out + p * s.output.h * ow;
    int64_t oy_lo, oy_hi, ox_lo, ox_hi;
    covering_outputs(iy, o.kernel.h, stride.h, o.padding.h, s.output.h, oy_lo, oy_hi);
    covering_outputs(ix, o.kernel.w, stride.w, o.padding.w, ow, ox_lo, ox_hi);
    Acc<D> acc{};
    for (int64_t oy = oy_lo; oy <= oy_hi; ++oy) {
      for (int64_t ox = ox_hi; ox >= ox_lo; --ox) {  // the CPU's order (see the top of this file)
        const int64_t divisor = window_divisor(oy, ox, o, stride, s, divisor_override);
        const Acc<D> share = divisor == 0 ? Acc<D>{} : to_compute(go[oy * ow + ox]) / static_cast<Acc<D>>(divisor);
        acc = acc + share;
      }
    }
    grad_x[i] = from_compute<D>(acc);
  }
}

// ---- adaptive average pooling ----

// Window [start, end) of output o of `out` over `size` inputs, as torch.
__device__ int64_t adaptive_start(int64_t o, int64_t size, int64_t out) { return o * size / out; }
__device__ int64_t adaptive_end(int64_t o, int64_t size, int64_t out) { return ((o + 1) * size + out - 1) / out; }

// out: (P, oh, ow); x: (P, H, W).
template <class D>
__global__ void adaptive_avg_pool_kernel(D* out, const D* x, int64_t height, int64_t width, int64_t oh, int64_t ow,
                                         int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t ox = i % ow, oy = (i / ow) % oh, p = i / (ow * oh);
    const D* plane = x + p * height * width;
    const int64_t y0 = adaptive_start(oy, height, oh), y1 = adaptive_end(oy, height, oh);
    const int64_t x0 = adaptive_start(ox, width, ow), x1 = adaptive_end(ox, width, ow);
    Acc<D> sum{};
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = x0; ix < x1; ++ix) sum = sum + to_compute(plane[iy * width + ix]);
    }
    // Two divisions, not one by the area, to round as torch does.
    out[i] = from_compute<D>(sum / static_cast<Acc<D>>(y1 - y0) / static_cast<Acc<D>>(x1 - x0));
  }
}

// The outputs [lo, hi] of `out` adaptive windows over `size` inputs that
// contain input position i: window i*out/size does, and its neighbours
// may overlap it.
__device__ void adaptive_covering(int64_t i, int64_t size, int64_t out, int64_t& lo, int64_t& hi) {
  const int64_t o = i * out / size;
  lo = o;
  while (lo > 0 && adaptive_end(lo - 1, size, out) > i) --lo;
  hi = o;
  while (hi + 1 < out && adaptive_start(hi + 1, size, out) <= i) ++hi;
}

// grad_x: (P, H, W), overwritten; grad_out: (P, oh, ow). Shares are added in
// the CPU's order: output rows, then columns, ascending.
template <class D>
__global__ void adaptive_avg_pool_backward_kernel(D* grad_x, const D* grad_out, int64_t height, int64_t width,
                                                  int64_t oh, int64_t ow, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t ix = i % width, iy = (i / width) % height, p = i / (width * height);
    const D* go = grad_out + p * oh * ow;
    int64_t oy_lo, oy_hi, ox_lo, ox_hi;
    adaptive_covering(iy, height, oh, oy_lo, oy_hi);
    adaptive_covering(ix, width, ow, ox_lo, ox_hi);
    Acc<D> acc{};
    for (int64_t oy = oy_lo; oy <= oy_hi; ++oy) {
      const auto rows = static_cast<Acc<D>>(adaptive_end(oy, height, oh) - adaptive_start(oy, height, oh));
      for (int64_t ox = ox_lo; ox <= ox_hi; ++ox) {
        const auto cols = static_cast<Acc<D>>(adaptive_end(ox, width, ow) - adaptive_start(ox, width, ow));
        acc = acc + to_compute(go[oy * ow + ox]) / rows / cols;
      }
    }
    grad_x[i] = from_compute<D>(acc);
  }
}

// Calls fn.template operator()<D>() with D the device type of the floating
// dtype (float16, bfloat16, float32, float64); throws naming `op` otherwise.
template <class Fn>
void visit_floating(DType dtype, const char* op, Fn&& fn) {
  visit_floating_dtype(dtype, op, [&]<class T>() { fn.template operator()<DeviceType<T>>(); });
}

}  // namespace

void CudaBackend::max_pool2d(const Tensor& values, const Tensor& indices, const Tensor& x, const MaxPool2dOptions& o,
                             const Pool2dShape& s) {
  const int64_t n = values.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device(), "max_pool2d");
  cudaStream_t stream = current_raw_stream(x.device());
  visit_floating(x.dtype(), "max_pool2d", [&]<class D>() {
    int64_t* where = indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
    max_pool_kernel<D><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<D*>(values.data_ptr()), where, static_cast<const D*>(x.data_ptr()), o, o.stride_or_kernel(), s, n);
    KILN_CUDA_CHECK_LAUNCH("max_pool_kernel");
  });
}

void CudaBackend::max_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& indices,
                                      const MaxPool2dOptions& o, const Pool2dShape& s) {
  const int64_t n_in = grad_x.numel(), n_out = grad_out.numel();
  if (n_in == 0) return;
  DeviceGuard guard(grad_x.device(), "max_pool2d_backward");
  cudaStream_t stream = current_raw_stream(grad_x.device());
  const Size2d input = s.input;
  const ErrorSlot bad = watch_kernel_errors(grad_x.device(), stream, [input](const KernelErrorValues& v) {
    return kiln::detail::str("max_pool2d_backward: index ", v[0], " at position ", v[1], " of plane ", v[2],
                             " is outside the input plane of ", input.h, " x ", input.w, " elements");
  });
  visit_floating(grad_x.dtype(), "max_pool2d_backward", [&]<class D>() {
    max_pool_backward_kernel<D><<<grid_for(std::max(n_in, n_out)), kThreadsPerBlock, 0, stream>>>(
        static_cast<D*>(grad_x.data_ptr()), static_cast<const D*>(grad_out.data_ptr()),
        static_cast<const int64_t*>(indices.data_ptr()), o, o.stride_or_kernel(), s, n_in, n_out, bad);
    KILN_CUDA_CHECK_LAUNCH("max_pool_backward_kernel");
  });
}

void CudaBackend::avg_pool2d(const Tensor& out, const Tensor& x, const AvgPool2dOptions& o, const Pool2dShape& s) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device(), "avg_pool2d");
  cudaStream_t stream = current_raw_stream(x.device());
  visit_floating(x.dtype(), "avg_pool2d", [&]<class D>() {
    avg_pool_kernel<D><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<D*>(out.data_ptr()), static_cast<const D*>(x.data_ptr()), o, o.stride_or_kernel(), s,
        o.divisor_override.value_or(0), n);
    KILN_CUDA_CHECK_LAUNCH("avg_pool_kernel");
  });
}

void CudaBackend::avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out, const AvgPool2dOptions& o,
                                      const Pool2dShape& s) {
  const int64_t n = grad_x.numel();
  if (n == 0) return;
  DeviceGuard guard(grad_x.device(), "avg_pool2d_backward");
  cudaStream_t stream = current_raw_stream(grad_x.device());
  visit_floating(grad_x.dtype(), "avg_pool2d_backward", [&]<class D>() {
    avg_pool_backward_kernel<D><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<D*>(grad_x.data_ptr()), static_cast<const D*>(grad_out.data_ptr()), o, o.stride_or_kernel(), s,
        o.divisor_override.value_or(0), n);
    KILN_CUDA_CHECK_LAUNCH("avg_pool_backward_kernel");
  });
}

void CudaBackend::adaptive_avg_pool2d(const Tensor& out, const Tensor& x) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device(), "adaptive_avg_pool2d");
  cudaStream_t stream = current_raw_stream(x.device());
  visit_floating(x.dtype(), "adaptive_avg_pool2d", [&]<class D>() {
    adaptive_avg_pool_kernel<D><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<D*>(out.data_ptr()), static_cast<const D*>(x.data_ptr()), x.size(1), x.size(2), out.size(1),
        out.size(2), n);
    KILN_CUDA_CHECK_LAUNCH("adaptive_avg_pool_kernel");
  });
}

void CudaBackend::adaptive_avg_pool2d_backward(const Tensor& grad_x, const Tensor& grad_out) {
  const int64_t n = grad_x.numel();
  if (n == 0) return;
  DeviceGuard guard(grad_x.device(), "adaptive_avg_pool2d_backward");
  cudaStream_t stream = current_raw_stream(grad_x.device());
  visit_floating(grad_x.dtype(), "adaptive_avg_pool2d_backward", [&]<class D>() {
    adaptive_avg_pool_backward_kernel<D><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(
        static_cast<D*>(grad_x.data_ptr()), static_cast<const D*>(grad_out.data_ptr()), grad_x.size(1),
        grad_x.size(2), grad_out.size(1), grad_out.size(2), n);
    KILN_CUDA_CHECK_LAUNCH("adaptive_avg_pool_backward_kernel");
  });
}

}  // namespace kiln::cuda
