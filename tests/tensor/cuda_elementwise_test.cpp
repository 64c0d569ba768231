// CUDA unary, binary, where and clamp kernels against the CPU backend, for
// every op and dtype, over the layouts the kernels tell apart: contiguous
// (the packed path, with a tail), a misaligned contiguous view, broadcast and
// transposed operands and outputs (the strided path), and empty tensors.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tensor/cuda/cuda_backend.h"
#include "tests/tensor/cuda_test_util.h"

namespace kiln {
namespace {

using namespace backend_compare;

Backend& cpu_backend() { return backend_for(kCPU); }
Backend& cuda_backend() { return backend_for(gpu()); }

// One operand layout: the base shape each input is drawn with, how it is
// viewed, and the shape everything is broadcast to.
struct Layout {
  std::string name;
  Shape base_a, base_b;
  View view_a, view_b;
  Shape shape;
};

Tensor transpose_view(const Tensor& t) { return t.t(); }
Tensor skip_first(const Tensor& t) { return t.narrow(0, 1, t.size(0) - 1); }

std::vector<Layout> layouts() {
  const int64_t large = (int64_t{1} << 20) + 7;
  return {
      {"contiguous", {large}, {large}, identity_view, identity_view, {large}},
      {"misaligned", {1001}, {1001}, skip_first, skip_first, {1000}},
      {"row_and_column", {37, 1}, {1, 53}, identity_view, identity_view, {37, 53}},
      {"scalar_b", {4099}, {}, identity_view, identity_view, {4099}},
      {"scalar_a", {}, {4099}, identity_view, identity_view, {4099}},
      {"transposed", {53, 37}, {37, 53}, transpose_view, identity_view, {37, 53}},
      {"empty", {0, 5}, {0, 5}, identity_view, identity_view, {0, 5}},
  };
}

bool has_bool_output(BinaryOp op) { return op >= BinaryOp::Eq; }

constexpr BinaryOp kBinaryOps[] = {BinaryOp::Add,       BinaryOp::Sub,     BinaryOp::Mul,        BinaryOp::Div,
                                   BinaryOp::Pow,       BinaryOp::Maximum, BinaryOp::Minimum,    BinaryOp::ReluBackward,
                                   BinaryOp::Eq,        BinaryOp::Ne,      BinaryOp::Lt,         BinaryOp::Le,
                                   BinaryOp::Gt,        BinaryOp::Ge,      BinaryOp::LogicalAnd, BinaryOp::LogicalOr,
                                   BinaryOp::LogicalXor};

// Inputs drawn for `layout`, with NaN and inf planted in floating ones.
std::pair<Tensor, Tensor> binary_inputs(const Layout& layout, DType dtype, bool nonzero_b) {
  Tensor a = random_tensor(layout.base_a, dtype, 1);
  Tensor b = random_tensor(layout.base_b, dtype, 2, nonzero_b);
  if (is_floating(dtype) && a.numel() > 1 && b.numel() > 1) {
    set_flat(a, 7, std::nan(""));
    set_flat(b, 11, std::nan(""));
    set_flat(a, 13, std::numeric_limits<double>::infinity());
    set_flat(b, 17, -std::numeric_limits<double>::infinity());
    set_flat(b, 19, 0.0);
  }
  return {a, b};
}

// Runs op on both backends with the same operands, written into `out_view`
// of a fresh output (identity or transposed), and compares.
void check_binary(BinaryOp op, DType dtype, const Layout& layout, const Tensor& a_base, const Tensor& b_base,
                  const View& out_view = identity_view) {
  const DType out_dtype = has_bool_output(op) ? DType::Bool : dtype;
  Tensor a = layout.view_a(a_base).expand(layout.shape), b = layout.view_b(b_base).expand(layout.shape);
  Tensor ga = layout.view_a(a_base.to(gpu())).expand(layout.shape);
  Tensor gb = layout.view_b(b_base.to(gpu())).expand(layout.shape);
  Shape out_shape = out_view(Tensor::empty(layout.shape)).shape();
  Tensor expected = out_view(Tensor::empty(out_shape, out_dtype));
  Tensor got = out_view(Tensor::empty(out_shape, {out_dtype, gpu()}));
  cpu_backend().binary(op, expected, a, b);
  cuda_backend().binary(op, got, ga, gb);
  expect_matches(expected, got,
                 "binary op " + std::to_string(static_cast<int>(op)) + " on " + std::string(dtype_name(dtype)) + ", " +
                     layout.name,
                 tolerance_for(dtype));
}

TEST(CudaElementwise, EveryBinaryOpAndDTypeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const Layout& layout : layouts()) {
    for (DType dtype : kEveryDType) {
      for (BinaryOp op : kBinaryOps) {
        if (dtype == DType::Bool && (op == BinaryOp::Div || op == BinaryOp::Pow)) continue;
        bool nonzero = op == BinaryOp::Div && !is_floating(dtype);
        auto [a, b] = binary_inputs(layout, dtype, nonzero);
        check_binary(op, dtype, layout, a, b);
      }
    }
  }
}

// gelu's derivatives (a: gradient, b: gelu's input) in every floating dtype
// and layout, over x in [-12, 12) where they go from 0 to 1, with NaN, +-inf
// and -0 planted. Both devices compute gelu' in double, except the CPU's
// float32 vector kernels (a few ulps; for the tanh form of negative x, its
// float 2u as elementwise_simd_test.cpp bounds it); atol covers results
// near the root at x = -0.75.
TEST(CudaElementwise, GeluBackwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const Layout& layout : layouts()) {
    for (DType dtype : kFloatDTypes) {
      for (BinaryOp op : {BinaryOp::GeluBackward, BinaryOp::GeluTanhBackward}) {
        auto [g, x] = binary_inputs(layout, dtype, false);
        x = ops::mul(x.to(DType::Float64), 4.0).to(dtype);
        if (x.numel() > 23) set_flat(x, 23, -0.0);
        Tensor a = layout.view_a(g).expand(layout.shape), b = layout.view_b(x).expand(layout.shape);
        Tensor expected = Tensor::empty(layout.shape, dtype), got = Tensor::empty(layout.shape, {dtype, gpu()});
        cpu_backend().binary(op, expected, a, b);
        cuda_backend().binary(op, got, layout.view_a(g.to(gpu())).expand(layout.shape),
                              layout.view_b(x.to(gpu())).expand(layout.shape));
        expect_matches(expected, got,
                       std::string(op == BinaryOp::GeluBackward ? "gelu" : "gelu_tanh") + " backward on " +
                           std::string(dtype_name(dtype)) + ", " + layout.name,
                       dtype == DType::Float32 ? 3e-5 : tolerance_for(dtype), 0.05 * tolerance_for(dtype));
      }
    }
  }
}

