// CUDA softmax and log-softmax along one dim, with the semantics of
// tensor/cpu/softmax.cpp: each row's max is subtracted before exp, so
// nothing overflows, and a row whose max is +-inf or NaN gives NaN.
//   softmax(x)     = exp(x - m) / sum exp(x - m)
//   log_softmax(x) = (x - m) - log(sum exp(x - m))
// Layouts, as the reductions (Note [CUDA reduction layouts]):
// - rows: `dim` contiguous in the input (the last dim of a contiguous
//   tensor): a warp per row up to kWarpRowLimit elements, else a block;
//   the group reduces the max, then the sum, then writes, reading the row
//   three times (the second and third reads mostly hit L2).
// - columns: otherwise (dim 1 of (N, C, H*W)): one thread per row, walking
//   down its elements while neighbouring threads read neighbouring columns.
// Sums are taken in the compute type (float for float32 and 16-bit, double
// for float64), in a fixed order.
#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/math.cuh"
#include "tensor/cuda/reduce.cuh"
#include "tensor/cuda/stream.h"

namespace kiln::cuda {

namespace {

// The combine over a group of kGroup threads, returned to all of them.
template <int kGroup, class C, class Combine>
__device__ inline C group_all_reduce(C v, const Combine& combine, C identity) {
  if constexpr (kGroup == kWarpThreads) {
    v = warp_reduce(v, combine);
    return __shfl_sync(0xffffffffu, v, 0);
  } else {
    __shared__ C result;
    v = block_reduce(v, combine, identity);
    if (threadIdx.x == 0) result = v;
    __syncthreads();
    C all = result;
    __syncthreads();  // result may be rewritten by the next call
    return all;
  }
}

// Rows of n elements, in_stride / out_stride apart within a row; kept gives
// each row's first element {in, out}. One group of kGroup threads per row.
template <class T, int kGroup>
__global__ void softmax_rows_kernel(T* out, const T* in, StridedOffsets<2> kept, int64_t n_rows, int64_t n,
                                    int64_t in_stride, int64_t out_stride, bool log) {
  using C = decltype(to_compute(std::declval<T>()));
  constexpr int kGroupsPerBlock = kReduceThreads / kGroup;
  const int rank = threadIdx.x % kGroup;
  auto max_combine = [](C a, C b) { return max_of(a, b); };
  auto add = [](C a, C b) { return a + b; };
  // The bound is the same for every thread of a group (see reduce.cu).
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock + threadIdx.x / kGroup; row < n_rows;
       row += static_cast<int64_t>(gridDim.x) * kGroupsPerBlock) {
    int64_t offsets[2];
    kept.offsets(row, offsets);
    const T* x = in + offsets[0];
    T* y = out + offsets[1];
    C m = negative_infinity<C>();
    for (int64_t i = rank; i < n; i += kGroup) m = max_of(m, to_compute(x[i * in_stride]));
    m = group_all_reduce<kGroup>(m, max_combine, negative_infinity<C>());
    C sum = 0;
    for (int64_t i = rank; i < n; i += kGroup) sum += exp_of(to_compute(x[i * in_stride]) - m);
    sum = group_all_reduce<kGroup>(sum, add, C(0));
    if (log) {
      C log_sum = log_of(sum);
      for (int64_t i = rank; i < n; i += kGroup)
        y[i * out_stride] = from_compute<T>((to_compute(x[i * in_stride]) - m) - log_sum);
    } else {
      for (int64_t i = rank; i < n; i += kGroup)
        y[i * out_stride] = from_compute<T>(exp_of(to_compute(x[i * in_stride]) - m) / sum);
    }
  }
}

// The same with one thread per row.
template <class T>
__global__ void softmax_columns_kernel(T* out, const T* in, StridedOffsets<2> kept, int64_t n_rows, int64_t n,
                                       int64_t in_stride, int64_t out_stride, bool log) {
  using C = decltype(to_compute(std::declval<T>()));
  for (int64_t row = global_thread_index(); row < n_rows; row += grid_stride()) {
    int64_t offsets[2];
    kept.offsets(row, offsets);
    const T* x = in + offsets[0];
    T* y = out + offsets[1];
    C m = negative_infinity<C>();
    for (int64_t i = 0; i < n; ++i) m = max_of(m, to_compute(x[i * in_stride]));
    C sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += exp_of(to_compute(x[i * in_stride]) - m);
    if (log) {
      C log_sum = log_of(sum);
      for (int64_t i = 0; i < n; ++i) y[i * out_stride] = from_compute<T>((to_compute(x[i * in_stride]) - m) - log_sum);
    } else {
      for (int64_t i = 0; i < n; ++i)
        y[i * out_stride] = from_compute<T>(exp_of(to_compute(x[i * in_stride]) - m) / sum);
    }
  }
}

// T: Kiln's host type.
template <class T>
void softmax_typed(const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  using D = DeviceType<T>;
  DimList<2> kept;  // strides: {in, out}
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (d != dim) kept.add(in.size(d), {in.stride(d), out.stride(d)});
  }
  kept.sort_and_merge();
  StridedOffsets<2> offsets;
  if (!kept.to_offsets(offsets)) {
    // Too many dims for the kernels (Note [Strided kernels]): contiguous
    // operands merge to at most two kept dims.
    Tensor packed_out = Tensor::empty(in.shape(), {in.dtype(), in.device()});
    softmax_typed<T>(packed_out, in.contiguous(), dim, log);
    backend().copy(out, packed_out);
    return;
  }
  const int64_t n = in.size(dim), n_rows = kept.numel();
  D* dst = static_cast<D*>(out.data_ptr());
  const D* src = static_cast<const D*>(in.data_ptr());
  cudaStream_t stream = current_raw_stream(in.device());
  if (in.stride(dim) == 1 && n > 1) {
    if (n <= kWarpRowLimit) {
      constexpr int64_t kWarpsPerBlock = kReduceThreads / kWarpThreads;
      unsigned blocks = static_cast<unsigned>(std::min(ceil_div(n_rows, kWarpsPerBlock), kMaxBlocks));
      softmax_rows_kernel<D, kWarpThreads>
          <<<blocks, kReduceThreads, 0, stream>>>(dst, src, offsets, n_rows, n, 1, out.stride(dim), log);
    } else {
      unsigned blocks = static_cast<unsigned>(std::min(n_rows, kMaxBlocks));
      softmax_rows_kernel<D, kReduceThreads>
          <<<blocks, kReduceThreads, 0, stream>>>(dst, src, offsets, n_rows, n, 1, out.stride(dim), log);
    }
    KILN_CUDA_CHECK_LAUNCH("softmax_rows_kernel");
    return;
  }
  unsigned blocks = static_cast<unsigned>(std::min(ceil_div(n_rows, kReduceThreads), kMaxBlocks));
  softmax_columns_kernel<D>
      <<<blocks, kReduceThreads, 0, stream>>>(dst, src, offsets, n_rows, n, in.stride(dim), out.stride(dim), log);
  KILN_CUDA_CHECK_LAUNCH("softmax_columns_kernel");
}

}  // namespace

void CudaBackend::softmax(const Tensor& out, const Tensor& in, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  visit_floating_dtype(in.dtype(), name, [&]<class T>() {
    if (in.numel() == 0) return;
    DeviceGuard guard(in.device(), name);
    softmax_typed<T>(out, in, dim, log);
  });
}

}  // namespace kiln::cuda
