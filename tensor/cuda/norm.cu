// CUDA batch norm kernels (contract in tensor/backend.h, Note [Normalization
// statistics] in tensor/norm.h; the CPU versions are tensor/cpu/norm.cpp).
//
// Note [CUDA per-channel sums]
// x is (N, C, S), contiguous. A channel's N*S values are cut into `parts`
// equal runs (the count depends only on the shape); block (c, part) sums its
// run into two float64 sums, and a second kernel adds each channel's parts
// in order. Every sum is taken in a fixed order (block_reduce.cuh), so the
// statistics are the same bits on every run, without atomics.
// The statistics are one pass of shifted sums: with d = x - x[0, c, 0] (a
// value of the channel, so near its mean in units of its spread),
//   mean = shift + sum(d) / n,  var = sum(d^2) / n - (sum(d) / n)^2.
// The differences are taken in the compute type (float32 for 16-bit and
// float32 x) and summed in float64; the subtraction of the last line then
// cancels only as many digits as |shift - mean| / std has, which float64's
// 16 digits absorb (data at 1e4 +- 1 keeps float32 precision, as the CPU's
// two-pass sums do).
#include <algorithm>

#include "tensor/cuda/block_reduce.cuh"
#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/norm_types.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

// Values per part below which a channel is not cut further, and the number
// of blocks above which it is not worth cutting more (a few per SM).
constexpr int64_t kMinPartValues = 4096;
constexpr int64_t kTargetBlocks = 2048;
constexpr int kReduceThreads = 256;

struct BatchShape {
  int64_t n, c, s;
  __host__ __device__ int64_t per_channel() const { return n * s; }
  // Parts per channel (Note [CUDA per-channel sums]).
  int64_t parts() const {
    const int64_t by_size = ceil_div(per_channel(), kMinPartValues);
    const int64_t by_blocks = std::max<int64_t>(1, ceil_div(kTargetBlocks, c));
    return std::max<int64_t>(1, std::min(by_size, by_blocks));
  }
};

BatchShape batch_shape(const Tensor& x) { return {x.size(0), x.size(1), x.size(2)}; }

// What a part sums: the shifted moments (statistics) or the gradient sums
// (sum dy, sum dy * (x - mean)).
enum class Sums { Moments, Gradient };

// parts: (C, P) pairs; grid (C, P), kReduceThreads threads. x, dy: (N, C, S);
// mean: (C), read for Sums::Gradient only.
template <Sums kind, class T, class C>
__global__ void channel_parts_kernel(SumPair* parts, const T* x, const T* dy, const C* mean, BatchShape shape,
                                     int64_t num_parts) {
  const int64_t c = blockIdx.x, part = blockIdx.y;
  const int64_t count = shape.per_channel();
  const int64_t begin = count * part / num_parts, end = count * (part + 1) / num_parts;
  const C center = kind == Sums::Moments ? to_compute(x[c * shape.s]) : mean[c];
  SumPair sum;
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
    const int64_t n = e / shape.s, s = e - n * shape.s;
    const int64_t at = (n * shape.c + c) * shape.s + s;
    const C d = to_compute(x[at]) - center;
    if constexpr (kind == Sums::Moments) {
      sum.first += static_cast<double>(d);
      sum.second += static_cast<double>(d * d);
    } else {
      const C g = to_compute(dy[at]);
      sum.first += static_cast<double>(g);
      sum.second += static_cast<double>(g * d);
    }
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) parts[c * num_parts + part] = sum;
}

// One block per channel adds its parts; writes mean and biased var
// (Sums::Moments) or the two gradient sums. out_a, out_b: (C).
template <Sums kind, class T, class C>
__global__ void channel_finish_kernel(C* out_a, C* out_b, const SumPair* parts, const T* x, BatchShape shape,
                                      int64_t num_parts) {
  const int64_t c = blockIdx.x;
  SumPair sum;
  for (int64_t p = threadIdx.x; p < num_parts; p += blockDim.x) sum += parts[c * num_parts + p];
  sum = block_sum(sum);
  if (threadIdx.x != 0) return;
  if constexpr (kind == Sums::Moments) {
    const double count = static_cast<double>(shape.per_channel());
    const double shift = static_cast<double>(to_compute(x[c * shape.s]));
    const double mean_d = sum.first / count;
    out_a[c] = static_cast<C>(shift + mean_d);
    out_b[c] = static_cast<C>(fmax(0.0, sum.second / count - mean_d * mean_d));
  } else {
    out_a[c] = static_cast<C>(sum.first);
    out_b[c] = static_cast<C>(sum.second);
  }
}

