// cat, stack, split and chunk against hand-computed values and torch's sizes.
#include <gtest/gtest.h>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

// Element `idx` of any-rank `t`, read through its strides as double.
double value(const Tensor& t, const Shape& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.stride(static_cast<int64_t>(d));
  return visit_dtype(t.dtype(), [&]<class T>() {
    return static_cast<double>(static_cast<ComputeType<T>>(static_cast<const T*>(t.data_ptr())[off]));
  });
}

// Calls fn(index) for every index of `shape` in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const Shape&)>& fn) {
  if (shape_numel(shape) == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    fn(idx);
    int64_t d = static_cast<int64_t>(shape.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Checks cat(parts, dim) element by element: along `dim` the parts follow
// one another, so position k belongs to the part whose range holds k.
void expect_cat_values(const Tensor& out, const std::vector<Tensor>& parts, int64_t dim) {
  for_each_index(out.shape(), [&](const Shape& idx) {
    Shape src = idx;
    size_t p = 0;
    while (src[dim] >= parts[p].size(dim)) src[dim] -= parts[p++].size(dim);
    EXPECT_EQ(value(out, idx), value(parts[p], src)) << "at " << ::testing::PrintToString(idx);
  });
}

Tensor plus(Tensor t, int32_t k) {  // t + k for an int32 tensor made by iota_tensor
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] += k;
  return t;
}

TEST(Cat, AlongEachDimIncludingNegative) {
  Tensor a = iota_tensor({2, 3});
  Tensor rows = plus(iota_tensor({1, 3}), 100);
  Tensor cols = plus(iota_tensor({2, 4}), 200);
  for (int64_t dim : {0, -2}) {
    Tensor out = cat({a, rows}, dim);
    ASSERT_EQ(out.shape(), (Shape{3, 3}));
    expect_cat_values(out, {a, rows}, 0);
  }
  for (int64_t dim : {1, -1}) {
    Tensor out = cat({a, cols}, dim);
    ASSERT_EQ(out.shape(), (Shape{2, 7}));
    EXPECT_EQ(out.dtype(), DType::Int32);
    EXPECT_EQ(out.at<int>({1, 2}), 5);
    EXPECT_EQ(out.at<int>({1, 3}), 204);
    expect_cat_values(out, {a, cols}, 1);
  }
}

TEST(Cat, ThreeDimsThreeInputs) {
  std::vector<Tensor> parts{iota_tensor({2, 1, 4}), plus(iota_tensor({2, 3, 4}), 10), plus(iota_tensor({2, 2, 4}), 50)};
  Tensor out = cat(parts, 1);
  ASSERT_EQ(out.shape(), (Shape{2, 6, 4}));
  EXPECT_TRUE(out.is_contiguous());
  expect_cat_values(out, parts, 1);
  Tensor single = cat({parts[1].transpose(1, 2)}, 1);  // one input: a contiguous copy
  ASSERT_EQ(single.shape(), (Shape{2, 4, 3}));
  EXPECT_TRUE(single.is_contiguous());
  expect_cat_values(single, {parts[1].transpose(1, 2)}, 1);
}

TEST(Cat, PromotesMixedDtypes) {
  Tensor i = iota_tensor({2, 2});                                   // int32
  Tensor f = from_vector<float>({0.5f, 1.5f, 2.5f, 3.5f}, {2, 2});  // float32
  Tensor out = cat({i, f}, 0);
  EXPECT_EQ(out.dtype(), DType::Float32);
  std::vector<float> expected{0, 1, 2, 3, 0.5f, 1.5f, 2.5f, 3.5f};
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(out.at<float>({k / 2, k % 2}), expected[k]);

  Tensor l = from_vector<int64_t>({int64_t{1} << 40}, {1, 1});
  EXPECT_EQ(cat({i.narrow(0, 0, 1).narrow(1, 0, 1), l}, 0).dtype(), DType::Int64);
  EXPECT_EQ(cat({i.narrow(0, 0, 1).narrow(1, 0, 1), l}, 0).at<int64_t>({1, 0}), int64_t{1} << 40);
  Tensor b = from_vector<bool>({true, false}, {1, 2});
  Tensor u = from_vector<uint8_t>({7, 200}, {1, 2});
  Tensor bu = cat({b, u}, 0);
  EXPECT_EQ(bu.dtype(), DType::UInt8);
  EXPECT_EQ(bu.at<int>({0, 0}), 1);
  EXPECT_EQ(bu.at<int>({1, 1}), 200);
}

TEST(Cat, NonContiguousInputs) {
  Tensor x = iota_tensor({3, 4});
  Tensor xt = x.t();                      // (4, 3), strides (1, 4)
  Tensor stepped = iota_tensor({8, 3}).slice(0, 1, 8, 2);  // rows 1, 3, 5, 7
  Tensor out = cat({xt, stepped}, 0);
  ASSERT_EQ(out.shape(), (Shape{8, 3}));
  EXPECT_EQ(out.at<int>({0, 1}), 4);   // xt[0][1] = x[1][0]
  EXPECT_EQ(out.at<int>({3, 2}), 11);  // xt[3][2] = x[2][3]
  EXPECT_EQ(out.at<int>({5, 0}), 9);   // row 3 of the iota
  expect_cat_values(out, {xt, stepped}, 0);
  Tensor wide = cat({xt, xt.slice(1, 0, 3, 2)}, 1);
  ASSERT_EQ(wide.shape(), (Shape{4, 5}));
  expect_cat_values(wide, {xt, xt.slice(1, 0, 3, 2)}, 1);
}

TEST(Cat, CopiesAndSkipsEmptyOneDimInputs) {
  Tensor a = iota_tensor({2, 3});
  Tensor out = cat({Tensor::empty({0}, DType::Float64), a}, 1);
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(out.dtype(), DType::Float64);  // the empty input still promotes
  expect_cat_values(out, {a}, 1);
  Tensor same = cat({a});
  EXPECT_NE(same.storage(), a.storage());
  Tensor with_empty_rows = cat({a, Tensor::empty({0, 3}, DType::Int32), a}, 0);
  EXPECT_EQ(with_empty_rows.shape(), (Shape{4, 3}));
  EXPECT_EQ(with_empty_rows.at<int>({3, 2}), 5);
}

TEST(Cat, Errors) {
  expect_error([] { cat({}); }, "cat: expected a non-empty list of tensors");
  Tensor a = iota_tensor({2, 3});
  expect_error([&] { cat({a, iota_tensor({2, 4})}, 0); },
               "cat: sizes of tensors must match except in dim 0; got [2, 3] and [2, 4] at dim 1 (tensor 1)");
  expect_error([&] { cat({a, a, iota_tensor({3, 3})}, 1); },
               "cat: sizes of tensors must match except in dim 1; got [2, 3] and [3, 3] at dim 0 (tensor 2)");
  expect_error([&] { cat({a, iota_tensor({2, 3, 1})}, 0); },
               "cat: tensors must have the same number of dims; got [2, 3] and [2, 3, 1] (tensor 1)");
  expect_error([&] { cat({a, iota_tensor({})}, 0); }, "cat: zero-dimensional tensor (tensor 1) cannot be concatenated");
  expect_error([&] { cat({a, a}, 2); }, "cat: dim 2 is out of range for a tensor of 2 dimensions");
  expect_error([&] { cat({a, Tensor()}, 0); }, "cat: tensor 1 is undefined");
}

TEST(Stack, EachDim) {
  Tensor a = iota_tensor({2, 3});
  Tensor b = plus(iota_tensor({2, 3}), 100);
  Shape expected_shapes[] = {{2, 2, 3}, {2, 2, 3}, {2, 3, 2}};
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    int64_t d = dim < 0 ? dim + 3 : dim;
    Tensor out = stack({a, b}, dim);
    ASSERT_EQ(out.shape(), expected_shapes[d]) << "dim " << dim;
    for_each_index(out.shape(), [&](const Shape& idx) {
      Shape src = idx;
      int64_t which = src[d];
      src.erase(src.begin() + d);
      EXPECT_EQ(value(out, idx), value(which == 0 ? a : b, src));
    });
  }
  Tensor mixed = stack({a, from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).t().t()}, 0);
  EXPECT_EQ(mixed.dtype(), DType::Float64);
  EXPECT_EQ(mixed.at<double>({1, 1, 2}), 6.0);
  EXPECT_EQ(stack({a.t(), a.t()}, 1).at<int>({2, 1, 1}), 5);  // (3, 2, 2), transposed inputs
}

