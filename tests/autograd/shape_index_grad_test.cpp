// Gradients of joining, splitting and indexing: cat, stack, split, chunk,
// index_select, gather and scatter_add.
#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

TEST(ShapeGrad, CatAlongEveryDim) {
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(dim);
    autograd::GradcheckFn fn = [dim](const TensorList& in) { return TensorList{cat(in, dim)}; };
    Shape a{2, 3}, b{2, 3}, c{2, 3};
    int64_t d = dim < 0 ? dim + 2 : dim;
    b[d] = 1;
    c[d] = 4;
    expect_gradcheck(fn, {leaf(a, 1), leaf(b, 2), leaf(c, 3)});
    expect_gradcheck(fn, {transposed_leaf(a, 4), uniform64(b, 5), strided_leaf(c, 6)});
    expect_gradgradcheck(fn, {leaf(a, 7), leaf(b, 8)});
  }
}

TEST(ShapeGrad, CatSkipsEmptyVectorsAndPromotesDtypes) {
  Tensor empty = from_vector<double>({}, {0}).requires_grad_();
  Tensor a = leaf({2, 2}, 9);
  Tensor b = kiln::rand({1, 2}).requires_grad_();  // float32, promoted to float64
  Tensor y = cat({empty, a, b}, 0);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.dtype(), DType::Float64);
  y.backward(uniform64({3, 2}, 10));
  Tensor g = uniform64({3, 2}, 10);
  expect_same(a.grad(), g.narrow(0, 0, 2));
  expect_same(b.grad(), g.narrow(0, 2, 1).to(DType::Float32));
  EXPECT_EQ(empty.grad().shape(), (Shape{0}));
}

TEST(ShapeGrad, Stack) {
  for (int64_t dim : {0, 1, 2, -1}) {
    SCOPED_TRACE(dim);
    autograd::GradcheckFn fn = [dim](const TensorList& in) { return TensorList{stack(in, dim)}; };
    expect_gradcheck(fn, {leaf({2, 3}, 11), transposed_leaf({2, 3}, 12), strided_leaf({2, 3}, 13)});
    expect_gradgradcheck(fn, {leaf({2, 3}, 14), leaf({2, 3}, 15)});
  }
}

// Each piece of split/chunk is an output of one node; gradcheck sees them
// all as outputs, so every piece's Jacobian is checked.
TEST(ShapeGrad, SplitAndChunk) {
  std::vector<std::pair<const char*, autograd::GradcheckFn>> cases = {
      {"split_size", [](const TensorList& in) { return split(in[0], 2, 1); }},
      {"split_sizes", [](const TensorList& in) { return split(in[0], std::vector<int64_t>{1, 0, 4}, -1); }},
      {"split_dim0", [](const TensorList& in) { return split(in[0], 1, 0); }},
      {"chunk", [](const TensorList& in) { return chunk(in[0], 3, 1); }},
      {"chunk_uneven", [](const TensorList& in) { return chunk(in[0], 4, 1); }},
  };
  for (const auto& [name, fn] : cases) {
    SCOPED_TRACE(name);
    expect_gradcheck(fn, {leaf({2, 5}, 16)});
    expect_gradcheck(fn, {transposed_leaf({2, 5}, 17)});
    expect_gradgradcheck(fn, {leaf({2, 5}, 18)});
  }
}

TEST(ShapeGrad, SplitPiecesAreViewsAndUnusedPiecesGetZeros) {
  Tensor x = leaf({6}, 19);
  std::vector<Tensor> parts = split(x, 2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].storage(), x.storage());  // a view: no copy
  EXPECT_EQ(parts[1].grad_fn_name(), "SplitBackward");
  sum(mul(parts[1], 3.0)).backward();
  expect_values(x.grad(), {0, 0, 3, 3, 0, 0});
}

