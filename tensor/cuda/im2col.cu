// CUDA im2col / col2im (the contract is in tensor/backend.h; the CPU kernels
// in tensor/cpu/im2col.cpp).
//
// cols[n, (c*kh + ki)*kw + kj, oy*ow + ox] = x[n, c, iy, ix] with
//   iy = oy*stride.h - padding.h + ki*dilation.h,  ix = ox*stride.w - padding.w + kj*dilation.w,
// and 0 where (iy, ix) falls in the padding.
// im2col runs one thread per element of cols, the output position fastest,
// so neighbouring threads write neighbouring columns. col2im is written as a
// gather: one thread per element of x sums the taps that read it, in (ki, kj)
// order, as the CPU kernel adds them. Two threads never write one element,
// so there are no atomics and the sums do not depend on scheduling.
#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

// Element strides of a 4-d x and a 3-d cols.
struct Strides4 {
  int64_t s0, s1, s2, s3;
};
struct Strides3 {
  int64_t s0, s1, s2;
};

// Along one axis: the output position that reads input position `i`
// through kernel tap `k`, or -1 when none does. Output o reads input
// o*stride - pad + k*dilation, so i is read when i + pad - k*dilation is a
// non-negative multiple of stride whose quotient is a valid output.
__device__ inline int64_t output_reading(int64_t i, int64_t k, int64_t pad, int64_t dilation, int64_t stride,
                                         int64_t out) {
  const int64_t shifted = i + pad - k * dilation;
  if (shifted < 0 || shifted % stride != 0 || shifted / stride >= out) return -1;
  return shifted / stride;
}

// The kernels take the params and shape by value (Note [One convolution
// parameter struct] in tensor/conv.h).
// cols: (N, C*kh*kw, oh*ow), x: (N, C, H, W), any strides; B moves the bits
// of one element (zero bits are the value 0 in every dtype).
template <class B>
__global__ void im2col_kernel(B* cols, const B* x, Strides3 cs, Strides4 xs, Conv2dParams p, Conv2dShape s,
                              int64_t total) {
  const int64_t positions = s.output.h * s.output.w, taps = s.kernel.h * s.kernel.w;
  for (int64_t index = global_thread_index(); index < total; index += grid_stride()) {
    const int64_t pos = index % positions;
    const int64_t row = (index / positions) % (s.channels * taps);
    const int64_t n = index / (positions * s.channels * taps);
    const int64_t c = row / taps, tap = row % taps;
    const int64_t iy = (pos / s.output.w) * p.stride.h - p.padding.h + (tap / s.kernel.w) * p.dilation.h;
    const int64_t ix = (pos % s.output.w) * p.stride.w - p.padding.w + (tap % s.kernel.w) * p.dilation.w;
    const bool inside = iy >= 0 && iy < s.input.h && ix >= 0 && ix < s.input.w;
    cols[n * cs.s0 + row * cs.s1 + pos * cs.s2] = inside ? x[n * xs.s0 + c * xs.s1 + iy * xs.s2 + ix * xs.s3] : B{};
  }
}

template <class B>
void launch_im2col(B* cols, const B* x, Strides3 cs, Strides4 xs, const Conv2dParams& p, const Conv2dShape& s,
                   int64_t total, cudaStream_t stream) {
  im2col_kernel<B><<<grid_for(total), kThreadsPerBlock, 0, stream>>>(cols, x, cs, xs, p, s, total);
  KILN_CUDA_CHECK_LAUNCH("im2col_kernel");
}

// x: (N, C, H, W), cols: (N, C*kh*kw, oh*ow), any strides; T a device type.
// The taps that read input (iy, ix) are found by output_reading.
template <class T>
__global__ void col2im_kernel(T* x, const T* cols, Strides4 xs, Strides3 cs, Conv2dParams p, Conv2dShape s,
                              int64_t total) {
  using C = decltype(to_compute(T{}));
  const int64_t taps = s.kernel.h * s.kernel.w;
  for (int64_t index = global_thread_index(); index < total; index += grid_stride()) {
    const int64_t ix = index % s.input.w, iy = (index / s.input.w) % s.input.h;
    const int64_t c = (index / (s.input.w * s.input.h)) % s.channels, n = index / (s.input.w * s.input.h * s.channels);
    const T* image = cols + n * cs.s0 + c * taps * cs.s1;  // this channel's kh*kw rows
    C sum = 0;
    for (int64_t ki = 0; ki < s.kernel.h; ++ki) {
      const int64_t oy = output_reading(iy, ki, p.padding.h, p.dilation.h, p.stride.h, s.output.h);
      if (oy < 0) continue;
      for (int64_t kj = 0; kj < s.kernel.w; ++kj) {
        const int64_t ox = output_reading(ix, kj, p.padding.w, p.dilation.w, p.stride.w, s.output.w);
        if (ox < 0) continue;
        sum += to_compute(image[(ki * s.kernel.w + kj) * cs.s1 + (oy * s.output.w + ox) * cs.s2]);
      }
    }
    x[n * xs.s0 + c * xs.s1 + iy * xs.s2 + ix * xs.s3] = from_compute<T>(sum);
  }
}

template <class T>
void launch_col2im(T* x, const T* cols, Strides4 xs, Strides3 cs, const Conv2dParams& p, const Conv2dShape& s,
                   int64_t total, cudaStream_t stream) {
  col2im_kernel<T><<<grid_for(total), kThreadsPerBlock, 0, stream>>>(x, cols, xs, cs, p, s, total);
  KILN_CUDA_CHECK_LAUNCH("col2im_kernel");
}

Strides4 strides4(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }
Strides3 strides3(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

}  // namespace

void CudaBackend::im2col(const Tensor& cols, const Tensor& x, const Conv2dParams& p, const Conv2dShape& s) {
  if (cols.numel() == 0) return;
  DeviceGuard guard(cols.device(), "im2col");
  visit_element_bits(x.dtype(), [&]<class B>() {
    launch_im2col(static_cast<B*>(cols.data_ptr()), static_cast<const B*>(x.data_ptr()), strides3(cols), strides4(x), p,
                  s, cols.numel(), current_raw_stream(cols.device()));
  });
}

void CudaBackend::col2im(const Tensor& x, const Tensor& cols, const Conv2dParams& p, const Conv2dShape& s) {
  if (x.numel() == 0) return;
  DeviceGuard guard(x.device(), "col2im");
  visit_dtype(x.dtype(), [&]<class KT>() {
    using T = DeviceType<KT>;
    launch_col2im(static_cast<T*>(x.data_ptr()), static_cast<const T*>(cols.data_ptr()), strides4(x), strides3(cols), p,
                  s, x.numel(), current_raw_stream(x.device()));
  });
}

}  // namespace kiln::cuda
