// index_select, gather, scatter_add and one_hot against plain-loop references.
#include <gtest/gtest.h>

#include <random>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

// Row-major multi-index of flat position k in `shape`.
Shape unravel(int64_t k, const Shape& shape) {
  Shape idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = k % shape[d];
    k /= shape[d];
  }
  return idx;
}

int64_t ravel(const Shape& idx, const Shape& shape) {
  int64_t k = 0;
  for (size_t d = 0; d < shape.size(); ++d) k = k * shape[d] + idx[d];
  return k;
}

// Random values of `dtype`: small integers for integer dtypes (exact sums).
Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(-9, 9);
  std::vector<double> v(shape_numel(shape));
  for (double& e : v) e = is_floating(dtype) ? real(rng) : small(rng);
  return from_vector<double>(v, shape).to(dtype);
}

Tensor random_index(const Shape& shape, int64_t high, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, high - 1);
  std::vector<int64_t> v(shape_numel(shape));
  for (int64_t& e : v) e = dist(rng);
  return from_vector<int64_t>(v, shape);
}

// out[p] = x[p with p[dim] replaced by index[p]] (torch.gather).
std::vector<double> gather_reference(const Tensor& x, int64_t dim, const Tensor& index) {
  std::vector<double> out(index.numel());
  for (int64_t k = 0; k < index.numel(); ++k) {
    Shape p = unravel(k, index.shape());
    p[dim] = static_cast<int64_t>(flat_value(index, k));
    out[k] = flat_value(x, ravel(p, x.shape()));
  }
  return out;
}

// x[p with p[dim] replaced by index[p]] += src[p], visiting p in row-major
// order, in the dtype T so that float sums round as the kernel's do.
template <class T>
std::vector<T> scatter_add_reference(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  std::vector<T> out(x.numel());
  for (int64_t k = 0; k < x.numel(); ++k) out[k] = static_cast<T>(flat_value(x, k));
  for (int64_t k = 0; k < index.numel(); ++k) {
    Shape p = unravel(k, index.shape());
    T add = static_cast<T>(flat_value(src, ravel(p, src.shape())));
    p[dim] = static_cast<int64_t>(flat_value(index, k));
    out[ravel(p, x.shape())] += add;
  }
  return out;
}

TEST(IndexSelect, RowsWithRepeats) {
  Tensor x = random_tensor({5, 7}, DType::Float32, 1);
  Tensor index = from_vector<int64_t>({4, 0, 4, 2});
  Tensor out = index_select(x, 0, index);
  ASSERT_EQ(out.shape(), (Shape{4, 7}));
  int64_t rows[] = {4, 0, 4, 2};
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(out.at<float>({i, j}), x.at<float>({rows[i], j}));
  }
  EXPECT_EQ(index_select(x, 0, from_vector<int64_t>({}, {0})).shape(), (Shape{0, 7}));
  Tensor scalar_index = scalar_tensor(3, DType::Int64);
  EXPECT_EQ(index_select(x, 1, scalar_index).shape(), (Shape{5, 1}));
  EXPECT_EQ(index_select(x, 1, scalar_index).at<float>({2, 0}), x.at<float>({2, 3}));
}

TEST(IndexSelect, TransposedInputStridedIndexEveryDim) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64, DType::Float16, DType::UInt8}) {
    Tensor base = random_tensor({6, 4, 5}, dtype, 2);
    Tensor x = base.permute({2, 0, 1});                                           // (5, 6, 4), no unit stride
    Tensor index = from_vector<int64_t>({1, 9, 3, 9, 0, 9, 3, 9}).slice(0, 0, 8, 2);  // 1, 3, 0, 3
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor out = index_select(x, dim, index);
      Shape expected_shape = x.shape();
      expected_shape[dim] = 4;
      ASSERT_EQ(out.shape(), expected_shape);
      for (int64_t k = 0; k < out.numel(); ++k) {
        Shape p = unravel(k, out.shape());
        p[dim] = static_cast<int64_t>(flat_value(index, p[dim]));
        EXPECT_EQ(flat_value(out, k), flat_value(x, ravel(p, x.shape()))) << dtype << " dim " << dim;
      }
    }
  }
}