TEST(CudaElementwise, GeluBackwardRejectsIntegersNamingTheOp) {
  SKIP_WITHOUT_GPU();
  Tensor t = Tensor::empty({3}, {DType::Int32, gpu()});
  expect_error([&] { cuda_backend().binary(BinaryOp::GeluBackward, t, t, t); },
               "gelu_backward: expected a floating dtype, got int32");
}

TEST(CudaElementwise, BinaryIntoATransposedOutput) {
  SKIP_WITHOUT_GPU();
  Layout layout{"transposed output", {37, 53}, {53}, identity_view, identity_view, {37, 53}};
  for (DType dtype : {DType::Float32, DType::Int32, DType::Float16}) {
    auto [a, b] = binary_inputs(layout, dtype, false);
    check_binary(BinaryOp::Add, dtype, layout, a, b, transpose_view);
    check_binary(BinaryOp::Lt, dtype, layout, a, b, transpose_view);
  }
}

TEST(CudaElementwise, PowWithAScalarExponentTakesTheCpuSpecialCases) {
  SKIP_WITHOUT_GPU();
  Layout layout{"scalar exponent", {4099}, {}, identity_view, identity_view, {4099}};
  for (DType dtype : kFloatDTypes) {
    for (double e : {2.0, 3.0, 1.0, 0.5, -0.5, -1.0, -2.0, 1.7}) {
      Tensor a = random_tensor(layout.base_a, dtype, 3);
      set_flat(a, 0, -0.0);
      set_flat(a, 1, -std::numeric_limits<double>::infinity());
      check_binary(BinaryOp::Pow, dtype, layout, a, scalar_tensor(Scalar(e), {dtype}));
    }
  }
}

