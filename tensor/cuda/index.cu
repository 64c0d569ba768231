// CUDA index_select, gather and scatter_add, and check_index_range.
//
// The names follow tensor/cpu/index.cpp: X is the tensor addressed through
// the index along `dim`, Y the one addressed by the position j along `dim`,
// I the index, addressed by j too.
//   index_select / gather: one thread per output element (Y = out) reads
//   its index value and copies X's element; the copy is dtype-blind.
//   scatter_add: one thread per "outer" coordinate (the iteration shape
//   without `dim`) walks j in ascending order and adds Y's elements into X.
//   Different outer coordinates never touch the same X element, so there
//   are no atomics, and each X element receives its contributions in the
//   CPU's order and rounding: the sums are deterministic and bitwise those
//   of the CPU. A thread's walk is as long as the index along `dim`; the
//   threads are the index's other elements, which for the common uses
//   (gather's backward along classes, index_select's backward along rows of
//   an embedding) are many.
//
// An index value outside [0, size) is skipped by the kernel and reported
// when the host next waits for the stream (Note [CUDA kernel errors] in
// tensor/cuda/kernel_errors.h), with the CPU's message.
#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/kernel_errors.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/strided.cuh"

namespace kiln::cuda {

namespace {

// Watches the launches of `op` that are about to be queued on `stream` for
// an index value outside [0, limit), with the CPU's message.
ErrorSlot watch_indices(Device device, cudaStream_t stream, const char* op, int64_t dim, int64_t limit) {
  return watch_kernel_errors(device, stream, [op, dim, limit](const KernelErrorValues& v) {
    return kiln::detail::str(op, ": index ", v[0], " is out of range for dim ", dim, " of size ", limit);
  });
}

// `t` viewed with `sizes` (the iteration shape) minus `dim`, keeping t's strides.
Tensor outer_view(const Tensor& t, const Shape& sizes, int64_t dim) {
  Shape outer_sizes = sizes, outer_strides = t.strides();
  outer_sizes.erase(outer_sizes.begin() + dim);
  outer_strides.erase(outer_strides.begin() + dim);
  return t.as_strided(outer_sizes, outer_strides, t.storage_offset());
}

// y[i] = x[i with index[i] along dim] for every element i of y.
// Layout operands: 0 = y, 1 = x with its dim stride 0, 2 = index, all of
// y's shape. B: an unsigned type of the element's width.
template <class B>
__global__ void gather_kernel(B* y, const B* x, const int64_t* index, StridedOffsets<3> layout, int64_t n,
                              int64_t x_dim_stride, int64_t limit, ErrorSlot bad) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[3];
    layout.offsets(i, offset);
    const int64_t v = index[offset[2]];
    if (static_cast<uint64_t>(v) >= static_cast<uint64_t>(limit)) {
      bad.record(v);
      continue;
    }
    y[offset[0]] = x[offset[1] + v * x_dim_stride];
  }
}

template <class B>
void launch_gather(B* y, const B* x, const int64_t* index, const StridedOffsets<3>& layout, int64_t n,
                   int64_t x_dim_stride, int64_t limit, ErrorSlot bad, cudaStream_t stream) {
  gather_kernel<B><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(y, x, index, layout, n, x_dim_stride, limit, bad);
  KILN_CUDA_CHECK_LAUNCH("gather_kernel");
}

// index has out's shape (index_select spreads its 1-d index with stride 0).
void gather_like(const char* op, const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  DeviceGuard guard(out.device(), op);
  cudaStream_t stream = current_raw_stream(out.device());
  Shape in_strides = in.strides();
  in_strides[dim] = 0;  // the index supplies the position along dim
  Tensor in_view = in.as_strided(out.shape(), in_strides, in.storage_offset());
  const int64_t limit = in.size(dim), x_dim_stride = in.stride(dim);
  const ErrorSlot bad = watch_indices(out.device(), stream, op, dim, limit);
  visit_element_bits(out.dtype(), [&]<class B>() {
    for_each_strided_launch<3>({out, in_view, index}, [&](const std::array<Tensor, 3>& part,
                                                          const StridedOffsets<3>& layout) {
      launch_gather(static_cast<B*>(part[0].data_ptr()), static_cast<const B*>(part[1].data_ptr()),
                    static_cast<const int64_t*>(part[2].data_ptr()), layout, part[0].numel(), x_dim_stride, limit,
                    bad, stream);
    });
  });
}

