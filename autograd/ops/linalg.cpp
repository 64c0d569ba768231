// Differentiable matrix products. For C = A @ B the gradients are
// dA = dC @ B^T and dB = A^T @ dC; the transposes are views, which the GEMM
// reads through their strides, so no operand is copied. Broadcast batch dims
// of matmul are summed away (sum_to), as for any broadcast. A gradient the
// engine does not want now (autograd::input_gradient_wanted, Note [Split
// backward]) is skipped: in a zero-bubble pipeline that is the weight's GEMM.
#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/ops.h"

namespace kiln {

using autograd::record;
using autograd::SavedTensor;
using autograd::sum_to;
using autograd::TensorList;
using autograd::untracked;

Tensor mm(const Tensor& a, const Tensor& b) {
  if (auto cast = autograd::autocast_lower_precision(a, b)) return mm((*cast)[0], (*cast)[1]);
  Tensor out = untracked([&] { return ops::mm(a, b); });
  if (autograd::needs_grad({a, b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    SavedTensor saved_a(need_b ? a : Tensor()), saved_b(need_a ? b : Tensor());
    record("mm", {a, b}, {out}, [saved_a, saved_b](const TensorList& g) -> TensorList {
      // g: (M, N), a: (M, K), b: (K, N)
      const bool want_a = saved_b.defined() && autograd::input_gradient_wanted(0);
      const bool want_b = saved_a.defined() && autograd::input_gradient_wanted(1);
      Tensor ga = want_a ? mm(g[0], saved_b.get().t()) : Tensor();  // (M, N) @ (N, K)
      Tensor gb = want_b ? mm(saved_a.get().t(), g[0]) : Tensor();  // (K, M) @ (M, N)
      return {ga, gb};
    });
  }
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (auto cast = autograd::autocast_lower_precision(a, b)) return bmm((*cast)[0], (*cast)[1]);
  Tensor out = untracked([&] { return ops::bmm(a, b); });
  if (autograd::needs_grad({a, b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    SavedTensor saved_a(need_b ? a : Tensor()), saved_b(need_a ? b : Tensor());
    record("bmm", {a, b}, {out}, [saved_a, saved_b](const TensorList& g) -> TensorList {
      // g: (B, M, N), a: (B, M, K), b: (B, K, N)
      Tensor ga = saved_b.defined() ? bmm(g[0], saved_b.get().transpose(1, 2)) : Tensor();
      Tensor gb = saved_a.defined() ? bmm(saved_a.get().transpose(1, 2), g[0]) : Tensor();
      return {ga, gb};
    });
  }
  return out;
}

namespace {

// The gradients of matmul(a, b) for output gradient g, in torch's shape
// rules: a 1-d a is a row (1, K) and a 1-d b a column (K, 1) whose added dim
// the output drops, so g gets it back first; then dA = g @ B^T and
// dB = A^T @ g with broadcast batch dims summed away. `a` is defined only
// when b's gradient is wanted and `b` only when a's is; the shapes always are.
TensorList matmul_backward(const Tensor& g, const Tensor& a, const Shape& a_shape, const Tensor& b,
                           const Shape& b_shape) {
  bool a_vector = a_shape.size() == 1, b_vector = b_shape.size() == 1;
  Tensor g_mat = g;  // (..., M, N)
  if (a_vector) g_mat = g_mat.unsqueeze(b_vector ? 0 : -2);
  if (b_vector) g_mat = g_mat.unsqueeze(-1);
  Tensor ga, gb;
  if (b.defined()) {
    Tensor b_mat = b_vector ? b.unsqueeze(1) : b;  // (..., K, N)
    if (b_mat.dim() == 2) {
      // b has no batch dims: matmul folds all of g's leading dims into one GEMM.
      ga = matmul(g_mat, b_mat.t());  // (..., M, N) @ (N, K)
    } else {
      Shape a_mat_shape = a_vector ? Shape{1, a_shape[0]} : a_shape;
      ga = sum_to(matmul(g_mat, b_mat.transpose(-1, -2)), a_mat_shape);  // (batch..., M, K)
    }
    ga = ga.reshape(a_shape);
  }
  if (a.defined()) {
    Tensor a_mat = a_vector ? a.unsqueeze(0) : a;  // (..., M, K)
    if (b_shape.size() <= 2) {
      // b is shared by every row of a: one (K, rows) @ (rows, N) product sums
      // over the rows inside the GEMM instead of after it.
      int64_t k = a_mat.size(-1), n = g_mat.size(-1);
      gb = mm(a_mat.reshape({-1, k}).t(), g_mat.reshape({-1, n}));  // (K, rows) @ (rows, N)
    } else {
      gb = sum_to(matmul(a_mat.transpose(-1, -2), g_mat), b_shape);  // (batch..., K, N)
    }
    gb = gb.reshape(b_shape);
  }
  return {ga, gb};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (auto cast = autograd::autocast_lower_precision(a, b)) return matmul((*cast)[0], (*cast)[1]);
  Tensor out = untracked([&] { return ops::matmul(a, b); });
  if (autograd::needs_grad({a, b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    SavedTensor saved_a(need_b ? a : Tensor()), saved_b(need_a ? b : Tensor());
    record("matmul", {a, b}, {out},
           [saved_a, saved_b, sa = a.shape(), sb = b.shape()](const TensorList& g) -> TensorList {
             // a is saved for b's gradient and b for a's.
             Tensor av = saved_a.defined() && autograd::input_gradient_wanted(1) ? saved_a.get() : Tensor();
             Tensor bv = saved_b.defined() && autograd::input_gradient_wanted(0) ? saved_b.get() : Tensor();
             return matmul_backward(g[0], av, sa, bv, sb);
           });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (auto c = autograd::autocast_lower_precision(x, weight, bias)) return linear((*c)[0], (*c)[1], (*c)[2]);
  Tensor out = untracked([&] { return ops::linear(x, weight, bias); });
  if (autograd::needs_grad({x, weight, bias})) {
    bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    bool need_b = bias.defined() && bias.requires_grad();
    SavedTensor saved_x(need_w ? x : Tensor()), saved_w(need_x ? weight : Tensor());
    record("linear", {x, weight, bias}, {out},
           [saved_x, saved_w, need_b, x_shape = x.shape()](const TensorList& g) -> TensorList {
             // g: (*, out), x: (*, in), weight: (out, in). Rows are every
             // leading index of x, folded into one dim.
             const bool want_x = saved_w.defined() && autograd::input_gradient_wanted(0);
             const bool want_w = saved_x.defined() && autograd::input_gradient_wanted(1);
             const bool want_b = need_b && autograd::input_gradient_wanted(2);
             Tensor gx, gw, gb, g_rows;
             if (want_w || want_b) g_rows = g[0].reshape({-1, g[0].size(-1)});  // (rows, out)
             if (want_x) gx = matmul(g[0], saved_w.get()).reshape(x_shape);  // (*, out) @ (out, in)
             if (want_w) {
               const Tensor& xv = saved_x.get();
               gw = mm(g_rows.t(), xv.reshape({-1, xv.size(-1)}));  // (out, rows) @ (rows, in)
             }
             if (want_b) gb = sum(g_rows, {0});  // (out)
             return {gx, gw, gb};
           });
  }
  return out;
}

}  // namespace kiln
