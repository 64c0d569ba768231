// CUDA class-index cross entropy, forward and backward (Note [Fused cross
// entropy] in tensor/cross_entropy.h): one warp per row, its lanes striding
// over the classes, the row's max and sum of exponentials reduced across
// the warp, then each lane writes its classes (backward) or lane 0 the
// row's loss (forward). Sums are in the compute type (float for float32
// and 16-bit, double for float64), in a fixed order. A target out of range
// is recorded for the host's next wait (Note [CUDA kernel errors]) and its
// row gets 0.
#include <algorithm>
#include <type_traits>
#include <utility>

#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/kernel_errors.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/math.cuh"
#include "tensor/cuda/reduce.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

constexpr int64_t kRowsPerBlock = kReduceThreads / kWarpThreads;

// combine over the warp's 32 values, returned to every lane.
template <class C, class Combine>
__device__ inline C warp_all_reduce(C v, const Combine& combine) {
  v = warp_reduce(v, combine);
  return __shfl_sync(0xffffffffu, v, 0);
}

// A row's max and sum of exp(x - max), on every lane of its warp.
template <class T, class C>
__device__ inline void row_statistics(const T* row, int64_t classes, int lane, C& max, C& sum) {
  max = negative_infinity<C>();
  for (int64_t c = lane; c < classes; c += kWarpThreads) max = max_of(max, to_compute(row[c]));
  max = warp_all_reduce(max, [](C a, C b) { return max_of(a, b); });
  sum = 0;
  for (int64_t c = lane; c < classes; c += kWarpThreads) sum += exp_of(to_compute(row[c]) - max);
  sum = warp_all_reduce(sum, [](C a, C b) { return a + b; });
}

// x: (rows, classes); target, losses, target_weights: (rows); weight:
// (classes) or null.
template <class T>
__global__ void cross_entropy_kernel(T* losses, T* target_weights, const T* x, const int64_t* target, const T* weight,
                                     int64_t rows, int64_t classes, int64_t ignore_index, double s, ErrorSlot bad) {
  using C = decltype(to_compute(std::declval<T>()));
  const int lane = threadIdx.x % kWarpThreads;
  // A row's condition is the same on all its lanes, so whole warps branch.
  for (int64_t n = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpThreads; n < rows;
       n += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t t = target[n];
    if (t == ignore_index || t < 0 || t >= classes) {
      if (lane == 0) {
        if (t != ignore_index) bad.record(t);
        losses[n] = from_compute<T>(C(0));
        target_weights[n] = from_compute<T>(C(0));
      }
      continue;
    }
    const T* row = x + n * classes;
    C max, sum;
    row_statistics(row, classes, lane, max, sum);
    const C log_sum = log_of(sum);
    const C w_t = weight ? to_compute(weight[t]) : C(1);
    C l = -((to_compute(row[t]) - max) - log_sum) * w_t;
    if (s > 0) {
      C all = 0;  // sum_c w_c * logp_c
      for (int64_t c = lane; c < classes; c += kWarpThreads) {
        const C logp = (to_compute(row[c]) - max) - log_sum;
        all += weight ? to_compute(weight[c]) * logp : logp;
      }
      all = warp_all_reduce(all, [](C a, C b) { return a + b; });
      l = l * static_cast<C>(1.0 - s) + all * static_cast<C>(-s / static_cast<double>(classes));
    }
    if (lane == 0) {
      losses[n] = from_compute<T>(l);
      target_weights[n] = from_compute<T>(w_t);
    }
  }
}

