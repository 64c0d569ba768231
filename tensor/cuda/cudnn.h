// cuDNN for the CUDA backend: the status check, the per-thread handle and
// owning wrappers for the descriptors that the convolution uses.
//
// KILN_CUDNN_CHECK(cudnnConvolutionForward(...)) throws kiln::Error naming
// the call, cuDNN's status and its last error message, and file:line (Note
// [CUDA status checks] in tensor/cuda/check.h).
#pragma once

#include <cudnn.h>

#include "tensor/cuda/check.h"
#include "tensor/dtype.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace kiln::cuda {

// The calling thread's cuDNN handle for `device` (Note [Library handles] in
// tensor/cuda/handle_pool.h), with its stream set to the thread's current
// stream on that device. The device must be current (hold a DeviceGuard).
cudnnHandle_t cudnn_handle(Device device);

// cuDNN's data type for a floating Kiln dtype; throws for the others.
cudnnDataType_t cudnn_data_type(DType dtype);

// What the convolutions (legacy calls and graph API alike) share:
// - the largest workspace a convolution may take (FFT variants can ask for
//   gigabytes);
inline constexpr size_t kMaxConvWorkspaceBytes = size_t{1} << 30;
// - whether cuDNN declined an algorithm, plan or graph for these
//   descriptors or pointers (its NOT_SUPPORTED statuses, 3000 to 3999, and
//   a misaligned pointer) rather than failed;
bool cudnn_declined(cudnnStatus_t status);
// - the largest power of two up to 16 that divides t's address. A group's
//   channel slice starts at an offset into the batch, so groups of one
//   convolution share their sizes but not an alignment, and an algorithm
//   that ran on group 0's aligned pointers may refuse group 1's (as in
//   torch, whose cache key holds the alignment too);
int64_t pointer_alignment(const Tensor& t);
// - float16 and bfloat16, which cuDNN sums in float32 (Note [16-bit cuDNN
//   convolutions] in conv.cpp).
inline bool is_16_bit(DType dtype) { return dtype == DType::Float16 || dtype == DType::BFloat16; }

namespace detail {
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line);
}  // namespace detail

// A descriptor owned for one scope: created in the constructor, destroyed in
// the destructor. Descriptor types differ only in their create/destroy pair.
template <class Descriptor, cudnnStatus_t (*create)(Descriptor*), cudnnStatus_t (*destroy)(Descriptor)>
class CudnnDescriptor {
 public:
  CudnnDescriptor();
  ~CudnnDescriptor() {
    // Destroying a descriptor only frees host memory; it fails only for a
    // null descriptor, which the constructor never leaves behind.
    (void)destroy(descriptor_);
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  Descriptor get() const { return descriptor_; }

 private:
  Descriptor descriptor_ = nullptr;
};

using TensorDescriptor =
    CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor = CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                              cudnnDestroyConvolutionDescriptor>;

}  // namespace kiln::cuda

#define KILN_CUDNN_CHECK(call)                                                                \
  do {                                                                                        \
    const cudnnStatus_t kiln_cudnn_status_ = (call);                                          \
    if (kiln_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                              \
      ::kiln::cuda::detail::throw_cudnn_error(kiln_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)

namespace kiln::cuda {

template <class Descriptor, cudnnStatus_t (*create)(Descriptor*), cudnnStatus_t (*destroy)(Descriptor)>
CudnnDescriptor<Descriptor, create, destroy>::CudnnDescriptor() {
  KILN_CUDNN_CHECK(create(&descriptor_));
}

}  // namespace kiln::cuda
