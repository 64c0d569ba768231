// Gradients of cumsum and cumprod: gradcheck and gradgradcheck in float64,
// cumprod at inputs with zeros (none, one, two, first and last; the cases
// its backward splits), hand-computed gradients, and values and gradients
// against PyTorch on the same inputs.
#include "autograd_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::gradtest {
namespace {

// A float64 leaf from values with exact zeros where `zeros` says.
Tensor leaf_with_zeros(const Shape& shape, uint64_t seed, const std::vector<int64_t>& zeros) {
  Tensor t = uniform64(shape, seed, 0.5, 1.5);
  for (int64_t k : zeros) t.view({t.numel()}).data<double>()[k] = 0;
  return t.requires_grad_();
}

TEST(ScanGrad, CumsumAlongEveryDim) {
  for (int64_t dim : {0, 1, 2, -1}) {
    SCOPED_TRACE(dim);
    autograd::GradcheckFn fn = [dim](const TensorList& in) { return TensorList{cumsum(in[0], dim)}; };
    expect_gradcheck(fn, {leaf({3, 4, 5}, 1)});
    expect_gradgradcheck(fn, {leaf({2, 3, 4}, 2)});
  }
  autograd::GradcheckFn strided = [](const TensorList& in) { return TensorList{cumsum(in[0], 0)}; };
  expect_gradcheck(strided, {transposed_leaf({4, 3}, 3)});
}

TEST(ScanGrad, CumsumGradientIsTheSumOfTheLaterGradients) {
  Tensor x = leaf({4}, 4);
  cumsum(x, 0).backward(from_vector<double>({1, 2, 3, 4}, {4}));
  expect_values(x.grad(), {10, 9, 7, 4});
  EXPECT_EQ(cumsum(x, 0).grad_fn_name(), "CumsumBackward");
}

TEST(ScanGrad, CumsumIntoAnotherDtypeReturnsTheInputsDtype) {
  Tensor x = uniform64({3}, 5).to(DType::Float32).requires_grad_();
  Tensor y = cumsum(x, 0, DType::Float64);
  EXPECT_EQ(y.dtype(), DType::Float64);
  y.backward(ones({3}, DType::Float64));
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
  expect_values(x.grad(), {3, 2, 1});
}

TEST(ScanGrad, CumprodWithoutZeros) {
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(dim);
    autograd::GradcheckFn fn = [dim](const TensorList& in) { return TensorList{cumprod(in[0], dim)}; };
    expect_gradcheck(fn, {leaf({3, 5}, 6, 0.5, 1.5)});
    expect_gradcheck(fn, {leaf({3, 5}, 7, -1.5, -0.5)});
    expect_gradgradcheck(fn, {leaf({3, 4}, 8, 0.5, 1.5)});
  }
  autograd::GradcheckFn scalar = [](const TensorList& in) { return TensorList{cumprod(in[0], 0)}; };
  expect_gradcheck(scalar, {leaf({}, 9)});
}

// Rows of 6 with zeros: none in row 0, one in row 1, two in row 2, at the
// first entry in row 3 and at the last in row 4. gradgradcheck differentiates
// the O(n^2) backward a recorded backward uses; the O(n) one is checked
// against it and against finite differences.
TEST(ScanGrad, CumprodWithZeros) {
  const std::vector<int64_t> zeros{6 + 2, 12 + 1, 12 + 4, 18 + 0, 24 + 5};
  autograd::GradcheckFn along_rows = [](const TensorList& in) { return TensorList{cumprod(in[0], 1)}; };
  expect_gradcheck(along_rows, {leaf_with_zeros({5, 6}, 10, zeros)});
  expect_gradgradcheck(along_rows, {leaf_with_zeros({5, 6}, 11, zeros)});
  autograd::GradcheckFn along_columns = [](const TensorList& in) { return TensorList{cumprod(in[0].t(), 0)}; };
  expect_gradcheck(along_columns, {leaf_with_zeros({5, 6}, 12, zeros)});
}

// x = [2, 0, 3, 4]: out = [2, 0, 0, 0]; with g = 1, dL/dx0 = 1 (out0 only,
// later products vanish), dL/dx1 = x0 + x0*x2 + x0*x2*x3 = 2 + 6 + 24 = 32,
// and dL/dx2 = dL/dx3 = 0 (every product they enter holds x1 = 0).
TEST(ScanGrad, CumprodGradientByHand) {
  Tensor x = leaf_of({2, 0, 3, 4}, {4});
  cumprod(x, 0).backward(ones({4}, DType::Float64));
  expect_values(x.grad(), {1, 32, 0, 0});
  // The same through the recorded (create_graph) backward.
  Tensor y = leaf_of({2, 0, 3, 4}, {4});
  TensorList g = autograd::grad({sum(cumprod(y, 0))}, {y}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  expect_values(g[0], {1, 32, 0, 0});
}

TEST(ScanGrad, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  using nn::testing::OracleCase;
  std::vector<OracleCase> cases;
  cases.push_back({.name = "cumsum dim 1",
                   .inputs = {leaf({3, 4, 2}, 13)},
                   .python = "outs = [torch.cumsum(in0, 1)]",
                   .kiln = [](const TensorList& in) { return TensorList{cumsum(in[0], 1)}; }});
  cases.push_back({.name = "cumsum dim -1",
                   .inputs = {leaf({3, 4}, 14)},
                   .python = "outs = [torch.cumsum(in0, -1)]",
                   .kiln = [](const TensorList& in) { return TensorList{cumsum(in[0], -1)}; }});
  cases.push_back({.name = "cumprod with zeros",
                   .inputs = {leaf_with_zeros({4, 5}, 15, {2, 6, 9, 15, 19})},
                   .python = "outs = [torch.cumprod(in0, 1)]",
                   .kiln = [](const TensorList& in) { return TensorList{cumprod(in[0], 1)}; }});
  cases.push_back({.name = "cumprod dim 0",
                   .inputs = {leaf({4, 3}, 16)},
                   .python = "outs = [torch.cumprod(in0, 0)]",
                   .kiln = [](const TensorList& in) { return TensorList{cumprod(in[0], 0)}; }});
  nn::testing::expect_matches_torch(cases);
}

}  // namespace
}  // namespace kiln::gradtest
