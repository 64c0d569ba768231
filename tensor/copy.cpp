// copy_, contiguous, clone and dtype/device conversion.
#include "tensor/autograd_hooks.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace kiln {

Tensor& Tensor::copy_(const Tensor& src) {
  KILN_CHECK(src.defined(), "copy_: the source tensor is undefined");
  if (impl()->autograd_meta() || src.impl()->autograd_meta()) autograd_hooks().check_inplace("copy_", *this, src);
  Tensor expanded = src.expand(shape());  // throws naming both shapes when they do not broadcast
  backend_for_copy(device(), src.device()).copy(*this, expanded);
  bump_version();
  return *this;
}

// Copies of a tensor that takes part in autograd are reported to it
// (Note [Autograd hooks]): their gradient flows back to the input.
static Tensor recorded(std::string_view op, const Tensor& input, Tensor output) {
  if (input.impl()->autograd_meta()) autograd_hooks().record_copy(op, input, output);
  return output;
}

// A new contiguous tensor for a copy of `t`, on its grid (the copies keep
// QuantParams: Note [Quantization parameters through views] in
// quant_params_view.h).
static Tensor empty_like_on_grid(const Tensor& t, DType dtype, Device device) {
  Tensor out = Tensor::empty(t.shape(), {dtype, device});
  out.impl()->set_quant_params(t.impl()->quant_params());
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty_like_on_grid(*this, dtype(), device());
  backend_for(device()).copy(out, *this);
  return recorded("contiguous", *this, std::move(out));
}

Tensor Tensor::clone() const {
  Tensor out = empty_like_on_grid(*this, dtype(), device());
  backend_for(device()).copy(out, *this);
  return recorded("clone", *this, std::move(out));
}

Tensor Tensor::to(DType new_dtype) const { return to(new_dtype, device()); }

Tensor Tensor::to(Device new_device) const { return to(dtype(), new_device); }

Tensor Tensor::to(DType new_dtype, Device new_device) const {
  if (new_dtype == dtype() && new_device == device()) return *this;
  if (impl()->quant_params() && new_dtype != dtype()) {
    // A quantized tensor's integers mean nothing in another dtype, and a
    // float tensor on a grid holds real values, not the grid's integers.
    KILN_CHECK(!is_quantized() || !is_floating(new_dtype), "to: cannot convert a quantized tensor (", dtype(),
               " carrying quantization parameters) to ", new_dtype, "; use dequantize() for its real values");
    KILN_CHECK(!is_quantized(), "to: cannot convert a quantized tensor (", dtype(),
               " carrying quantization parameters) to ", new_dtype,
               "; use requantize() for another grid, or int_repr() for the plain integers");
    KILN_CHECK(is_floating(new_dtype), "to: cannot convert a ", dtype(),
               " tensor carrying quantization parameters (values on a grid) to ", new_dtype,
               "; use quantize_per_tensor() for its integers");
  }
  Tensor out = empty_like_on_grid(*this, new_dtype, new_device);
  backend_for_copy(new_device, device()).copy(out, *this);
  return recorded("to", *this, std::move(out));
}

}  // namespace kiln