TEST(IndexSelect, Errors) {
  Tensor x = random_tensor({5, 3}, DType::Float32, 3);
  expect_error([&] { index_select(x, 0, from_vector<int64_t>({1, 7})); },
               "index_select: index 7 is out of range for dim 0 of size 5");
  expect_error([&] { index_select(x, 1, from_vector<int64_t>({-1})); },
               "index_select: index -1 is out of range for dim 1 of size 3");
  expect_error([&] { index_select(x, 0, from_vector<int32_t>({1})); }, "index_select: index must be int64, got int32");
  expect_error([&] { index_select(x, 0, from_vector<int64_t>({1, 2}, {1, 2})); },
               "index_select: index must be 1-d, got shape [1, 2]");
  expect_error([&] { index_select(x, 2, from_vector<int64_t>({0})); }, "index_select: dim 2 is out of range");
  expect_error([&] { index_select(scalar_tensor(1.0), 0, from_vector<int64_t>({0})); },
               "index_select: cannot index a 0-dim tensor");
}

TEST(IndexSelect, BadIndexInsideParallelRegionThrows) {
  set_num_threads(2);
  Tensor x = zeros({1000, 64});
  std::vector<int64_t> idx(4000);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i % 1000);
  idx[3777] = 1000;
  expect_error([&] { index_select(x, 0, from_vector<int64_t>(idx)); },
               "index_select: index 1000 is out of range for dim 0 of size 1000");
}

TEST(Gather, TwoAndThreeDimsEveryDim) {
  struct Case {
    Shape x_shape, index_shape;
  };
  std::vector<Case> cases{{{4, 5}, {3, 5}}, {{4, 5}, {4, 8}}, {{4, 5}, {2, 3}},
                          {{3, 4, 5}, {6, 2, 5}}, {{3, 4, 5}, {3, 7, 2}}, {{3, 4, 5}, {2, 4, 9}}};
  for (const Case& c : cases) {
    for (int64_t dim = 0; dim < static_cast<int64_t>(c.x_shape.size()); ++dim) {
      Shape index_shape = c.index_shape;
      for (size_t d = 0; d < index_shape.size(); ++d) {  // only dim may exceed x's size
        if (static_cast<int64_t>(d) != dim) index_shape[d] = std::min(index_shape[d], c.x_shape[d]);
      }
      Tensor x = random_tensor(c.x_shape, DType::Float32, 4);
      Tensor index = random_index(index_shape, c.x_shape[dim], 5);
      Tensor out = gather(x, dim, index);
      ASSERT_EQ(out.shape(), index_shape);
      std::vector<double> expected = gather_reference(x, dim, index);
      for (int64_t k = 0; k < out.numel(); ++k) EXPECT_EQ(flat_value(out, k), expected[k]) << "dim " << dim;
    }
  }
}

TEST(Gather, TransposedInputAndIndex) {
  Tensor x = random_tensor({6, 4}, DType::Float64, 6).t();  // (4, 6)
  Tensor index = random_index({5, 3}, 4, 7).t();            // (3, 5), values < 4 for dim 0
  Tensor idx1 = random_index({6, 4}, 6, 8).t();              // (4, 6), values < 6 for dim 1
  Tensor out = gather(x, 1, idx1);
  std::vector<double> expected = gather_reference(x, 1, idx1);
  for (int64_t k = 0; k < out.numel(); ++k) EXPECT_EQ(flat_value(out, k), expected[k]);
  Tensor out0 = gather(x, 0, index);
  std::vector<double> expected0 = gather_reference(x, 0, index);
  for (int64_t k = 0; k < out0.numel(); ++k) EXPECT_EQ(flat_value(out0, k), expected0[k]);
}

TEST(Gather, Errors) {
  Tensor x = random_tensor({3, 4}, DType::Float32, 9);
  expect_error([&] { gather(x, 1, from_vector<int64_t>({0, 4}, {1, 2})); },
               "gather: index 4 is out of range for dim 1 of size 4");
  expect_error([&] { gather(x, 1, from_vector<int64_t>({0, 1})); },
               "gather: index must have as many dims as x; got index [2] and x [3, 4]");
  expect_error([&] { gather(x, 1, zeros({4, 2}, DType::Int64)); },
               "gather: index [4, 2] is larger than x [3, 4] at dim 0 (only dim 1 may be larger)");
  expect_error([&] { gather(x, 0, zeros({1, 1}, DType::Float32)); }, "gather: index must be int64, got float32");
}

