// In-place binary ops (add_, mul_, ...), their operators (+=, ...), fill_
// and zero_. Unary in-place ops sit beside their out-of-place forms in
// elementwise_unary.cpp.
#include "tensor/elementwise.h"
#include "tensor/elementwise_internal.h"

namespace kiln::ops {

namespace {

using elementwise::wrap_scalar;

bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.storage_offset() == b.storage_offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

// x = x `op` b computed in `compute`, then written back in x's dtype.
Tensor& binary_(BinaryOp op, std::string_view name, Tensor& x, const Tensor& b, DType compute) {
  elementwise::check_same_device(name, x, b);
  elementwise::check_in_place(name, x, compute);
  Shape shape = broadcast_shapes(x.shape(), b.shape(), name);
  KILN_CHECK(shape == x.shape(), name, ": output with shape ", x.shape(), " doesn't match the broadcast shape ", shape);
  if (x.numel() == 0) return x;
  Tensor operand = b.to(compute);
  // A different view of x's own memory (x += x.t()) would be read after the
  // kernel has overwritten some of it; kernels only allow exact aliasing, so
  // such an operand is copied first. x += x itself needs no copy.
  if (operand.storage() == x.storage() && !same_view(operand, x)) operand = operand.clone();
  operand = operand.expand(shape);
  if (compute == x.dtype()) {
    backend_for(x.device()).binary(op, x, x, operand);
    x.bump_version();
    return x;
  }
  Tensor out = Tensor::empty(shape, {compute, x.device()});
  backend_for(out.device()).binary(op, out, x.to(compute), operand);
  elementwise::assign_in_place(x, out);
  return x;
}

Tensor& binary_(BinaryOp op, std::string_view name, Tensor& x, Scalar b, DType compute) {
  return binary_(op, name, x, wrap_scalar(b, compute, x.device()), compute);
}

}  // namespace

Tensor& add_(Tensor& x, const Tensor& b, Scalar alpha) {
  DType compute = result_type(x, b);
  return binary_(BinaryOp::Add, "add_", x, elementwise::apply_alpha("add_", b, alpha, compute), compute);
}

Tensor& sub_(Tensor& x, const Tensor& b, Scalar alpha) {
  DType compute = result_type(x, b);
  elementwise::check_not_bool_sub("sub_", compute);
  return binary_(BinaryOp::Sub, "sub_", x, elementwise::apply_alpha("sub_", b, alpha, compute), compute);
}

Tensor& add_(Tensor& x, Scalar b) { return binary_(BinaryOp::Add, "add_", x, b, result_type(x, b)); }

Tensor& sub_(Tensor& x, Scalar b) {
  DType compute = result_type(x, b);
  elementwise::check_not_bool_sub("sub_", compute);
  return binary_(BinaryOp::Sub, "sub_", x, b, compute);
}

Tensor& mul_(Tensor& x, const Tensor& b) { return binary_(BinaryOp::Mul, "mul_", x, b, result_type(x, b)); }
Tensor& mul_(Tensor& x, Scalar b) { return binary_(BinaryOp::Mul, "mul_", x, b, result_type(x, b)); }

Tensor& div_(Tensor& x, const Tensor& b) {
  return binary_(BinaryOp::Div, "div_", x, b, elementwise::division_type(result_type(x, b)));
}

Tensor& div_(Tensor& x, Scalar b) {
  return binary_(BinaryOp::Div, "div_", x, b, elementwise::division_type(result_type(x, b)));
}

Tensor& pow_(Tensor& x, Scalar exponent) {
  DType compute = result_type(x, exponent);
  elementwise::check_pow("pow_", compute, exponent);
  return binary_(BinaryOp::Pow, "pow_", x, exponent, compute);
}

Tensor& fill_(Tensor& x, Scalar value) {
  // Any number may be written into any dtype here (fill_(int, 2.5) stores
  // 2, as torch), so only the broadcast-view check applies.
  elementwise::check_in_place("fill_", x, x.dtype());
  if (x.numel() > 0) backend_for(x.device()).fill(x, value);
  x.bump_version();
  return x;
}

Tensor& zero_(Tensor& x) { return fill_(x, 0); }

Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return div_(a, b); }
Tensor& operator+=(Tensor& a, Scalar b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, Scalar b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, Scalar b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, Scalar b) { return div_(a, b); }

}  // namespace kiln::ops