TEST(CudaElementwise, IntegerDivisionByZeroThrows) {
  SKIP_WITHOUT_GPU();
  Tensor a = random_tensor({100}, DType::Int32, 4).to(gpu());
  Tensor b = random_tensor({100}, DType::Int32, 5, /*nonzero=*/true);
  set_flat(b, 50, 0);
  Tensor out = Tensor::empty({100}, {DType::Int32, gpu()});
  expect_error(
      [&] {
        cuda_backend().binary(BinaryOp::Div, out, a, b.to(gpu()));
        (void)out.cpu();  // the error comes at the wait (Note [CUDA kernel errors])
      },
      "div: integer division by zero");
  // INT_MIN / -1 wraps instead of trapping.
  Tensor lo = from_vector<int32_t>({std::numeric_limits<int32_t>::min(), 7}, {2}).to(gpu());
  Tensor minus_one = from_vector<int32_t>({-1, -2}, {2}).to(gpu());
  Tensor q = Tensor::empty({2}, {DType::Int32, gpu()});
  cuda_backend().binary(BinaryOp::Div, q, lo, minus_one);
  Tensor host = q.cpu();
  EXPECT_EQ(host.data<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(host.data<int32_t>()[1], -3);
}

TEST(CudaElementwise, BoolDivAndPowThrowNamingTheOp) {
  SKIP_WITHOUT_GPU();
  Tensor t = Tensor::empty({3}, {DType::Bool, gpu()});
  expect_error([&] { cuda_backend().binary(BinaryOp::Div, t, t, t); }, "div: not supported for bool tensors");
  expect_error([&] { cuda_backend().binary(BinaryOp::Pow, t, t, t); }, "pow: not supported for bool tensors");
}

// ---- unary ----

constexpr UnaryOp kFloatOnly[] = {UnaryOp::Exp,     UnaryOp::Log,  UnaryOp::Sqrt, UnaryOp::Rsqrt,
                                  UnaryOp::Sigmoid, UnaryOp::Tanh, UnaryOp::Gelu, UnaryOp::GeluTanh};
constexpr UnaryOp kAnyNumber[] = {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu};

void check_unary(UnaryOp op, DType dtype, const Layout& layout) {
  const DType out_dtype = op == UnaryOp::LogicalNot ? DType::Bool : dtype;
  Tensor base = random_tensor(layout.base_a, dtype, 6);
  if (is_floating(dtype) && base.numel() > 20) {
    set_flat(base, 7, std::nan(""));
    set_flat(base, 13, std::numeric_limits<double>::infinity());
    set_flat(base, 17, -std::numeric_limits<double>::infinity());
    set_flat(base, 19, -0.0);
  }
  Tensor in = layout.view_a(base).expand(layout.shape);
  Tensor gin = layout.view_a(base.to(gpu())).expand(layout.shape);
  Tensor expected = Tensor::empty(layout.shape, out_dtype);
  Tensor got = Tensor::empty(layout.shape, {out_dtype, gpu()});
  cpu_backend().unary(op, expected, in);
  cuda_backend().unary(op, got, gin);
  // atol: results near zero (log near 1, tanh near 0) from two libm's agree
  // absolutely, not relatively.
  expect_matches(
      expected, got,
      "unary op " + std::to_string(static_cast<int>(op)) + " on " + std::string(dtype_name(dtype)) + ", " + layout.name,
      tolerance_for(dtype), 0.05 * tolerance_for(dtype));
}

TEST(CudaElementwise, EveryUnaryOpAndDTypeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const Layout& layout : layouts()) {
    for (DType dtype : kEveryDType) {
      check_unary(UnaryOp::LogicalNot, dtype, layout);
      if (dtype == DType::Bool) continue;
      for (UnaryOp op : kAnyNumber) check_unary(op, dtype, layout);
      if (!is_floating(dtype)) continue;
      for (UnaryOp op : kFloatOnly) check_unary(op, dtype, layout);
    }
  }
}

// expect_matches compares values, where -0.0 == +0.0: the sign of a negated
// zero is checked bit by bit (1 / -x at x = +0 is -inf on both devices).
TEST(CudaElementwise, NegOfZeroIsNegativeZeroAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor zeros_in = from_vector<double>({0.0, -0.0}, {2}).to(dtype);
    Tensor expected = Tensor::empty({2}, dtype), got = Tensor::empty({2}, {dtype, gpu()});
    cpu_backend().unary(UnaryOp::Neg, expected, zeros_in);
    cuda_backend().unary(UnaryOp::Neg, got, zeros_in.to(gpu()));
    Tensor host = got.cpu();
    EXPECT_EQ(std::memcmp(host.data_ptr(), expected.data_ptr(), expected.nbytes()), 0) << dtype_name(dtype);
    EXPECT_TRUE(std::signbit(host.to(DType::Float64).data<double>()[0])) << dtype_name(dtype);
  }
}

