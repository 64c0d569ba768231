// Views share storage and compute sizes/strides/offsets exactly as PyTorch.
#include <gtest/gtest.h>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

TEST(View, TransposeSwapsSizesAndStrides) {
  Tensor x = iota_tensor({2, 3, 4});
  Tensor y = x.transpose(0, 2);
  EXPECT_EQ(y.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(y.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(y.is_contiguous());
  EXPECT_EQ(y.storage(), x.storage());
  EXPECT_EQ(y.at<int>({3, 2, 1}), 1 * 12 + 2 * 4 + 3);
}

TEST(View, ViewKeepsStorageAndInfersMinusOne) {
  Tensor x = iota_tensor({2, 3, 4});
  Tensor y = x.view({6, -1});
  EXPECT_EQ(y.shape(), (Shape{6, 4}));
  EXPECT_EQ(y.strides(), (Shape{4, 1}));
  EXPECT_EQ(y.at<int>({5, 3}), 23);
}

TEST(View, ViewOfTransposedFailsButReshapeCopies) {
  Tensor x = iota_tensor({2, 3});
  Tensor xt = x.t();
  expect_error([&] { xt.view({6}); }, "view: cannot view a tensor of shape [3, 2] and strides [1, 3] as shape [6]");
  Tensor flat = xt.reshape({6});
  EXPECT_NE(flat.storage(), x.storage());
  // xt = [[0,3],[1,4],[2,5]] flattened row-major.
  std::vector<int> expected{0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(flat.at<int>({i}), expected[i]);
}

TEST(View, ViewSplitsNonContiguousChunks) {
  // A (4, 6) tensor sliced to columns 0..2 is (4, 3) with strides (6, 1):
  // viewing as (2, 2, 3) only splits the outer dim, which is allowed.
  Tensor x = iota_tensor({4, 6}).slice(1, 0, 3);
  Tensor y = x.view({2, 2, 3});
  EXPECT_EQ(y.strides(), (Shape{12, 6, 1}));
  EXPECT_EQ(y.at<int>({1, 1, 2}), 3 * 6 + 2);
}

TEST(View, SliceSelectNarrow) {
  Tensor x = iota_tensor({5, 4});
  Tensor s = x.slice(0, 1, -1, 2);  // rows 1 and 3
  EXPECT_EQ(s.shape(), (Shape{2, 4}));
  EXPECT_EQ(s.storage_offset(), 4);
  EXPECT_EQ(s.at<int>({1, 2}), 3 * 4 + 2);
  Tensor row = x.select(0, -1);
  EXPECT_EQ(row.shape(), (Shape{4}));
  EXPECT_EQ(row.at<int>({0}), 16);
  Tensor n = x.narrow(1, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{5, 2}));
  EXPECT_EQ(n.at<int>({2, 1}), 10);
}

TEST(View, ExpandUsesZeroStrides) {
  Tensor x = iota_tensor({3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.at<int>({1, 2, 3}), 2);
  expect_error([&] { x.expand({3, 2, 4}); }, "expand: cannot expand shape [3, 1] to [3, 2, 4]");
}

TEST(View, SqueezeUnsqueezeFlattenPermute) {
  Tensor x = iota_tensor({2, 1, 3});
  EXPECT_EQ(x.squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 1, 3, 1}));
  EXPECT_EQ(x.flatten().shape(), (Shape{6}));
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{3, 2, 1}));
  EXPECT_EQ(p.at<int>({2, 1, 0}), 5);
  expect_error([&] { x.permute({0, 0, 1}); }, "permute: dim 0 repeated in [0, 0, 1]");
}

TEST(View, BadDimsNameTheOp) {
  Tensor x = iota_tensor({2, 3});
  expect_error([&] { x.transpose(0, 2); }, "transpose: dim 2 is out of range for a tensor of 2 dimensions");
  expect_error([&] { x.select(1, 3); }, "select: index 3 is out of range for dim 1 of size 3");
  expect_error([&] { x.view({4, 2}); }, "view: shape [4, 2] is invalid for input of size 6");
  expect_error([&] { x.narrow(0, 1, 2); }, "narrow: start 1 and length 2 are out of range for dim 0 of size 2");
}

TEST(Copy, CopyConvertsAndBroadcasts) {
  Tensor src = iota_tensor({3});  // int32 0,1,2
  Tensor dst = Tensor::empty({2, 3}, DType::Float64);
  dst.copy_(src);
  EXPECT_EQ(dst.at<double>({1, 2}), 2.0);
  Tensor t = iota_tensor({3, 4}).t().contiguous();
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.at<int>({3, 2}), 11);
  Tensor h = iota_tensor({4}).to(DType::Float16);
  EXPECT_EQ(h.at<float>({3}), 3.0f);
  uint64_t before = dst.version();
  dst.copy_(src);
  EXPECT_GT(dst.version(), before);
}

TEST(Copy, TransposingCopiesWalkTilesCorrectly) {
  // Odd sizes leave partial tiles on both edges; the 3-d permute merges to a
  // 2-d transposing walk; float64 and uint8 cover other element widths.
  for (Shape shape : {Shape{37, 53}, Shape{64, 64}, Shape{9, 8}}) {
    Tensor x = iota_tensor(shape);
    Tensor y = x.t().contiguous();
    for (int64_t i = 0; i < shape[1]; ++i)
      for (int64_t j = 0; j < shape[0]; ++j) ASSERT_EQ(y.at<int>({i, j}), j * shape[1] + i);
  }
  Tensor cube = iota_tensor({6, 5, 40});
  Tensor p = cube.permute({2, 0, 1}).contiguous();  // (40, 6, 5): dims 0,1 of the input merge
  for (int64_t k = 0; k < 40; ++k)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 5; ++j) ASSERT_EQ(p.at<int>({k, i, j}), (i * 5 + j) * 40 + k);
  Tensor d = iota_tensor({20, 30}).to(DType::Float64);
  Tensor dt = Tensor::empty({30, 20}, DType::Float64);
  dt.copy_(d.t());
  EXPECT_EQ(dt.at<double>({29, 19}), 19 * 30 + 29);
  Tensor u = iota_tensor({16, 12}).to(DType::UInt8).t().contiguous();
  EXPECT_EQ(u.at<int>({11, 15}), (15 * 12 + 11) % 256);
}

}  // namespace
}  // namespace kiln