TEST(ShapeGrad, ForwardMatchesTheTensorLayer) {
  Tensor a = leaf({2, 3}, 20), b = leaf({2, 3}, 21);
  // ops::cat copies its inputs into its result, which autograd refuses for
  // tensors that require grad: the tensor layer gets detached inputs.
  expect_same(cat({a, b}, 1), ops::cat({a.detach(), b.detach()}, 1));
  expect_same(stack({a, b}, 1), ops::stack({a.detach(), b.detach()}, 1));
  std::vector<Tensor> mine = chunk(a, 2, 1), theirs = ops::chunk(a, 2, 1);
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) expect_same(mine[i], theirs[i]);
}

TEST(IndexGrad, IndexSelectSumsRepeatedIndices) {
  Tensor index = from_vector<int64_t>({2, 0, 2}, {3});
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(dim);
    autograd::GradcheckFn fn = [dim, index](const TensorList& in) {
      return TensorList{index_select(in[0], dim, index)};
    };
    expect_gradcheck(fn, {leaf({3, 3}, 22)});
    expect_gradcheck(fn, {transposed_leaf({3, 3}, 23)});
    expect_gradgradcheck(fn, {leaf({3, 3}, 24)});
  }
  Tensor x = leaf({3, 2}, 25);
  index_select(x, 0, index).backward(ones({3, 2}, DType::Float64));
  expect_values(x.grad(), {1, 1, 0, 0, 2, 2});
  // A 0-dim index selects one slice and keeps the dim, as torch.
  Tensor y = leaf({3, 2}, 26);
  Tensor picked = index_select(y, 1, scalar_tensor(1, DType::Int64));
  EXPECT_EQ(picked.shape(), (Shape{3, 1}));
  sum(picked).backward();
  expect_values(y.grad(), {0, 1, 0, 1, 0, 1});
}

TEST(IndexGrad, Gather) {
  Tensor index = from_vector<int64_t>({0, 0, 1, 2, 1, 0}, {2, 3});
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE(dim);
    autograd::GradcheckFn fn = [dim, index](const TensorList& in) { return TensorList{gather(in[0], dim, index)}; };
    expect_gradcheck(fn, {leaf({3, 4}, 27)});
    expect_gradcheck(fn, {strided_leaf({3, 4}, 28)});
    expect_gradgradcheck(fn, {leaf({3, 4}, 29)});
  }
}

TEST(IndexGrad, ScatterAdd) {
  Tensor index = from_vector<int64_t>({0, 2, 0, 1, 1, 1}, {2, 3});
  autograd::GradcheckFn fn = [index](const TensorList& in) { return TensorList{scatter_add(in[0], 1, index, in[1])}; };
  expect_gradcheck(fn, {leaf({2, 3}, 30), leaf({2, 3}, 31)});
  // src larger than the index: its extra elements are not read, so their
  // gradient is 0.
  expect_gradcheck(fn, {leaf({3, 3}, 32), leaf({3, 4}, 33)});
  expect_gradcheck(fn, {uniform64({2, 3}, 34), transposed_leaf({2, 3}, 35)});
  expect_gradcheck(fn, {leaf({2, 3}, 36), uniform64({2, 3}, 37)});
  expect_gradgradcheck(fn, {leaf({2, 3}, 38), leaf({2, 4}, 39)});

  Tensor x = leaf({2, 3}, 40), src = leaf({2, 4}, 41);
  Tensor g = uniform64({2, 3}, 42);
  scatter_add(x, 1, index, src).backward(g);
  expect_same(x.grad(), g);
  expect_same(src.grad().narrow(1, 0, 3), ops::gather(g, 1, index));
  expect_values(src.grad().narrow(1, 3, 1), {0, 0});
}

TEST(IndexGrad, ForwardMatchesTheTensorLayer) {
  Tensor x = leaf({3, 4}, 43);
  Tensor index = from_vector<int64_t>({2, 0}, {2});
  Tensor index2 = from_vector<int64_t>({0, 3, 1, 1, 2, 0}, {3, 2});
  expect_same(index_select(x, 1, index), ops::index_select(x, 1, index));
  expect_same(gather(x, 1, index2), ops::gather(x, 1, index2));
  expect_same(scatter_add(x, 1, index2, leaf({3, 2}, 44)), ops::scatter_add(x, 1, index2, leaf({3, 2}, 44)));
}

}  // namespace
}  // namespace kiln::gradtest
