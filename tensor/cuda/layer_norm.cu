// CUDA layer norm kernels (contract in tensor/backend.h, Note
// [Normalization statistics] in tensor/norm.h; the CPU versions are
// tensor/cpu/layer_norm.cpp).
//
// x is (M, K) rows. Forward and grad_input give each row one block, which
// sums the row in float64 (block_reduce.cuh, fixed order) and then writes
// it; the row's statistics are the shifted one-pass sums of Note [CUDA
// per-channel sums] (tensor/cuda/norm.cu), shifted by the row's first value.
// grad_weight and grad_bias are sums down the rows: blocks of 32 columns by
// a run of rows write (row parts, K) partial sums, which a second kernel
// adds in order, so no two threads ever add into one value.
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

// Rows handled by the grid at once; more rows loop (gridDim.x-strided).
constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;
// The column-sum tiles: 32 columns (one warp wide) by kColumnRows threads.
constexpr int kColumnRows = 8;
// Rows per part of the column sums; more when the rows would need more parts
// than a grid's y dimension holds.
constexpr int64_t kRowsPerPart = 512;
constexpr int64_t kMaxGridY = 65535;

// Threads for one row of k values: about 4 values per thread, a whole
// number of warps, between one warp and 512 threads.
unsigned row_threads(int64_t k) {
  const int64_t warps = ceil_div(std::max<int64_t>(1, ceil_div(k, 4)), kWarpSize);
  return static_cast<unsigned>(std::clamp<int64_t>(warps, 1, 16) * kWarpSize);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min(rows, kMaxRowBlocks)); }

// out, x: (M, K); weight, bias: (K); mean, rstd: (M).
template <class T, class C>
__global__ void layer_norm_kernel(T* out, C* mean, C* rstd, const T* x, const C* weight, const C* bias,
                                  int64_t rows, int64_t k, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * k;
    const C shift = k > 0 ? to_compute(xr[0]) : C(0);
    SumPair sum;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
      const C d = to_compute(xr[i]) - shift;
      sum.first += static_cast<double>(d);
      sum.second += static_cast<double>(d * d);
    }
    sum = block_sum(sum);
    // An empty row gets mean 0 and rstd NaN, as torch and the CPU kernel.
    const double mean_d = k > 0 ? sum.first / static_cast<double>(k) : 0.0;
    const double var = k > 0 ? fmax(0.0, sum.second / static_cast<double>(k) - mean_d * mean_d) : nan("");
    const C m = static_cast<C>(static_cast<double>(shift) + mean_d);
    const C s = static_cast<C>(1.0 / sqrt(var + eps));
    if (threadIdx.x == 0) mean[r] = m, rstd[r] = s;
    T* o = out + r * k;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
      o[i] = from_compute<T>((to_compute(xr[i]) - m) * s * weight[i] + bias[i]);
    }
  }
}

// grad_x, dy, x: (M, K); mean, rstd: (M); weight: (K). With dyw = dy * w:
//   dx = rstd * dyw + (x - mean) * c_xmu + c_0,
//   c_xmu = -rstd^3 * sum(dyw * (x - mean)) / K,  c_0 = -rstd * sum(dyw) / K.
template <class T, class C>
__global__ void layer_norm_grad_input_kernel(T* grad_x, const T* dy, const T* x, const C* mean, const C* rstd,
                                             const C* weight, int64_t rows, int64_t k) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* g = dy + r * k;
    const T* xr = x + r * k;
    const C m = mean[r], s = rstd[r];
    SumPair sum;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
      const C dyw = to_compute(g[i]) * weight[i];
      sum.first += static_cast<double>(dyw);
      sum.second += static_cast<double>(dyw * (to_compute(xr[i]) - m));
    }
    sum = block_sum(sum);
    const double s_d = static_cast<double>(s);
    const C c_xmu = static_cast<C>(-s_d * s_d * s_d * sum.second / static_cast<double>(k));
    const C c_0 = static_cast<C>(-s_d * sum.first / static_cast<double>(k));
    T* gx = grad_x + r * k;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
      gx[i] = from_compute<T>(to_compute(g[i]) * weight[i] * s + ((to_compute(xr[i]) - m) * c_xmu + c_0));
    }
  }
}