template <Sums kind, class T, class C>
void launch_channel_sums(C* out_a, C* out_b, const T* x, const T* dy, const C* mean, const BatchShape& shape,
                         Device device) {
  cudaStream_t stream = current_raw_stream(device);
  const int64_t num_parts = shape.parts();
  // parts: (C, P) float64 pairs, from the CUDA allocator.
  Tensor parts = Tensor::empty({shape.c, num_parts, 2}, {DType::Float64, device});
  auto* part_data = static_cast<SumPair*>(parts.data_ptr());
  const dim3 grid(static_cast<unsigned>(shape.c), static_cast<unsigned>(num_parts));
  channel_parts_kernel<kind, T, C><<<grid, kReduceThreads, 0, stream>>>(part_data, x, dy, mean, shape, num_parts);
  KILN_CUDA_CHECK_LAUNCH("channel_parts_kernel");
  channel_finish_kernel<kind, T, C><<<static_cast<unsigned>(shape.c), kReduceThreads, 0, stream>>>(
      out_a, out_b, part_data, x, shape, num_parts);
  KILN_CUDA_CHECK_LAUNCH("channel_finish_kernel");
}

// out = (x - mean[c]) * scale[c] + shift[c], plus dy * dy_scale[c] when dy
// is given (the backward). out, x, dy: (N, C, S); coefficients: (C).
template <class T, class C>
__global__ void channel_affine_kernel(T* out, const T* x, const T* dy, const C* mean, const C* scale,
                                      const C* shift, const C* dy_scale, BatchShape shape, int64_t total) {
  for (int64_t i = global_thread_index(); i < total; i += grid_stride()) {
    const int64_t c = (i / shape.s) % shape.c;
    C value = (to_compute(x[i]) - mean[c]) * scale[c] + shift[c];
    if (dy != nullptr) value = to_compute(dy[i]) * dy_scale[c] + value;
    out[i] = from_compute<T>(value);
  }
}

template <class T, class C>
void launch_channel_affine(T* out, const T* x, const T* dy, const C* mean, const C* scale, const C* shift,
                           const C* dy_scale, const BatchShape& shape, Device device) {
  const int64_t total = shape.n * shape.c * shape.s;
  channel_affine_kernel<T, C><<<grid_for(total), kThreadsPerBlock, 0, current_raw_stream(device)>>>(
      out, x, dy, mean, scale, shift, dy_scale, shape, total);
  KILN_CUDA_CHECK_LAUNCH("channel_affine_kernel");
}

}  // namespace

void CudaBackend::batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) {
  if (x.numel() == 0) return;
  DeviceGuard guard(x.device(), "batch_norm");
  visit_norm_types(x.dtype(), "batch_norm", [&]<class T, class C>() {
    launch_channel_sums<Sums::Moments, T, C>(data_or_null<C>(mean), data_or_null<C>(var), data_of<T>(x),
                                             nullptr, nullptr, batch_shape(x), x.device());
  });
}

void CudaBackend::batch_norm_apply(const Tensor& out, const Tensor& x, const Tensor& mean, const Tensor& scale,
                                   const Tensor& shift) {
  if (x.numel() == 0) return;
  DeviceGuard guard(x.device(), "batch_norm");
  visit_norm_types(x.dtype(), "batch_norm", [&]<class T, class C>() {
    launch_channel_affine<T, C>(data_or_null<T>(out), data_of<T>(x), nullptr, data_of<C>(mean),
                                data_of<C>(scale), data_of<C>(shift), nullptr, batch_shape(x), x.device());
  });
}

void CudaBackend::batch_norm_backward_reduce(const Tensor& sum_dy, const Tensor& sum_dy_xmu, const Tensor& grad_out,
                                             const Tensor& x, const Tensor& mean) {
  DeviceGuard guard(x.device(), "batch_norm_backward");
  if (x.numel() == 0) {
    // Sums over no values.
    fill(sum_dy, Scalar(0));
    fill(sum_dy_xmu, Scalar(0));
    return;
  }
  visit_norm_types(x.dtype(), "batch_norm_backward", [&]<class T, class C>() {
    launch_channel_sums<Sums::Gradient, T, C>(data_or_null<C>(sum_dy), data_or_null<C>(sum_dy_xmu),
                                              data_of<T>(x), data_of<T>(grad_out), data_of<C>(mean), batch_shape(x),
                                              x.device());
  });
}

void CudaBackend::batch_norm_backward_apply(const Tensor& grad_input, const Tensor& grad_out, const Tensor& x,
                                            const Tensor& mean, const Tensor& dy_scale, const Tensor& xmu_scale,
                                            const Tensor& shift) {
  if (x.numel() == 0) return;
  DeviceGuard guard(x.device(), "batch_norm_backward");
  visit_norm_types(x.dtype(), "batch_norm_backward", [&]<class T, class C>() {
    launch_channel_affine<T, C>(data_or_null<T>(grad_input), data_of<T>(x), data_of<T>(grad_out),
                                data_of<C>(mean), data_of<C>(xmu_scale), data_of<C>(shift), data_of<C>(dy_scale),
                                batch_shape(x), x.device());
  });
}

}  // namespace kiln::cuda