TEST(Stack, Errors) {
  expect_error([] { stack({}); }, "stack: expected a non-empty list of tensors");
  expect_error([] { stack({iota_tensor({2, 3}), iota_tensor({3, 2})}); }, "stack: shapes [2, 3] and [3, 2] differ (tensor 1)");
  expect_error([] { stack({iota_tensor({2, 3})}, 3); }, "stack: dim 3 is out of range for a tensor of 3 dimensions");
}

TEST(Split, BySizeAreViews) {
  Tensor x = iota_tensor({5, 2});
  std::vector<Tensor> parts = split(x, 2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 2}));
  EXPECT_EQ(parts[2].shape(), (Shape{1, 2}));
  EXPECT_EQ(parts[2].at<int>({0, 1}), 9);
  for (const Tensor& p : parts) EXPECT_EQ(p.storage(), x.storage());
  EXPECT_EQ(parts[1].storage_offset(), 4);
  parts[1].copy_(full({2, 2}, 42, DType::Int32));  // writes through to x
  EXPECT_EQ(x.at<int>({3, 0}), 42);
  EXPECT_EQ(x.at<int>({4, 0}), 8);

  std::vector<Tensor> cols = split(iota_tensor({2, 7}), 3, -1);
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(cols[2].shape(), (Shape{2, 1}));
  EXPECT_EQ(cols[1].at<int>({1, 2}), 12);
  EXPECT_EQ(split(iota_tensor({3}), 5).size(), 1u);
  std::vector<Tensor> empty = split(Tensor::empty({0, 2}), 4);
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].shape(), (Shape{0, 2}));
}

