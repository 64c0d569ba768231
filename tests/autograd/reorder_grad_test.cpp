// Gradients of flip, roll, repeat and tile: gradcheck and gradgradcheck in
// float64 on contiguous and strided inputs (each backward is the op itself
// or a sum, so second derivatives come from the same functions), plus
// hand-computed gradients and the grad_fn names torch shows.
#include "autograd_test_util.h"

namespace kiln::gradtest {
namespace {

TEST(ReorderGrad, Flip) {
  for (const Shape& dims : std::vector<Shape>{{0}, {1}, {-1, 0}, {0, 1, 2}, {}}) {
    SCOPED_TRACE(shape_str(dims));
    autograd::GradcheckFn fn = [dims](const TensorList& in) { return TensorList{flip(in[0], dims)}; };
    expect_gradcheck(fn, {leaf({2, 3, 4}, 1)});
    expect_gradgradcheck(fn, {leaf({2, 3, 2}, 2)});
  }
  expect_gradcheck([](const TensorList& in) { return TensorList{flip(in[0], {1})}; }, {transposed_leaf({3, 4}, 3)});
  expect_gradcheck([](const TensorList& in) { return TensorList{flip(in[0], {0})}; }, {leaf({}, 4)});
}

TEST(ReorderGrad, FlipSendsEachGradientBackToItsEntry) {
  Tensor x = leaf({3}, 5);
  Tensor y = flip(x, {0});
  EXPECT_EQ(y.grad_fn_name(), "FlipBackward");
  y.backward(from_vector<double>({1, 2, 3}));
  expect_values(x.grad(), {3, 2, 1});
}

TEST(ReorderGrad, Roll) {
  struct Case {
    Shape shifts, dims;
  };
  for (const Case& c : std::vector<Case>{{{1}, {0}}, {{-2}, {1}}, {{5}, {}}, {{1, 2}, {0, 2}}, {{1, 1}, {1, 1}},
                                         {{-7}, {-1}}}) {
    SCOPED_TRACE(shape_str(c.shifts) + " " + shape_str(c.dims));
    autograd::GradcheckFn fn = [c](const TensorList& in) { return TensorList{roll(in[0], c.shifts, c.dims)}; };
    expect_gradcheck(fn, {leaf({2, 3, 4}, 6)});
    expect_gradcheck(fn, {strided_leaf({2, 3, 4}, 7)});
    expect_gradgradcheck(fn, {leaf({2, 3, 2}, 8)});
  }
  // Extreme shifts are reduced before being negated for the backward.
  Tensor x = leaf({4}, 9);
  Tensor y = roll(x, {INT64_MIN}, {0});
  EXPECT_EQ(y.grad_fn_name(), "RollBackward");
  y.backward(from_vector<double>({1, 2, 3, 4}));
  expect_values(x.grad(), {1, 2, 3, 4});  // INT64_MIN is 0 mod 4
  Tensor z = leaf({4}, 10);
  roll(z, {1}).backward(from_vector<double>({1, 2, 3, 4}));
  expect_values(z.grad(), {2, 3, 4, 1});
}

TEST(ReorderGrad, Repeat) {
  for (const Shape& repeats : std::vector<Shape>{{1, 1}, {2, 1}, {1, 3}, {2, 2}, {3, 1, 2}, {2, 0}}) {
    SCOPED_TRACE(shape_str(repeats));
    autograd::GradcheckFn fn = [repeats](const TensorList& in) { return TensorList{repeat(in[0], repeats)}; };
    expect_gradcheck(fn, {leaf({2, 3}, 11)});
    expect_gradcheck(fn, {transposed_leaf({2, 3}, 12)});
    expect_gradgradcheck(fn, {leaf({2, 2}, 13)});
  }
  expect_gradcheck([](const TensorList& in) { return TensorList{repeat(in[0], {})}; }, {leaf({}, 14)});
  expect_gradcheck([](const TensorList& in) { return TensorList{repeat(in[0], {2, 3})}; }, {leaf({}, 15)});
}

TEST(ReorderGrad, RepeatSumsTheGradientsOfTheTiles) {
  Tensor x = leaf({2}, 16);
  Tensor y = repeat(x, {2, 2});  // (2, 4): [[x0, x1, x0, x1], [x0, x1, x0, x1]]
  EXPECT_EQ(y.grad_fn_name(), "RepeatBackward");
  y.backward(from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}));
  expect_values(x.grad(), {1 + 3 + 5 + 7, 2 + 4 + 6 + 8});
  // No tiles at all: a zero gradient of x's shape.
  Tensor w = leaf({2, 3}, 17);
  sum(repeat(w, {0, 2})).backward();
  expect_values(w.grad(), std::vector<double>(6, 0.0));
}

TEST(ReorderGrad, TileIsRepeatWithOnesPrepended) {
  autograd::GradcheckFn fn = [](const TensorList& in) { return TensorList{tile(in[0], {3})}; };
  expect_gradcheck(fn, {leaf({2, 2}, 18)});
  expect_gradgradcheck(fn, {leaf({2, 2}, 19)});
  Tensor x = leaf({2, 2}, 20);
  Tensor y = tile(x, {2});
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_EQ(y.grad_fn_name(), "RepeatBackward");
  y.backward(ones({2, 4}, DType::Float64));
  expect_values(x.grad(), {2, 2, 2, 2});
  expect_error([] { tile(Tensor(), {1}); }, "tile: got an undefined tensor");
}

}  // namespace
}  // namespace kiln::gradtest
