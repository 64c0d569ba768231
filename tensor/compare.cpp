// Comparisons and logical ops (Bool results), where, allclose and equal.
#include <algorithm>
#include <cmath>

#include "tensor/elementwise.h"
#include "tensor/elementwise_internal.h"

namespace kiln::ops {

namespace {

using elementwise::wrap_scalar;

// Comparisons compute in the promoted dtype (so int64 vs float32 compares
// as float32, as torch) and write Bool.
Tensor compare(BinaryOp op, std::string_view name, const Tensor& a, const Tensor& b) {
  DType compute = result_type(a, b);
  return elementwise::binary(op, name, a, b, compute, DType::Bool);
}

Tensor compare(BinaryOp op, std::string_view name, const Tensor& a, Scalar b) {
  DType compute = result_type(a, b);
  return elementwise::binary(op, name, a, wrap_scalar(b, compute, a.device()), compute, DType::Bool);
}

Tensor where_impl(const Tensor& cond, const Tensor& a, const Tensor& b, DType compute) {
  KILN_CHECK(cond.dtype() == DType::Bool, "where: expected the condition to be a bool tensor, got ", cond.dtype());
  elementwise::check_same_device("where", cond, a);
  elementwise::check_same_device("where", a, b);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = Tensor::empty(shape, {compute, a.device()});
  if (out.numel() == 0) return out;
  backend_for(out.device()).where(out, cond.expand(shape), a.to(compute).expand(shape), b.to(compute).expand(shape));
  return out;
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Eq, "eq", a, b); }
Tensor eq(const Tensor& a, Scalar b) { return compare(BinaryOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ne, "ne", a, b); }
Tensor ne(const Tensor& a, Scalar b) { return compare(BinaryOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Lt, "lt", a, b); }
Tensor lt(const Tensor& a, Scalar b) { return compare(BinaryOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Le, "le", a, b); }
Tensor le(const Tensor& a, Scalar b) { return compare(BinaryOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Gt, "gt", a, b); }
Tensor gt(const Tensor& a, Scalar b) { return compare(BinaryOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ge, "ge", a, b); }
Tensor ge(const Tensor& a, Scalar b) { return compare(BinaryOp::Ge, "ge", a, b); }

// Logical ops read any dtype as "nonzero is true" (NaN is true, as torch).
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare(BinaryOp::LogicalAnd, "logical_and", a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare(BinaryOp::LogicalOr, "logical_or", a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return compare(BinaryOp::LogicalXor, "logical_xor", a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return where_impl(cond, a, b, result_type(a, b)); }

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  DType compute = result_type(a, b);
  return where_impl(cond, a, wrap_scalar(b, compute, a.device()), compute);
}

Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  DType compute = result_type(b, a);
  return where_impl(cond, wrap_scalar(a, compute, b.device()), b, compute);
}

Tensor where(const Tensor& cond, Scalar a, Scalar b) {
  KILN_CHECK(cond.defined(), "where: the condition is undefined");
  elementwise::ResultType type;
  type.add(a);
  type.add(b);
  const DType compute = type.result();
  return where_impl(cond, wrap_scalar(a, compute, cond.device()), wrap_scalar(b, compute, cond.device()), compute);
}

}  // namespace kiln::ops

namespace kiln {

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  elementwise::check_same_device("allclose", a, b);
  KILN_CHECK(rtol >= 0 && atol >= 0, "allclose: rtol and atol must be non-negative, got rtol=", rtol, " atol=", atol);
  if (a.shape() != b.shape()) return false;
  // Compared in float64 on the host: the answer is one bool anyway, and
  // float64 holds every value of the other dtypes except int64 beyond 2^53.
  Tensor x = a.to(DType::Float64, kCPU).contiguous();
  Tensor y = b.to(DType::Float64, kCPU).contiguous();
  const double* px = x.data<double>();
  const double* py = y.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double u = px[i], v = py[i];
    if (u == v) continue;  // also equal infinities
    if (std::isnan(u) || std::isnan(v)) {
      if (equal_nan && std::isnan(u) && std::isnan(v)) continue;
      return false;
    }
    if (std::isinf(u) || std::isinf(v)) return false;
    if (!(std::fabs(u - v) <= atol + rtol * std::fabs(v))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  elementwise::check_same_device("equal", a, b);
  if (a.shape() != b.shape()) return false;
  Tensor same = ops::eq(a, b).to(kCPU).contiguous();
  const bool* p = same.data<bool>();
  return std::all_of(p, p + same.numel(), [](bool v) { return v; });
}

}  // namespace kiln