template <class T>
void expect_scatter_add_matches(DType dtype, const Shape& x_shape, const Shape& index_shape, const Shape& src_shape,
                                int64_t dim, uint32_t seed) {
  Tensor x = random_tensor(x_shape, dtype, seed);
  Tensor src = random_tensor(src_shape, dtype, seed + 1);
  Tensor index = random_index(index_shape, x_shape[dim], seed + 2);
  Tensor before = x.clone();
  Tensor out = scatter_add(x, dim, index, src);
  std::vector<T> expected = scatter_add_reference<T>(x, dim, index, src);
  ASSERT_EQ(out.shape(), x_shape);
  for (int64_t k = 0; k < out.numel(); ++k) {
    // Same order of additions as the kernel, so equal even in float32.
    EXPECT_EQ(static_cast<T>(flat_value(out, k)), expected[k]) << dtype << " dim " << dim << " at " << k;
    EXPECT_EQ(flat_value(x, k), flat_value(before, k));  // the functional form leaves x alone
  }
}

// x's shape with `extra` more entries along dim: more contributions than targets.
Shape longer_along(Shape shape, int64_t dim, int64_t extra) {
  shape[dim] += extra;
  return shape;
}

TEST(ScatterAdd, TwoAndThreeDimsWithDuplicates) {
  for (int64_t dim : {0, 1}) {
    Shape longer = longer_along({4, 5}, dim, 3);
    expect_scatter_add_matches<double>(DType::Float64, {4, 5}, longer, longer, dim, 10);
    expect_scatter_add_matches<float>(DType::Float32, {4, 5}, {3, 4}, {5, 6}, dim, 20);  // src larger than index
    expect_scatter_add_matches<int64_t>(DType::Int64, {3, 4}, {3, 4}, {3, 4}, dim, 30);
  }
  for (int64_t dim : {0, 1, 2}) {
    Shape longer = longer_along({3, 4, 5}, dim, 3);
    expect_scatter_add_matches<double>(DType::Float64, {3, 4, 5}, longer, longer, dim, 40);
    expect_scatter_add_matches<float>(DType::Float32, {3, 4, 5}, {2, 3, 4}, {3, 3, 5}, dim, 50);
    expect_scatter_add_matches<int32_t>(DType::Int32, {3, 4, 5}, {3, 4, 5}, {3, 4, 5}, dim, 60);
  }
}

TEST(ScatterAdd, InPlaceOnTransposedTarget) {
  Tensor storage = zeros({5, 4}, DType::Float64);
  Tensor x = storage.t();  // (4, 5)
  Tensor src = random_tensor({4, 8}, DType::Float64, 70);
  Tensor index = random_index({4, 8}, 5, 71);
  std::vector<double> expected = scatter_add_reference<double>(x, 1, index, src);
  uint64_t version = x.version();
  Tensor& result = scatter_add_(x, 1, index, src);
  EXPECT_TRUE(result.is_same(x));
  EXPECT_GT(x.version(), version);
  for (int64_t k = 0; k < x.numel(); ++k) EXPECT_EQ(flat_value(x, k), expected[k]);
}

TEST(ScatterAdd, DeterministicAcrossThreads) {
  // Many float32 contributions to few targets, enough work for both threads:
  // the sums must equal the serial row-major reference bit for bit.
  set_num_threads(2);
  for (int64_t dim : {0, 1}) {
    Shape x_shape = dim == 0 ? Shape{8, 512} : Shape{512, 8};
    Shape index_shape = dim == 0 ? Shape{300, 512} : Shape{512, 300};
    Tensor x = zeros(x_shape);
    Tensor src = random_tensor(index_shape, DType::Float32, 80);
    Tensor index = random_index(index_shape, 8, 81);
    std::vector<float> expected = scatter_add_reference<float>(x, dim, index, src);
    Tensor first = scatter_add(x, dim, index, src);
    Tensor second = scatter_add(x, dim, index, src);
    for (int64_t k = 0; k < first.numel(); ++k) {
      ASSERT_EQ(first.data<float>()[k], expected[k]) << "dim " << dim << " at " << k;
      ASSERT_EQ(second.data<float>()[k], expected[k]);
    }
  }
}