// For each outer coordinate o (layout operands 0 = x, 1 = y, 2 = index, of
// the outer shape): x[o, index[o, j]] += y[o, j] for j = 0 .. count-1 in
// order, each sum rounded to D as the CPU's.
template <class D>
__global__ void scatter_add_kernel(D* x, const D* y, const int64_t* index, StridedOffsets<3> layout, int64_t outer,
                                   int64_t count, int64_t x_dim_stride, int64_t y_dim_stride,
                                   int64_t index_dim_stride, int64_t limit, ErrorSlot bad) {
  for (int64_t o = global_thread_index(); o < outer; o += grid_stride()) {
    int64_t offset[3];
    layout.offsets(o, offset);
    for (int64_t j = 0; j < count; ++j) {
      const int64_t v = index[offset[2] + j * index_dim_stride];
      if (static_cast<uint64_t>(v) >= static_cast<uint64_t>(limit)) {
        bad.record(v);
        continue;
      }
      D* dst = x + offset[0] + v * x_dim_stride;
      *dst = from_compute<D>(to_compute(*dst) + to_compute(y[offset[1] + j * y_dim_stride]));
    }
  }
}

template <class D>
void launch_scatter_add(D* x, const D* y, const int64_t* index, const StridedOffsets<3>& layout, int64_t outer,
                        int64_t count, int64_t x_dim_stride, int64_t y_dim_stride, int64_t index_dim_stride,
                        int64_t limit, ErrorSlot bad, cudaStream_t stream) {
  scatter_add_kernel<D><<<grid_for(outer), kThreadsPerBlock, 0, stream>>>(
      x, y, index, layout, outer, count, x_dim_stride, y_dim_stride, index_dim_stride, limit, bad);
  KILN_CUDA_CHECK_LAUNCH("scatter_add_kernel");
}

// Records a value of `index` outside [0, limit); one thread per element.
__global__ void check_range_kernel(const int64_t* index, StridedOffsets<1> layout, int64_t n, int64_t limit,
                                   ErrorSlot bad) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[1];
    layout.offsets(i, offset);
    const int64_t v = index[offset[0]];
    if (static_cast<uint64_t>(v) >= static_cast<uint64_t>(limit)) bad.record(v);
  }
}

}  // namespace

void CudaBackend::check_index_range(const Tensor& index, int64_t limit, const IndexErrorMessage& message) {
  DeviceGuard guard(index.device(), "check_index_range");
  cudaStream_t stream = current_raw_stream(index.device());
  const ErrorSlot bad = watch_kernel_errors(index.device(), stream,
                                            [message](const KernelErrorValues& v) { return message(v[0]); });
  if (bad.words == nullptr) return;  // capturing a graph: nothing would be reported
  for_each_strided_launch<1>({index}, [&](const std::array<Tensor, 1>& part, const StridedOffsets<1>& layout) {
    const int64_t n = part[0].numel();
    check_range_kernel<<<grid_for(n), kThreadsPerBlock, 0, stream>>>(static_cast<const int64_t*>(part[0].data_ptr()),
                                                                       layout, n, limit, bad);
    KILN_CUDA_CHECK_LAUNCH("check_range_kernel");
  });
}

void CudaBackend::index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  // index: (K,) seen as out's shape with stride 0 outside dim.
  Shape strides(out.dim(), 0);
  strides[dim] = index.stride(0);
  gather_like("index_select", out, in, dim, index.as_strided(out.shape(), strides, index.storage_offset()));
}

void CudaBackend::gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  gather_like("gather", out, in, dim, index);
}

void CudaBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  DeviceGuard guard(out.device(), "scatter_add");
  cudaStream_t stream = current_raw_stream(out.device());
  const Shape& shape = index.shape();
  Tensor xo = outer_view(out, shape, dim), yo = outer_view(src, shape, dim), io = outer_view(index, shape, dim);
  const int64_t limit = out.size(dim), count = shape[dim];
  const int64_t x_dim_stride = out.stride(dim), y_dim_stride = src.stride(dim), index_dim_stride = index.stride(dim);
  const ErrorSlot bad = watch_indices(out.device(), stream, "scatter_add", dim, limit);
  visit_dtype(out.dtype(), [&]<class T>() {
    using D = DeviceType<T>;
    for_each_strided_launch<3>({xo, yo, io}, [&](const std::array<Tensor, 3>& part,
                                                 const StridedOffsets<3>& layout) {
      const int64_t outer = part[0].numel();
      if (outer == 0) return;
      launch_scatter_add(static_cast<D*>(part[0].data_ptr()), static_cast<const D*>(part[1].data_ptr()),
                         static_cast<const int64_t*>(part[2].data_ptr()), layout, outer, count, x_dim_stride,
                         y_dim_stride, index_dim_stride, limit, bad, stream);
    });
  });
}

}  // namespace kiln::cuda
