// copy_, contiguous, clone and dtype/device conversion.
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln {

Tensor& Tensor::copy_(const Tensor& src) {
  KILN_CHECK(src.defined(), "copy_: the source tensor is undefined");
  Tensor expanded = src.expand(shape());  // throws naming both shapes when they do not broadcast
  backend_for_copy(device(), src.device()).copy(*this, expanded);
  bump_version();
  return *this;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), {dtype(), device()});
  backend_for(device()).copy(out, *this);
  return out;
}

Tensor Tensor::to(DType new_dtype) const { return to(new_dtype, device()); }

Tensor Tensor::to(Device new_device) const { return to(dtype(), new_device); }

Tensor Tensor::to(DType new_dtype, Device new_device) const {
  if (new_dtype == dtype() && new_device == device()) return *this;
  Tensor out = Tensor::empty(shape(), {new_dtype, new_device});
  backend_for_copy(new_device, device()).copy(out, *this);
  return out;
}

}  // namespace kiln
