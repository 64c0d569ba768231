// Dense layouts and channels-last tensors (tensor/memory_layout.h): which
// strided tensors count as dense and in what order, allocation in another
// tensor's layout, and the flat view over a dense tensor's span.
#include "tensor/memory_layout.h"

#include <gtest/gtest.h>

#include "tensor/ops.h"
#include "tensor/quantize.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

using Order = std::vector<int64_t>;

TEST(MemoryLayout, DenseDimOrderOfContiguousPermutedAndGappedTensors) {
  Tensor t = iota_tensor({2, 3, 4, 5});
  EXPECT_EQ(dense_dim_order(t), (Order{0, 1, 2, 3}));
  EXPECT_EQ(dense_dim_order(t.permute({0, 2, 3, 1})), (Order{0, 3, 1, 2}));
  EXPECT_EQ(dense_dim_order(t.transpose(0, 3)), (Order{3, 1, 2, 0}));
  // A slice leaves gaps; a broadcast dim overlaps.
  EXPECT_FALSE(dense_dim_order(t.narrow(3, 0, 4)).has_value());
  EXPECT_FALSE(dense_dim_order(iota_tensor({3, 1}).expand({3, 4})).has_value());
  // Size-1 dims have any stride and stay where they are among the others.
  EXPECT_TRUE(dense_dim_order(iota_tensor({4, 1, 3}).permute({2, 1, 0})).has_value());
  EXPECT_TRUE(dense_dim_order(Tensor::empty({0, 3})).has_value());
}

TEST(MemoryLayout, ChannelsLastAllocationAndDetection) {
  Tensor cl = empty_channels_last({2, 3, 4, 5}, DType::UInt8);
  EXPECT_EQ(cl.shape(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(cl.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(is_channels_last(cl));
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_FALSE(is_channels_last(Tensor::empty({2, 3, 4, 5})));
  // One channel, or one pixel: both layouts at once.
  EXPECT_TRUE(is_channels_last(Tensor::empty({2, 1, 4, 5})));
  EXPECT_TRUE(is_channels_last(Tensor::empty({2, 7, 1, 1})));
  EXPECT_FALSE(is_channels_last(Tensor::empty({3, 4, 5})));
  expect_error([] { empty_channels_last({3, 4, 5}); }, "empty_channels_last: expected an (N, C, H, W) shape");
}

TEST(MemoryLayout, EmptyLikeLayoutFollowsADenseTensorAndOtherwiseIsRowMajor) {
  Tensor cl = empty_channels_last({2, 3, 4, 5}, DType::UInt8);
  Tensor like = empty_like_layout(cl, {DType::Float32, kCPU});
  EXPECT_EQ(like.dtype(), DType::Float32);
  EXPECT_EQ(like.shape(), cl.shape());
  EXPECT_EQ(like.strides(), cl.strides());
  Tensor t = iota_tensor({4, 6}).transpose(0, 1);
  EXPECT_EQ(empty_like_layout(t, {DType::Float32, kCPU}).strides(), (Shape{1, 6}));
  Tensor gapped = iota_tensor({4, 6}).narrow(1, 1, 3);
  EXPECT_TRUE(empty_like_layout(gapped, {DType::Float32, kCPU}).is_contiguous());
}

TEST(MemoryLayout, FlatViewWalksMemoryOrderAndRejectsGaps) {
  Tensor nhwc = iota_tensor({2, 4, 5, 3});  // values in memory order
  Tensor cl = nhwc.permute({0, 3, 1, 2});   // (N, C, H, W), channels-last
  Tensor flat = flat_view(cl, "test op");
  ASSERT_EQ(flat.shape(), (Shape{120}));
  EXPECT_TRUE(equal(flat, nhwc.reshape({120})));
  // Shares storage: a write through the flat view is seen through cl.
  flat.fill_(Scalar(7.0));
  EXPECT_EQ(cl.at<int64_t>({1, 2, 3, 4}), 7);
  // Per-tensor params come along; per-channel ones would lose their axis.
  Tensor q = ops::quantize_per_tensor(Tensor::empty({2, 3}).fill_(Scalar(0.5)), 0.1, 3, DType::UInt8);
  EXPECT_EQ(flat_view(q.t(), "test op").impl()->quant_params(), q.impl()->quant_params());
  Tensor pc = ops::quantize_per_channel(Tensor::empty({2, 3}).fill_(Scalar(0.5)), {0.1, 0.2}, {0, 0}, 0, DType::Int8);
  expect_error([&] { flat_view(pc, "test op"); }, "test op: a tensor quantized per channel has no flat view");
  expect_error([] { flat_view(iota_tensor({4, 6}).narrow(1, 1, 3), "test op"); },
               "test op: expected a tensor whose elements fill their memory densely, got shape [4, 3] with strides "
               "[6, 1]");
}

}  // namespace
}  // namespace kiln