// parts: (P, K) pairs {sum dy * xhat, sum dy} over part p's rows_per_part rows; grid
// (ceil(K / 32), P), block (32, kColumnRows).
template <class T, class C>
__global__ void layer_norm_param_parts_kernel(SumPair* parts, const T* dy, const T* x, const C* mean,
                                              const C* rstd, int64_t rows, int64_t k, int64_t rows_per_part) {
  __shared__ SumPair tile[kColumnRows][kWarpSize];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarpSize + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_part;
  const int64_t r1 = min(rows, r0 + rows_per_part);
  SumPair sum;
  if (j < k) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) {
      const C g = to_compute(dy[r * k + j]);
      sum.first += static_cast<double>(g * ((to_compute(x[r * k + j]) - mean[r]) * rstd[r]));
      sum.second += static_cast<double>(g);
    }
  }
  tile[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || j >= k) return;
  SumPair total;
  for (int y = 0; y < kColumnRows; ++y) total += tile[y][threadIdx.x];
  parts[static_cast<int64_t>(blockIdx.y) * k + j] = total;
}

// grad_weight, grad_bias: (K), each written when not null.
template <class C>
__global__ void layer_norm_param_finish_kernel(C* grad_weight, C* grad_bias, const SumPair* parts,
                                               int64_t num_parts, int64_t k) {
  for (int64_t j = global_thread_index(); j < k; j += grid_stride()) {
    SumPair total;
    for (int64_t p = 0; p < num_parts; ++p) total += parts[p * k + j];
    if (grad_weight != nullptr) grad_weight[j] = static_cast<C>(total.first);
    if (grad_bias != nullptr) grad_bias[j] = static_cast<C>(total.second);
  }
}

template <class T, class C>
void launch_layer_norm_params(C* grad_weight, C* grad_bias, const T* dy, const T* x, const C* mean, const C* rstd,
                              int64_t rows, int64_t k, Device device) {
  cudaStream_t stream = current_raw_stream(device);
  const int64_t rows_per_part = std::max(kRowsPerPart, ceil_div(rows, kMaxGridY));
  const int64_t num_parts = std::max<int64_t>(1, ceil_div(rows, rows_per_part));
  // parts: (P, K) float64 pairs.
  Tensor parts = Tensor::empty({num_parts, k, 2}, {DType::Float64, device});
  auto* part_data = static_cast<SumPair*>(parts.data_ptr());
  const dim3 grid(static_cast<unsigned>(ceil_div(k, kWarpSize)), static_cast<unsigned>(num_parts));
  const dim3 block(kWarpSize, kColumnRows);
  layer_norm_param_parts_kernel<T, C><<<grid, block, 0, stream>>>(part_data, dy, x, mean, rstd, rows, k,
                                                                  rows_per_part);
  KILN_CUDA_CHECK_LAUNCH("layer_norm_param_parts_kernel");
  layer_norm_param_finish_kernel<C><<<grid_for(k), kThreadsPerBlock, 0, stream>>>(grad_weight, grad_bias,
                                                                                  part_data, num_parts, k);
  KILN_CUDA_CHECK_LAUNCH("layer_norm_param_finish_kernel");
}

}  // namespace

void CudaBackend::layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                             const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t rows = x.size(0), k = x.size(1);
  if (rows == 0) return;
  DeviceGuard guard(x.device(), "layer_norm");
  visit_norm_types(x.dtype(), "layer_norm", [&]<class T, class C>() {
    layer_norm_kernel<T, C><<<row_blocks(rows), row_threads(k), 0, current_raw_stream(x.device())>>>(
        data_or_null<T>(out), data_or_null<C>(mean), data_or_null<C>(rstd), data_of<T>(x), data_of<C>(weight),
        data_of<C>(bias), rows, k, eps);
    KILN_CUDA_CHECK_LAUNCH("layer_norm_kernel");
  });
}

void CudaBackend::layer_norm_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                      const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& weight) {
  const int64_t rows = x.size(0), k = x.size(1);
  if (k == 0) return;  // every gradient is empty
  DeviceGuard guard(x.device(), "layer_norm_backward");
  visit_norm_types(x.dtype(), "layer_norm_backward", [&]<class T, class C>() {
    if (grad_input.defined() && rows > 0) {
      layer_norm_grad_input_kernel<T, C><<<row_blocks(rows), row_threads(k), 0, current_raw_stream(x.device())>>>(
          data_or_null<T>(grad_input), data_of<T>(grad_out), data_of<T>(x), data_of<C>(mean), data_of<C>(rstd),
          data_of<C>(weight), rows, k);
      KILN_CUDA_CHECK_LAUNCH("layer_norm_grad_input_kernel");
    }
    if (grad_weight.defined() || grad_bias.defined()) {
      launch_layer_norm_params<T, C>(data_or_null<C>(grad_weight), data_or_null<C>(grad_bias), data_of<T>(grad_out),
                                     data_of<T>(x), data_of<C>(mean), data_of<C>(rstd), rows, k, x.device());
    }
  });
}

}  // namespace kiln::cuda
