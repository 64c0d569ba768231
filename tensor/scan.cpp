// Front-ends of cumsum and cumprod: the result's dtype, the dim, and one
// device decision each (Note [Device dispatch]; the kernels are a group of
// their own, Note [Kernel groups]).
#include "tensor/scan.h"

#include "tensor/scan_kernels.h"

namespace kiln::ops {
namespace {

Tensor scan(ScanOp op, const Tensor& x, int64_t dim, std::optional<DType> dtype, bool reverse, std::string_view name) {
  KILN_CHECK(x.defined(), name, ": got an undefined tensor");
  dim = wrap_dim(dim, x.dim(), name);
  const DType out_dtype = dtype ? *dtype : (is_integral(x.dtype()) || x.dtype() == DType::Bool ? DType::Int64 : x.dtype());
  KILN_CHECK(out_dtype != DType::Bool, name, ": cannot accumulate into bool (pass an integer or floating dtype)");
  ScanKernels& kernels = kernels_for<ScanKernels>(x.device(), name);
  Tensor in = x.to(out_dtype).contiguous();
  Tensor out = Tensor::empty(x.shape(), {out_dtype, x.device()});
  if (out.numel() == 0) return out;
  // A 0-dim tensor is scanned as its one-entry view.
  if (x.dim() == 0) {
    kernels.scan(op, out.view({1}), in.view({1}), 0, reverse);
  } else {
    kernels.scan(op, out, in, dim, reverse);
  }
  return out;
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return scan(ScanOp::Sum, x, dim, dtype, false, "cumsum");
}

Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return scan(ScanOp::Prod, x, dim, dtype, false, "cumprod");
}

Tensor reverse_cumsum(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.defined(), "reverse_cumsum: got an undefined tensor");
  return scan(ScanOp::Sum, x, dim, x.dtype(), true, "reverse_cumsum");
}

}  // namespace kiln::ops
