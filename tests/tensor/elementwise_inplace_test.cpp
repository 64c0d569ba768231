// In-place elementwise ops (views, aliasing, version counter), the errors
// every front-end raises, allclose/equal, and threaded kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>

#include "tensor/ops.h"
#include "tests/tensor/elementwise_reference.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

using reference::random_tensor;
using reference::values;

TEST(Elementwise, InPlaceWritesThroughViewsAndBumpsVersion) {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  uint64_t v0 = x.version();
  Tensor& same = add_(x, from_vector<float>({10, 20, 30}));
  EXPECT_TRUE(same.is_same(x));
  EXPECT_EQ(x.version(), v0 + 1);
  EXPECT_EQ(values(x), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  // Through a column view: only that column changes, in the base tensor.
  Tensor column = x.select(1, 1);
  mul_(column, 2);
  EXPECT_EQ(values(x), (std::vector<double>{11, 44, 33, 14, 50, 36}));
  sub_(x, 1);
  div_(x, 2);
  EXPECT_EQ(values(x), (std::vector<double>{5, 21.5, 16, 6.5, 24.5, 17.5}));
  pow_(x, 2);
  EXPECT_EQ(x.at<float>({0, 0}), 25.0f);
  x += 1;
  x -= from_vector<float>({1, 1, 1});
  x *= 2;
  x /= from_vector<float>({2});
  EXPECT_EQ(x.at<float>({0, 0}), 25.0f);
  fill_(column, 7);
  EXPECT_EQ(values(x.select(1, 1)), (std::vector<double>{7, 7}));
  zero_(x);
  EXPECT_EQ(values(x), std::vector<double>(6, 0.0));
}

TEST(Elementwise, InPlaceWithAliasedOperands) {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  Tensor expected = add(x, x);
  add_(x, x);  // exact alias
  EXPECT_EQ(values(x), values(expected));
  // x += x.t() overlaps partially: the result must be as if x.t() had been
  // read before any write.
  Tensor y = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  Tensor expected_t = add(y, y.t());
  add_(y, y.t());
  EXPECT_EQ(values(y), values(expected_t));
  // A shifted view of the same storage.
  Tensor z = from_vector<float>({1, 2, 3, 4, 5});
  Tensor head = z.narrow(0, 0, 4), tail = z.narrow(0, 1, 4);
  Tensor expected_shift = mul(head, tail);
  mul_(head, tail);
  EXPECT_EQ(values(head), values(expected_shift));
  // In-place unary ops alias their input exactly.
  Tensor w = random_tensor({3000}, -5, 5, DType::Float32, 18);
  for (auto [op, op_] : std::vector<std::pair<Tensor (*)(const Tensor&), Tensor& (*)(Tensor&)>>{
           {neg, neg_}, {abs, abs_}, {relu, relu_}, {sigmoid, sigmoid_}, {tanh, tanh_}, {exp, exp_}}) {
    Tensor copy = w.clone();
    Tensor out = op(copy);
    op_(copy);
    EXPECT_EQ(values(copy), values(out));
  }
  Tensor pos = abs(w);
  Tensor logged = log(pos), rooted = sqrt(pos);
  log_(pos);
  EXPECT_EQ(values(pos), values(logged));
  Tensor pos2 = abs(w);
  sqrt_(pos2);
  EXPECT_EQ(values(pos2), values(rooted));
  Tensor clamped = clamp(w, -1, 1);
  clamp_(w, -1, 1);
  EXPECT_EQ(values(w), values(clamped));
}

TEST(Elementwise, InPlaceErrors) {
  Tensor x = zeros({3});
  expect_error([&] { add_(x, ones({2, 3})); }, "add_: output with shape [3] doesn't match the broadcast shape [2, 3]");
  Tensor expanded = zeros({3, 1}).expand({3, 4});
  expect_error([&] { add_(expanded, 1); },
               "add_: cannot write in place to a broadcast view (shape [3, 4], strides [1, 0])");
  expect_error([&] { relu_(expanded); }, "relu_: cannot write in place to a broadcast view");
  expect_error([&] { fill_(expanded, 1); }, "fill_: cannot write in place to a broadcast view");
  Tensor b = from_vector<bool>({true});
  expect_error([&] { sub_(b, b); }, "sub_: subtracting bool tensors is not supported; use logical_xor() instead");
}

TEST(Elementwise, ErrorsNameOpShapesAndDevices) {
  expect_error([&] { add(zeros({2, 3}), zeros({4})); }, "add: shapes [2, 3] and [4] cannot be broadcast");
  expect_error([&] { mul(zeros({2}), zeros({3})); }, "mul: shapes [2] and [3] cannot be broadcast");
  expect_error([&] { lt(zeros({2}), zeros({3})); }, "lt: shapes [2] and [3] cannot be broadcast");
  expect_error([&] { neg(from_vector<bool>({true})); }, "neg: negating a bool tensor is not supported");
  expect_error([&] { relu(from_vector<bool>({true})); }, "relu: not supported for bool tensors");
  expect_error([&] { sub(from_vector<bool>({true}), from_vector<bool>({true})); },
               "sub: subtracting bool tensors is not supported");
  // A tensor that claims to live on cuda:0 (never touched): the device check
  // comes before any kernel.
  Tensor on_cuda = tensor_claiming_device(cuda_device(0), 4);
  expect_error([&] { add(zeros({4}), on_cuda); },
               "add: expected all tensors to be on the same device, but found cpu and cuda:0");
  expect_error([&] { where(from_vector<bool>({true}), on_cuda, on_cuda.to(DType::Float32)); },
               "where: expected all tensors to be on the same device, but found cpu and cuda:0");
  Tensor x = zeros({4});
  expect_error([&] { mul_(x, on_cuda); },
               "mul_: expected all tensors to be on the same device, but found cpu and cuda:0");
  expect_error([&] { allclose(x, on_cuda); }, "allclose: expected all tensors to be on the same device");
}

TEST(Elementwise, AllcloseAndEqual) {
  float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = from_vector<float>({1, 2, inf, -inf});
  EXPECT_TRUE(allclose(a, from_vector<float>({1 + 1e-6f, 2, inf, -inf})));
  EXPECT_FALSE(allclose(a, from_vector<float>({1.001f, 2, inf, -inf})));
  EXPECT_TRUE(allclose(a, from_vector<float>({1.001f, 2, inf, -inf}), 1e-2));
  EXPECT_FALSE(allclose(a, from_vector<float>({1, 2, inf, inf})));
  EXPECT_FALSE(allclose(a, from_vector<float>({1, 2, inf})));                      // shapes differ
  EXPECT_TRUE(allclose(from_vector<double>({0.0}), from_vector<double>({1e-9})));  // atol
  Tensor n = from_vector<float>({nan, 1});
  EXPECT_FALSE(allclose(n, n));
  EXPECT_TRUE(allclose(n, n, 1e-5, 1e-8, true));
  EXPECT_TRUE(equal(a, a.clone()));
  EXPECT_FALSE(equal(n, n));
  EXPECT_TRUE(equal(from_vector<int32_t>({1, 2}), from_vector<float>({1, 2})));
  EXPECT_FALSE(equal(from_vector<int32_t>({1, 2}), from_vector<int32_t>({1, 3})));
  EXPECT_FALSE(equal(zeros({2, 3}), zeros({3, 2})));
  EXPECT_TRUE(equal(zeros({3, 2}).t(), zeros({2, 3})));
}

TEST(Elementwise, ThreadedResultsMatchSingleThread) {
  // 300k elements: several grains, so two threads split the work; the
  // transposed operand runs the strided loop across chunk boundaries.
  Tensor a = random_tensor({600, 500}, -3, 3, DType::Float32, 19);
  Tensor b = random_tensor({500, 600}, -3, 3, DType::Float32, 20).t();
  int threads = get_num_threads();
  set_num_threads(1);
  std::vector<double> add1 = values(add(a, b)), exp1 = values(exp(a)), gt1 = values(gt(a, b));
  std::vector<double> pow1 = values(pow(b, 3)), clamp1 = values(clamp(b, -1, 1));
  set_num_threads(2);
  EXPECT_EQ(values(add(a, b)), add1);
  EXPECT_EQ(values(exp(a)), exp1);
  EXPECT_EQ(values(gt(a, b)), gt1);
  EXPECT_EQ(values(pow(b, 3)), pow1);
  EXPECT_EQ(values(clamp(b, -1, 1)), clamp1);
  set_num_threads(threads);
}

}  // namespace
}  // namespace kiln
