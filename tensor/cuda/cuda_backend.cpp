// The CUDA backend object, and the kernel groups that the CUDA backend issue
// has not written yet.
//
// Each missing group throws kiln::Error naming the op, so a user who moves a
// model to the GPU learns which op is missing rather than meeting a crash;
// moving the tensors back with .cpu() is the workaround until then. A group's
// function here is deleted when its tensor/cuda/<group>.cu lands.
#include "tensor/cuda/cuda_backend.h"

#include "tensor/cuda/allocator.h"

namespace kiln::cuda {

CudaBackend::CudaBackend() { register_cuda_allocator(); }

CudaBackend& backend() {
  static CudaBackend instance;
  return instance;
}

namespace {

[[noreturn]] void not_implemented(const char* op) {
  KILN_FAIL(op, ": not implemented for CUDA tensors yet (issue 5: CUDA backend)");
}

}  // namespace

void CudaBackend::unary(UnaryOp, const Tensor&, const Tensor&) { not_implemented("unary"); }
void CudaBackend::binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) { not_implemented("binary"); }
void CudaBackend::where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { not_implemented("where"); }
void CudaBackend::clamp(const Tensor&, const Tensor&, std::optional<Scalar>, std::optional<Scalar>) {
  not_implemented("clamp");
}

void CudaBackend::reduce(ReduceOp, const Tensor&, const Tensor&, const Shape&) { not_implemented("reduce"); }
void CudaBackend::reduce_with_index(ReduceOp, const Tensor&, const Tensor&, const Tensor&, int64_t) {
  not_implemented("reduce_with_index");
}
void CudaBackend::softmax(const Tensor&, const Tensor&, int64_t, bool) { not_implemented("softmax"); }

void CudaBackend::gemm(const Tensor&, const Tensor&, const Tensor&, double, double) { not_implemented("gemm"); }

void CudaBackend::index_select(const Tensor&, const Tensor&, int64_t, const Tensor&) {
  not_implemented("index_select");
}
void CudaBackend::gather(const Tensor&, const Tensor&, int64_t, const Tensor&) { not_implemented("gather"); }
void CudaBackend::scatter_add(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  not_implemented("scatter_add");
}

void CudaBackend::im2col(const Tensor&, const Tensor&, const ConvGeometry&) { not_implemented("im2col"); }
void CudaBackend::col2im(const Tensor&, const Tensor&, const ConvGeometry&) { not_implemented("col2im"); }
void CudaBackend::conv2d(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const ConvGeometry&) {
  not_implemented("conv2d");
}
void CudaBackend::conv2d_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const ConvGeometry&) {
  not_implemented("conv2d_backward");
}

void CudaBackend::max_pool2d(const Tensor&, const Tensor&, const Tensor&, const PoolGeometry&) {
  not_implemented("max_pool2d");
}
void CudaBackend::max_pool2d_backward(const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("max_pool2d_backward");
}
void CudaBackend::avg_pool2d(const Tensor&, const Tensor&, const PoolGeometry&, bool, std::optional<int64_t>) {
  not_implemented("avg_pool2d");
}
void CudaBackend::avg_pool2d_backward(const Tensor&, const Tensor&, const PoolGeometry&, bool,
                                      std::optional<int64_t>) {
  not_implemented("avg_pool2d_backward");
}
void CudaBackend::adaptive_avg_pool2d(const Tensor&, const Tensor&) { not_implemented("adaptive_avg_pool2d"); }
void CudaBackend::adaptive_avg_pool2d_backward(const Tensor&, const Tensor&) {
  not_implemented("adaptive_avg_pool2d_backward");
}

void CudaBackend::sgd_step(const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
                           const std::vector<bool>&, const SgdStep&) {
  not_implemented("sgd_step_");
}

void CudaBackend::batch_norm_stats(const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("batch_norm");
}
void CudaBackend::batch_norm_apply(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("batch_norm");
}
void CudaBackend::batch_norm_backward_reduce(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                             const Tensor&) {
  not_implemented("batch_norm_backward");
}
void CudaBackend::batch_norm_backward_apply(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("batch_norm_backward");
}
void CudaBackend::layer_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, double) {
  not_implemented("layer_norm");
}
void CudaBackend::layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("layer_norm_backward");
}

void CudaBackend::random(const Tensor&, Distribution, double, double, uint64_t, uint64_t) {
  not_implemented("random");
}

}  // namespace kiln::cuda
