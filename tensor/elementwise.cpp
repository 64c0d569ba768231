// Type promotion, the shared front-end steps, and the arithmetic binary ops.
// Unary ops live in elementwise_unary.cpp, in-place ops in
// elementwise_inplace.cpp, comparisons and where in compare.cpp.
#include "tensor/elementwise.h"

#include "tensor/elementwise_internal.h"
#include "tensor/factory.h"

namespace kiln::elementwise {

enum class Category { Bool, Integer, Floating };

static Category category(DType d) {
  return d == DType::Bool ? Category::Bool : is_floating(d) ? Category::Floating : Category::Integer;
}

static void promote_into(std::optional<DType>& slot, DType d) { slot = slot ? promote_types(*slot, d) : d; }

void ResultType::add(const Tensor& t) { promote_into(t.dim() > 0 ? dimensioned_ : zero_dim_, t.dtype()); }

void ResultType::add(Scalar s) { promote_into(wrapped_, wrapped_number_dtype(s)); }

// torch's combine_categories: the higher-priority level wins unless the
// lower one is of a higher category, in which case the two promote. A
// floating higher level always wins, so float16 + 2.5 stays float16.
static std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (category(*higher) == Category::Floating) return higher;
  // A bool higher level, or an integer one below a float: the two promote,
  // so an int32 tensor plus a 0-dim float64 tensor is float64, as in torch.
  if (*higher == DType::Bool || category(*lower) == Category::Floating) return promote_types(*higher, *lower);
  return higher;
}

DType ResultType::result() const {
  std::optional<DType> r = combine(dimensioned_, combine(zero_dim_, wrapped_));
  KILN_CHECK(r.has_value(), "result_type: no operands");
  return *r;
}

DType wrapped_number_dtype(Scalar s) {
  return s.is_floating() ? kDefaultFloat : s.is_integral() ? DType::Int64 : DType::Bool;
}

void check_same_device(std::string_view op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.device() == b.device(), op, ": expected all tensors to be on the same device, but found ", a.device(),
             " and ", b.device());
}

Tensor wrap_scalar(Scalar value, DType dtype, Device device) { return scalar_tensor(value, {dtype, device}); }

Tensor binary(BinaryOp op, std::string_view name, const Tensor& a, const Tensor& b, DType compute, DType out_dtype) {
  check_same_device(name, a, b);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, {out_dtype, a.device()});
  if (out.numel() == 0) return out;
  backend_for(out.device()).binary(op, out, a.to(compute).expand(shape), b.to(compute).expand(shape));
  return out;
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

void check_in_place(std::string_view op, const Tensor& x, DType result) {
  for (int64_t d = 0; d < x.dim(); ++d) {
    KILN_CHECK(x.strides()[d] != 0 || x.shape()[d] <= 1, op, ": cannot write in place to a broadcast view (shape ",
               x.shape(), ", strides ", x.strides(),
               "): several of its elements share one memory location; clone() it first");
  }
  KILN_CHECK(can_cast(result, x.dtype()), op, ": result type ", result, " can't be cast to the desired output type ",
             x.dtype());
}

void assign_in_place(Tensor& x, const Tensor& result) {
  if (!result.is_same(x)) backend_for_copy(x.device(), result.device()).copy(x, result);
  x.bump_version();
}

Tensor apply_alpha(std::string_view name, const Tensor& b, Scalar alpha, DType compute) {
  KILN_CHECK(!alpha.is_floating() || is_floating(compute), name, ": for ", compute,
             " inputs alpha must be an integer, got ", alpha);
  KILN_CHECK(!alpha.is_bool() || compute == DType::Bool, name, ": a bool alpha is only supported for bool inputs");
  bool unit_alpha = alpha.is_floating() ? alpha.to<double>() == 1.0 : alpha.to<int64_t>() == 1;
  if (unit_alpha) return b;
  // a + alpha * b as two kernels: alpha * b rounds once to the compute dtype
  // first (torch fuses them; the difference is one rounding in 16-bit floats).
  return binary(BinaryOp::Mul, name, b, wrap_scalar(alpha, compute, b.device()), compute, compute);
}

void check_not_bool_sub(std::string_view name, DType compute) {
  KILN_CHECK(compute != DType::Bool, name, ": subtracting bool tensors is not supported; use logical_xor() instead");
}

DType division_type(DType promoted) { return is_floating(promoted) ? promoted : kDefaultFloat; }

