// Matrix-product front-ends (tensor/linalg.h): they check operands, apply
// torch's shape rules, bring the operands to (B, M, K) @ (B, K, N) as views
// where the strides allow (the GEMM reads any strides, so transposed and
// broadcast operands are not copied), and make one backend gemm call.
#include "tensor/linalg.h"

#include <algorithm>

#include "tensor/backend.h"

namespace kiln::ops {
namespace {

void check_same_kind(const char* op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), op, ": an operand is undefined");
  KILN_CHECK(a.dtype() == b.dtype(), op, ": expected both tensors to have the same dtype, got ", a.dtype(), " and ",
             b.dtype());
  KILN_CHECK(a.device() == b.device(), op, ": expected both tensors on the same device, got ", a.device(), " and ",
             b.device());
}

// a: (B, M, K), b: (B, K, N) -> (B, M, N), contiguous; a batch stride of 0
// broadcasts.
Tensor batched_product(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty({a.size(0), a.size(1), b.size(2)}, {a.dtype(), a.device()});
  backend_for(out.device()).gemm(out, a, b, 1.0, 0.0);
  return out;
}

// a: (M, K), b: (K, N) -> (M, N).
Tensor product_2d(const Tensor& a, const Tensor& b) {
  return batched_product(a.unsqueeze(0), b.unsqueeze(0)).view({a.size(0), b.size(1)});
}

// NumPy broadcasting: aligned from the right, each pair of sizes equal or one of them 1.
bool broadcastable(const Shape& x, const Shape& y) {
  for (size_t i = 1; i <= std::min(x.size(), y.size()); ++i) {
    int64_t sx = x[x.size() - i], sy = y[y.size() - i];
    if (sx != sy && sx != 1 && sy != 1) return false;
  }
  return true;
}

int64_t product_of(const Shape& shape, size_t end) {
  int64_t n = 1;
  for (size_t i = 0; i < end; ++i) n *= shape[i];
  return n;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_kind("matmul", a, b);
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got shapes ", a.shape(),
             " and ", b.shape());
  const int64_t k = a.size(-1);
  const int64_t kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  KILN_CHECK(k == kb, "matmul: shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (", k, " != ", kb, ")");

  // b has no batch dims: fold all of a's leading dims into M, one product.
  if (b.dim() <= 2) {
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);  // a's dims but K, then N unless b is 1-d
    if (b.dim() == 2) out_shape.push_back(b.size(1));
    Tensor a2 = a.reshape({product_of(a.shape(), a.shape().size() - 1), k});  // (rows, K)
    Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;                           // (K, N)
    return product_2d(a2, b2).view(out_shape);
  }

  // Batched: a 1-d a is one row; the batch dims broadcast.
  Tensor a3 = a.dim() == 1 ? a.unsqueeze(0) : a;  // (..., M, K)
  const Shape batch_a(a3.shape().begin(), a3.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  KILN_CHECK(broadcastable(batch_a, batch_b), "matmul: batch dims ", batch_a, " and ", batch_b, " of shapes ",
             a.shape(), " and ", b.shape(), " cannot be broadcast");
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t m = a3.size(-2), n = b.size(-1), batch_size = product_of(batch, batch.size());
  Shape a_full = batch, b_full = batch;
  a_full.insert(a_full.end(), {m, k});
  b_full.insert(b_full.end(), {k, n});
  // reshape keeps a view when the broadcast batch dims fold into one stride
  // (always true for a single batch dim), and copies otherwise, as torch does.
  Tensor out = batched_product(a3.expand(a_full).reshape({batch_size, m, k}),
                               b.expand(b_full).reshape({batch_size, k, n}));  // (batch, M, N)
  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(m);
  out_shape.push_back(n);
  return out.view(out_shape);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_same_kind("mm", a, b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-d tensors, got shapes ", a.shape(), " and ", b.shape());
  KILN_CHECK(a.size(1) == b.size(0), "mm: shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (",
             a.size(1), " != ", b.size(0), ")");
  return product_2d(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_same_kind("bmm", a, b);
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-d tensors, got shapes ", a.shape(), " and ", b.shape());
  KILN_CHECK(a.size(0) == b.size(0), "bmm: batch sizes of shapes ", a.shape(), " and ", b.shape(), " differ (",
             a.size(0), " != ", b.size(0), ")");
  KILN_CHECK(a.size(2) == b.size(1), "bmm: shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (",
             a.size(2), " != ", b.size(1), ")");
  return batched_product(a, b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_same_kind("linear", x, weight);
  KILN_CHECK(weight.dim() == 2, "linear: weight must be 2-d (out_features, in_features), got shape ", weight.shape());
  KILN_CHECK(x.dim() >= 1, "linear: input must have at least 1 dimension, got shape ", x.shape());
  const int64_t in = weight.size(1), out_features = weight.size(0);
  KILN_CHECK(x.size(-1) == in, "linear: input of shape ", x.shape(), " has ", x.size(-1),
             " features but weight of shape ", weight.shape(), " expects ", in);
  if (bias.defined()) {
    check_same_kind("linear", x, bias);
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear: bias must have shape [", out_features,
               "], got ", bias.shape());
  }
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out_features);
  const int64_t rows = product_of(x.shape(), x.shape().size() - 1);
  Tensor x3 = x.reshape({1, rows, in});  // (1, rows, in)
  Tensor out = Tensor::empty({1, rows, out_features}, {x.dtype(), x.device()});
  // With a bias, C starts as the bias broadcast over the rows and the GEMM
  // adds x @ w^T to it (beta = 1): no second pass over the output.
  if (bias.defined()) out.copy_(bias);
  backend_for(out.device()).gemm(out, x3, weight.t().unsqueeze(0), 1.0, bias.defined() ? 1.0 : 0.0);
  return out.view(out_shape);
}

}  // namespace kiln::ops