TEST(ScatterAdd, Errors) {
  Tensor x = zeros({3, 4});
  Tensor src = ones({3, 4});
  expect_error([&] { scatter_add(x, 0, from_vector<int64_t>({3}, {1, 1}), src); },
               "scatter_add: index 3 is out of range for dim 0 of size 3");
  expect_error([&] { scatter_add(x, 0, zeros({1, 1}, DType::Int64), ones({1, 1}, DType::Float64)); },
               "scatter_add: src must have x's dtype; got float64 for x of float32");
  expect_error([&] { scatter_add(x, 0, zeros({4}, DType::Int64), src); },
               "scatter_add: x, index and src must have the same number of dims");
  expect_error([&] { scatter_add(x, 0, zeros({2, 5}, DType::Int64), src); },
               "scatter_add: index [2, 5] is larger than src [3, 4] at dim 1");
  expect_error([&] { scatter_add(x, 1, zeros({4, 2}, DType::Int64), ones({4, 2})); },
               "scatter_add: index [4, 2] is larger than x [3, 4] at dim 0 (only dim 1 may be larger)");
  expect_error([&] { scatter_add(x, 0, zeros({1, 1}, DType::Int32), src); }, "scatter_add: index must be int64, got int32");
  Tensor expanded = zeros({1, 4}).expand({3, 4});
  expect_error([&] { scatter_add_(expanded, 1, zeros({1, 1}, DType::Int64), src); },
               "scatter_add: x of shape [3, 4] and strides [0, 1] is expanded (stride 0 in dim 0)");
}

TEST(OneHot, ExplicitAndInferredClasses) {
  Tensor labels = from_vector<int64_t>({2, 0, 1, 2, 4, 0}, {2, 3});
  Tensor inferred = one_hot(labels);
  ASSERT_EQ(inferred.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(inferred.dtype(), DType::Int64);
  for (int64_t k = 0; k < 6; ++k) {
    for (int64_t c = 0; c < 5; ++c) {
      EXPECT_EQ(inferred.at<int64_t>({k / 3, k % 3, c}), c == labels.at<int64_t>({k / 3, k % 3}) ? 1 : 0);
    }
  }
  Tensor wide = one_hot(labels.t(), 7);  // transposed labels
  ASSERT_EQ(wide.shape(), (Shape{3, 2, 7}));
  EXPECT_EQ(wide.at<int64_t>({1, 1, 4}), 1);
  EXPECT_EQ(wide.at<int64_t>({1, 1, 6}), 0);
  Tensor scalar = one_hot(scalar_tensor(1, DType::Int64), 3);
  ASSERT_EQ(scalar.shape(), (Shape{3}));
  EXPECT_EQ(scalar.at<int64_t>({1}), 1);
  EXPECT_EQ(one_hot(from_vector<int64_t>({}, {0}), 4).shape(), (Shape{0, 4}));
}

TEST(OneHot, Errors) {
  expect_error([] { one_hot(from_vector<int64_t>({1, -1, 0})); }, "one_hot: labels must be non-negative, got -1");
  expect_error([] { one_hot(from_vector<int64_t>({1, 5, 0}), 3); }, "one_hot: label 5 is out of range for num_classes 3");
  expect_error([] { one_hot(from_vector<int32_t>({1})); }, "one_hot: labels must be int64, got int32");
  expect_error([] { one_hot(from_vector<int64_t>({}, {0})); },
               "one_hot: cannot infer num_classes from an empty labels tensor");
}

TEST(CheckIndexRange, ThrowsTheCallersMessageForTheFirstValueOutOfRange) {
  auto message = [](int64_t v) { return detail::str("op: value ", v, " is out of range"); };
  // Strided (a column of a transposed tensor): values read through the strides.
  Tensor index = from_vector<int64_t>({0, 1, 2, 3, 4, -5}, {2, 3}).t();
  expect_error([&] { check_index_range(index, 4, message); }, "op: value 4 is out of range");
  expect_error([&] { check_index_range(index.narrow(0, 0, 1), 3, message); }, "op: value 3 is out of range");
  EXPECT_NO_THROW(check_index_range(index.narrow(0, 0, 1), 4, message));
  expect_error([&] { check_index_range(from_vector<int64_t>({2, -1}, {2}), 3, message); },
               "op: value -1 is out of range");
  EXPECT_NO_THROW(check_index_range(zeros({0}, {DType::Int64}), 0, message));
  expect_error([&] { check_index_range(zeros({2}), 3, message); },
               "check_index_range: index must be a defined int64 tensor");
}

}  // namespace
}  // namespace kiln