// grad, x: (rows, classes); grad_out: (rows), or one value when
// one_upstream; denominator: one value or null.
template <class T>
__global__ void cross_entropy_backward_kernel(T* grad, const T* grad_out, bool one_upstream, const T* denominator,
                                              const T* x, const int64_t* target, const T* weight, int64_t rows,
                                              int64_t classes, int64_t ignore_index, double s) {
  using C = decltype(to_compute(std::declval<T>()));
  const int lane = threadIdx.x % kWarpThreads;
  for (int64_t n = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpThreads; n < rows;
       n += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t t = target[n];
    T* out = grad + n * classes;
    if (t == ignore_index || t < 0 || t >= classes) {
      for (int64_t c = lane; c < classes; c += kWarpThreads) out[c] = from_compute<T>(C(0));
      continue;
    }
    const T* row = x + n * classes;
    C max, sum;
    row_statistics(row, classes, lane, max, sum);
    C u = to_compute(grad_out[one_upstream ? 0 : n]);
    if (denominator) u = u / to_compute(*denominator);
    const C w_t = weight ? to_compute(weight[t]) : C(1);
    C a = w_t;  // a_n
    if (s > 0) {
      C smooth_part = static_cast<C>(s);  // s/C * sum_c w_c, s when unweighted
      if (weight) {
        C total = 0;
        for (int64_t c = lane; c < classes; c += kWarpThreads) total += to_compute(weight[c]);
        total = warp_all_reduce(total, [](C p, C q) { return p + q; });
        smooth_part = total * static_cast<C>(s / static_cast<double>(classes));
      }
      a = w_t * static_cast<C>(1.0 - s) + smooth_part;
    }
    const C scale = u * a, at_target = u * (w_t * static_cast<C>(s - 1.0));
    const C smooth = u * static_cast<C>(s / static_cast<double>(classes));
    for (int64_t c = lane; c < classes; c += kWarpThreads) {
      C v = (exp_of(to_compute(row[c]) - max) / sum) * scale;
      if (c == t) v = v + at_target;
      if (s > 0) v = v - (weight ? smooth * to_compute(weight[c]) : smooth);
      out[c] = from_compute<T>(v);
    }
  }
}

unsigned blocks_for_rows(int64_t rows) {
  return static_cast<unsigned>(std::min(ceil_div(rows, kRowsPerBlock), kMaxBlocks));
}

template <class D>
const D* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const D*>(t.data_ptr()) : nullptr;
}

}  // namespace

void CudaBackend::cross_entropy(const Tensor& losses, const Tensor& target_weights, const Tensor& x,
                                const Tensor& target, const Tensor& weight, int64_t ignore_index, double smoothing,
                                const IndexErrorMessage& message) {
  DeviceGuard guard(x.device(), "cross_entropy");
  cudaStream_t stream = current_raw_stream(x.device());
  const ErrorSlot bad =
      watch_kernel_errors(x.device(), stream, [message](const KernelErrorValues& v) { return message(v[0]); });
  visit_floating_dtype(x.dtype(), "cross_entropy", [&]<class T>() {
    using D = DeviceType<T>;
    const int64_t rows = x.size(0);
    cross_entropy_kernel<D><<<blocks_for_rows(rows), kReduceThreads, 0, stream>>>(
        static_cast<D*>(losses.data_ptr()), static_cast<D*>(target_weights.data_ptr()),
        static_cast<const D*>(x.data_ptr()), target.data<int64_t>(), data_or_null<D>(weight), rows, x.size(1),
        ignore_index, smoothing, bad);
    KILN_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
  });
}

void CudaBackend::cross_entropy_backward(const Tensor& grad, const Tensor& grad_out, const Tensor& denominator,
                                         const Tensor& x, const Tensor& target, const Tensor& weight,
                                         int64_t ignore_index, double smoothing) {
  DeviceGuard guard(x.device(), "cross_entropy_backward");
  cudaStream_t stream = current_raw_stream(x.device());
  visit_floating_dtype(x.dtype(), "cross_entropy_backward", [&]<class T>() {
    using D = DeviceType<T>;
    const int64_t rows = x.size(0);
    cross_entropy_backward_kernel<D><<<blocks_for_rows(rows), kReduceThreads, 0, stream>>>(
        static_cast<D*>(grad.data_ptr()), static_cast<const D*>(grad_out.data_ptr()), grad_out.dim() == 0,
        data_or_null<D>(denominator), static_cast<const D*>(x.data_ptr()), target.data<int64_t>(),
        data_or_null<D>(weight), rows, x.size(1), ignore_index, smoothing);
    KILN_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
  });
}

}  // namespace kiln::cuda