TEST(CudaElementwise, UnaryErrorsNameTheOpAndDType) {
  SKIP_WITHOUT_GPU();
  Tensor b = Tensor::empty({3}, {DType::Bool, gpu()});
  Tensor i = Tensor::empty({3}, {DType::Int32, gpu()});
  expect_error([&] { cuda_backend().unary(UnaryOp::Neg, b, b); }, "neg: not supported for bool tensors");
  expect_error([&] { cuda_backend().unary(UnaryOp::Exp, i, i); }, "exp: expected a floating point tensor, got int32");
}

// ---- where and clamp ----

TEST(CudaElementwise, WhereMatchesTheCpuForEveryDTypeAndLayout) {
  SKIP_WITHOUT_GPU();
  for (const Layout& layout : layouts()) {
    for (DType dtype : kEveryDType) {
      Tensor cond_base = random_tensor(layout.base_a, DType::Bool, 7);
      auto [a_base, b_base] = binary_inputs(layout, dtype, false);
      // cond takes a's layout, a takes b's, and b is a broadcast scalar.
      Tensor b_scalar = random_tensor({}, dtype, 8);
      Tensor cond = layout.view_a(cond_base).expand(layout.shape);
      Tensor a = layout.view_b(b_base).expand(layout.shape);
      Tensor b = layout.view_a(a_base).expand(layout.shape);
      Tensor gcond = layout.view_a(cond_base.to(gpu())).expand(layout.shape);
      Tensor ga = layout.view_b(b_base.to(gpu())).expand(layout.shape);
      Tensor gb = layout.view_a(a_base.to(gpu())).expand(layout.shape);
      for (bool scalar : {false, true}) {
        Tensor expected = Tensor::empty(layout.shape, dtype);
        Tensor got = Tensor::empty(layout.shape, {dtype, gpu()});
        cpu_backend().where(expected, cond, a, scalar ? b_scalar.expand(layout.shape) : b);
        cuda_backend().where(got, gcond, ga, scalar ? b_scalar.to(gpu()).expand(layout.shape) : gb);
        expect_matches(expected, got, "where on " + std::string(dtype_name(dtype)) + ", " + layout.name, 0);
      }
    }
  }
}

TEST(CudaElementwise, ClampMatchesTheCpuForEveryBoundAndDType) {
  SKIP_WITHOUT_GPU();
  struct Bounds {
    std::optional<Scalar> lo, hi;
  };
  const std::vector<Bounds> bounds = {{Scalar(-1.5), std::nullopt},
                                      {std::nullopt, Scalar(2)},
                                      {Scalar(-20), Scalar(30)},
                                      {Scalar(5), Scalar(-5)},
                                      {Scalar(std::nan("")), Scalar(1)}};
  for (const Layout& layout : layouts()) {
    for (DType dtype : kEveryDType) {
      if (dtype == DType::Bool) continue;
      Tensor base = random_tensor(layout.base_a, dtype, 9);
      if (is_floating(dtype)) set_flat(base, 3, std::nan(""));
      Tensor in = layout.view_a(base).expand(layout.shape);
      Tensor gin = layout.view_a(base.to(gpu())).expand(layout.shape);
      for (const Bounds& bound : bounds) {
        if (!is_floating(dtype) && bound.lo && std::isnan(bound.lo->to<double>())) continue;
        Tensor expected = Tensor::empty(layout.shape, dtype);
        Tensor got = Tensor::empty(layout.shape, {dtype, gpu()});
        cpu_backend().clamp(expected, in, bound.lo, bound.hi);
        cuda_backend().clamp(got, gin, bound.lo, bound.hi);
        expect_matches(expected, got, "clamp on " + std::string(dtype_name(dtype)) + ", " + layout.name, 0);
      }
    }
  }
  Tensor b = Tensor::empty({3}, {DType::Bool, gpu()});
  expect_error([&] { cuda_backend().clamp(b, b, Scalar(0), std::nullopt); }, "clamp: not supported for bool tensors");
}

TEST(CudaElementwise, FrontEndOpsRunOnTheGpu) {
  SKIP_WITHOUT_GPU();
  // x * 2 + 1 through ops:: (type promotion and broadcasting in the front-end).
  Tensor x = random_tensor({3, 1000}, DType::Float32, 10);
  Tensor expected = ops::add(ops::mul(x, Scalar(2.0)), Scalar(1.0));
  Tensor got = ops::add(ops::mul(x.to(gpu()), Scalar(2.0)), Scalar(1.0));
  EXPECT_TRUE(got.device().is_cuda());
  expect_matches(expected, got, "x * 2 + 1", 1e-6);
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
