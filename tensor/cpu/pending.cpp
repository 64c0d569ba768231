// TEMPORARY during the first build-out: CPU kernels not yet written. Each
// block is deleted when its real kernel file lands.
#include "tensor/cpu/cpu_backend.h"

namespace kiln::cpu {

// pending: unary
void CpuBackend::unary(UnaryOp, const Tensor&, const Tensor&) { KILN_FAIL("unary: not yet implemented on cpu"); }
// pending: binary
void CpuBackend::binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) {
  KILN_FAIL("binary: not yet implemented on cpu");
}
// pending: where
void CpuBackend::where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  KILN_FAIL("where: not yet implemented on cpu");
}
// pending: clamp
void CpuBackend::clamp(const Tensor&, const Tensor&, std::optional<Scalar>, std::optional<Scalar>) {
  KILN_FAIL("clamp: not yet implemented on cpu");
}
// pending: reduce
void CpuBackend::reduce(ReduceOp, const Tensor&, const Tensor&, const Shape&) {
  KILN_FAIL("reduce: not yet implemented on cpu");
}
// pending: reduce_with_index
void CpuBackend::reduce_with_index(ReduceOp, const Tensor&, const Tensor&, const Tensor&, int64_t) {
  KILN_FAIL("reduce_with_index: not yet implemented on cpu");
}
// pending: softmax
void CpuBackend::softmax(const Tensor&, const Tensor&, int64_t, bool) { KILN_FAIL("softmax: not yet implemented"); }
// pending: gemm
void CpuBackend::gemm(const Tensor&, const Tensor&, const Tensor&, double, double) {
  KILN_FAIL("gemm: not yet implemented on cpu");
}
// pending: index_select
void CpuBackend::index_select(const Tensor&, const Tensor&, int64_t, const Tensor&) {
  KILN_FAIL("index_select: not yet implemented on cpu");
}
// pending: gather
void CpuBackend::gather(const Tensor&, const Tensor&, int64_t, const Tensor&) {
  KILN_FAIL("gather: not yet implemented on cpu");
}
// pending: scatter_add
void CpuBackend::scatter_add(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  KILN_FAIL("scatter_add: not yet implemented on cpu");
}
// pending: im2col
void CpuBackend::im2col(const Tensor&, const Tensor&, const ConvGeometry&) { KILN_FAIL("im2col: not yet"); }
// pending: col2im
void CpuBackend::col2im(const Tensor&, const Tensor&, const ConvGeometry&) { KILN_FAIL("col2im: not yet"); }
// pending: random
void CpuBackend::random(const Tensor&, Distribution, double, double, uint64_t, uint64_t) {
  KILN_FAIL("random: not yet implemented on cpu");
}

}  // namespace kiln::cpu