void check_pow(std::string_view name, DType compute, std::optional<Scalar> exponent) {
  KILN_CHECK(compute != DType::Bool, name, ": not supported for bool tensors");
  KILN_CHECK(!exponent || is_floating(compute) || exponent->to<int64_t>() >= 0, name,
             ": integers to negative integer powers are not allowed (", compute, " base, exponent ", *exponent, ")");
}

}  // namespace kiln::elementwise

namespace kiln {

DType result_type(const Tensor& a, const Tensor& b) {
  elementwise::ResultType r;
  r.add(a);
  r.add(b);
  return r.result();
}

DType result_type(const Tensor& a, Scalar b) {
  elementwise::ResultType r;
  r.add(a);
  r.add(b);
  return r.result();
}

}  // namespace kiln

namespace kiln::ops {

using elementwise::binary;
using elementwise::division_type;
using elementwise::wrap_scalar;

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  DType compute = result_type(a, b);
  return binary(BinaryOp::Add, "add", a, elementwise::apply_alpha("add", b, alpha, compute), compute, compute);
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  DType compute = result_type(a, b);
  elementwise::check_not_bool_sub("sub", compute);
  return binary(BinaryOp::Sub, "sub", a, elementwise::apply_alpha("sub", b, alpha, compute), compute, compute);
}

Tensor add(const Tensor& a, Scalar b) {
  DType compute = result_type(a, b);
  return binary(BinaryOp::Add, "add", a, wrap_scalar(b, compute, a.device()), compute, compute);
}

Tensor sub(const Tensor& a, Scalar b) {
  DType compute = result_type(a, b);
  elementwise::check_not_bool_sub("sub", compute);
  return binary(BinaryOp::Sub, "sub", a, wrap_scalar(b, compute, a.device()), compute, compute);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  DType compute = result_type(a, b);
  return binary(BinaryOp::Mul, "mul", a, b, compute, compute);
}

Tensor mul(const Tensor& a, Scalar b) {
  DType compute = result_type(a, b);
  return binary(BinaryOp::Mul, "mul", a, wrap_scalar(b, compute, a.device()), compute, compute);
}

Tensor div(const Tensor& a, const Tensor& b) {
  DType compute = division_type(result_type(a, b));
  return binary(BinaryOp::Div, "div", a, b, compute, compute);
}

Tensor div(const Tensor& a, Scalar b) {
  DType compute = division_type(result_type(a, b));
  return binary(BinaryOp::Div, "div", a, wrap_scalar(b, compute, a.device()), compute, compute);
}

Tensor pow(const Tensor& a, const Tensor& b) {
  DType compute = result_type(a, b);
  elementwise::check_pow("pow", compute, std::nullopt);
  return binary(BinaryOp::Pow, "pow", a, b, compute, compute);
}

Tensor pow(const Tensor& a, Scalar exponent) {
  DType compute = result_type(a, exponent);
  elementwise::check_pow("pow", compute, exponent);
  // The kernel recognises a broadcast exponent of 2, 0.5, -1, ... (tensor/cpu/binary.cpp).
  return binary(BinaryOp::Pow, "pow", a, wrap_scalar(exponent, compute, a.device()), compute, compute);
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  DType compute = result_type(a, b);
  return binary(BinaryOp::Maximum, "maximum", a, b, compute, compute);
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  DType compute = result_type(a, b);
  return binary(BinaryOp::Minimum, "minimum", a, b, compute, compute);
}

Tensor relu_backward(const Tensor& grad, const Tensor& output) {
  DType compute = result_type(grad, output);
  KILN_CHECK(is_floating(compute), "relu_backward: expected floating tensors, got ", grad.dtype(), " and ",
             output.dtype());
  return binary(BinaryOp::ReluBackward, "relu_backward", grad, output, compute, compute);
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approximation) {
  DType compute = result_type(grad, x);
  KILN_CHECK(is_floating(compute), "gelu_backward: expected floating tensors, got ", grad.dtype(), " and ",
             x.dtype());
  BinaryOp op = tanh_approximation ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward;
  return binary(op, "gelu_backward", grad, x, compute, compute);
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }

// The number is the left operand here, so it is wrapped before the kernel
// rather than passed through the commutative forms above.
Tensor operator-(Scalar a, const Tensor& b) {
  DType compute = result_type(b, a);
  elementwise::check_not_bool_sub("sub", compute);
  return binary(BinaryOp::Sub, "sub", wrap_scalar(a, compute, b.device()), b, compute, compute);
}

Tensor operator/(Scalar a, const Tensor& b) {
  DType compute = division_type(result_type(b, a));
  return binary(BinaryOp::Div, "div", wrap_scalar(a, compute, b.device()), b, compute, compute);
}

}  // namespace kiln::ops