TEST(Split, BySizesList) {
  Tensor x = iota_tensor({2, 5});
  std::vector<Tensor> parts = split(x, std::vector<int64_t>{1, 0, 3, 1}, 1);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(parts[2].shape(), (Shape{2, 3}));
  EXPECT_EQ(parts[2].at<int>({1, 0}), 6);
  EXPECT_EQ(parts[3].at<int>({1, 0}), 9);
  EXPECT_EQ(parts[3].storage(), x.storage());
}

TEST(Split, Errors) {
  Tensor x = iota_tensor({4, 2});
  expect_error([&] { split(x, std::vector<int64_t>{1, 2}); }, "split: sizes [1, 2] sum to 3 but dim 0 has size 4");
  expect_error([&] { split(x, std::vector<int64_t>{5, -1}); }, "split: sizes must be non-negative, got [5, -1]");
  expect_error([&] { split(x, 0); }, "split: split_size must be positive, got 0 for dim 0 of size 4");
  expect_error([&] { split(x, 1, 2); }, "split: dim 2 is out of range");
  expect_error([&] { split(iota_tensor({}), 1); }, "split: cannot split a 0-dim tensor");
}

std::vector<int64_t> chunk_sizes(int64_t n, int64_t chunks) {
  std::vector<int64_t> sizes;
  for (const Tensor& t : chunk(iota_tensor({3, n}), chunks, 1)) sizes.push_back(t.size(1));
  return sizes;
}

TEST(Chunk, SizesAsTorch) {
  EXPECT_EQ(chunk_sizes(5, 3), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(chunk_sizes(6, 4), (std::vector<int64_t>{2, 2, 2}));  // three chunks, not four
  EXPECT_EQ(chunk_sizes(6, 3), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(chunk_sizes(4, 6), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(chunk_sizes(7, 1), (std::vector<int64_t>{7}));
  EXPECT_EQ(chunk_sizes(0, 3), (std::vector<int64_t>{0, 0, 0}));
  Tensor x = iota_tensor({6, 2});
  std::vector<Tensor> parts = chunk(x, 4);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].storage(), x.storage());
  EXPECT_EQ(parts[2].at<int>({1, 1}), 11);
  expect_error([&] { chunk(x, 0); }, "chunk: expected chunks > 0, got 0");
  expect_error([&] { chunk(x, 2, -3); }, "chunk: dim -3 is out of range");
}

}  // namespace
}  // namespace kiln
