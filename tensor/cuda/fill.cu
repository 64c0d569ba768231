// CUDA fill: every element of a strided tensor set to one value.
//
// The value is converted to the tensor's dtype on the host (Scalar::to, the
// same conversion the CPU fill uses), so the kernel only stores bits and is
// instantiated once per element width (Note [Strided kernels]).
#include <cstring>

#include "tensor/cuda/check.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/dtype.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/strided.cuh"

namespace kiln::cuda {

namespace {

// out: any strides, n elements; B: an unsigned type of the element's width.
template <class B>
__global__ void fill_kernel(B* out, StridedOffsets<1> layout, int64_t n, B value) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    int64_t offset[1];
    layout.offsets(i, offset);
    out[offset[0]] = value;
  }
}

template <class B>
void launch_fill(B* out, const StridedOffsets<1>& layout, int64_t n, B value, cudaStream_t stream) {
  fill_kernel<B><<<grid_for(n), kThreadsPerBlock, 0, stream>>>(out, layout, n, value);
  KILN_CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace

void CudaBackend::fill(const Tensor& out, Scalar value) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device(), "fill");
  cudaStream_t stream = current_raw_stream(out.device());
  visit_dtype(out.dtype(), [&]<class T>() {
    using B = BitsOf<T>;
    T typed = value.to<T>();
    B bits;
    std::memcpy(&bits, &typed, sizeof bits);
    for_each_strided_launch<1>({out}, [&](const std::array<Tensor, 1>& part, const StridedOffsets<1>& layout) {
      launch_fill(static_cast<B*>(part[0].data_ptr()), layout, part[0].numel(), bits, stream);
    });
  });
}

}  // namespace kiln::cuda
