// CUDA scan kernels (tensor/scan_kernels.h). The contiguous input is seen as
// (outer, n, inner) around the scanned dim, and the kernel is chosen by
// which of its dims are consecutive in memory:
// - inner > 1: one thread per (outer, inner) column walks down the n rows;
//   neighbouring threads read neighbouring columns, so every row's reads
//   coalesce, and the columns are many whenever inner is large.
// - inner == 1 (the scanned dim is the last): one block per row, which
//   scans the row in chunks of kThreads x kItems with cub's block scan,
//   carrying the running result from chunk to chunk.
// Accumulators are float for float, half and bfloat16, double for double
// and int64 for integers, as torch's CUDA scans; products and sums of
// integers wrap around.
#include <cub/block/block_scan.cuh>

#include <cstdint>
#include <type_traits>

#include "tensor/cuda/check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/scan_kernels.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 4;

template <class D>
using Accumulator = std::conditional_t<std::is_integral_v<D>, int64_t, std::conditional_t<std::is_same_v<D, double>, double, float>>;

template <class A>
struct Combine {
  bool product;
  __device__ A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>) {  // wraps: unsigned arithmetic is defined to
      const uint64_t x = static_cast<uint64_t>(a), y = static_cast<uint64_t>(b);
      return static_cast<A>(product ? x * y : x + y);
    } else {
      return product ? a * b : a + b;
    }
  }
};

// in, out: (outer, n, inner); one thread per column (o, j).
template <class D>
__global__ void scan_columns_kernel(D* out, const D* in, int64_t outer, int64_t n, int64_t inner, bool product,
                                    bool reverse) {
  using A = Accumulator<D>;
  const Combine<A> combine{product};
  for (int64_t column = global_thread_index(); column < outer * inner; column += grid_stride()) {
    const int64_t o = column / inner, j = column % inner;
    A acc = product ? A(1) : A(0);
    for (int64_t step = 0; step < n; ++step) {
      const int64_t i = reverse ? n - 1 - step : step;
      const int64_t at = (o * n + i) * inner + j;
      acc = combine(acc, static_cast<A>(to_compute(in[at])));
      out[at] = from_compute<D>(acc);
    }
  }
}

// What cub's block scan calls once per chunk: the result of every chunk
// before, folded into this one's first entry.
template <class A>
struct RunningResult {
  A value;
  Combine<A> combine;
  __device__ A operator()(A chunk_total) {
    const A before = value;
    value = combine(value, chunk_total);
    return before;
  }
};

// in, out: (rows, n); one block per row, grid-strided over rows.
template <class D>
__global__ void scan_rows_kernel(D* out, const D* in, int64_t rows, int64_t n, bool product, bool reverse) {
  using A = Accumulator<D>;
  using BlockScan = cub::BlockScan<A, kThreads>;
  __shared__ typename BlockScan::TempStorage scratch;
  const Combine<A> combine{product};
  const A identity = product ? A(1) : A(0);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const D* row = in + r * n;
    D* out_row = out + r * n;
    RunningResult<A> running{identity, combine};
    for (int64_t chunk = 0; chunk < n; chunk += int64_t{kThreads} * kItems) {
      A items[kItems];
      for (int k = 0; k < kItems; ++k) {  // thread t holds entries t*kItems .. t*kItems + kItems - 1
        const int64_t step = chunk + threadIdx.x * kItems + k;
        const int64_t i = reverse ? n - 1 - step : step;
        items[k] = step < n ? static_cast<A>(to_compute(row[i])) : identity;
      }
      BlockScan(scratch).InclusiveScan(items, items, combine, running);
      __syncthreads();  // scratch is reused by the next chunk
      for (int k = 0; k < kItems; ++k) {
        const int64_t step = chunk + threadIdx.x * kItems + k;
        if (step < n) out_row[reverse ? n - 1 - step : step] = from_compute<D>(items[k]);
      }
    }
  }
}

template <class T>
void launch_scan(ScanOp op, const Tensor& out, const Tensor& in, int64_t dim, bool reverse, cudaStream_t stream) {
  using D = DeviceType<T>;
  const int64_t n = in.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.size(d);
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  D* dst = static_cast<D*>(out.data_ptr());
  const D* src = static_cast<const D*>(in.data_ptr());
  const bool product = op == ScanOp::Prod;
  if (inner == 1) {
    const unsigned blocks = static_cast<unsigned>(std::min(outer, kMaxBlocks));
    scan_rows_kernel<D><<<blocks, kThreads, 0, stream>>>(dst, src, outer, n, product, reverse);
    KILN_CUDA_CHECK_LAUNCH("scan_rows_kernel");
  } else {
    scan_columns_kernel<D><<<grid_for(outer * inner), kThreadsPerBlock, 0, stream>>>(dst, src, outer, n, inner,
                                                                                     product, reverse);
    KILN_CUDA_CHECK_LAUNCH("scan_columns_kernel");
  }
}

class CudaScanKernels final : public ScanKernels {
 public:
  void scan(ScanOp op, const Tensor& out, const Tensor& in, int64_t dim, bool reverse) override {
    DeviceGuard guard(in.device(), "scan");
    cudaStream_t stream = current_raw_stream(in.device());
    visit_dtype(in.dtype(), [&]<class T>() {
      if constexpr (std::is_same_v<T, bool>) {
        KILN_FAIL("scan: bool tensors are not scanned (the front-end converts them)");
      } else {
        launch_scan<T>(op, out, in, dim, reverse, stream);
      }
    });
  }
};

}  // namespace

KILN_REGISTER_KERNEL_GROUP(ScanKernels, ::kiln::DeviceType::CUDA, CudaScanKernels);

}  // namespace kiln::cuda
