// Note [Quantization parameters through views]: every view keeps a
// per-tensor grid; a per-channel axis is renumbered, sliced or refused, and
// the test that the renumbering is right is that dequantizing the view gives
// the view of the dequantized tensor. Also relu and max pooling passing a
// float tensor's grid on (tensor/quantized_grid.h).
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "tensor/ops.h"
#include "tensor/quantize.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

Tensor random_floats(const Shape& shape, uint64_t seed) {
  std::vector<double> v = pseudo_random(shape_numel(shape), -3, 3, seed);
  return from_vector<float>(std::vector<float>(v.begin(), v.end()), shape);
}

const QuantParams& params(const Tensor& t) {
  EXPECT_NE(t.impl()->quant_params(), nullptr);
  return *t.impl()->quant_params();
}

// x (2, 3, 4, 5) quantized per channel along dim 1 with distinct grids.
Tensor per_channel_tensor() {
  return ops::quantize_per_channel(random_floats({2, 3, 4, 5}, 1), {0.01, 0.02, 0.05}, {-3, 0, 7}, 1,
                                   DType::Int8);
}

using View = std::function<Tensor(const Tensor&)>;

// The view of a quantized tensor stands on the grid its elements had.
void expect_view_commutes_with_dequantize(const Tensor& q, const View& view, const char* what) {
  Tensor v = view(q);
  EXPECT_TRUE(equal(ops::dequantize(v), view(ops::dequantize(q)).contiguous())) << what;
}

TEST(QuantizedViews, PerTensorParamsGoThroughEveryView) {
  Tensor q = ops::quantize_per_tensor(random_floats({2, 3, 4}, 2), 0.05, 10, DType::UInt8);
  Tensor on_grid = random_floats({2, 3, 4}, 3);  // a float tensor on a grid keeps it too
  on_grid.impl()->set_quant_params(q.impl()->quant_params());
  const View views[] = {
      [](const Tensor& t) { return t.view({6, 4}); },
      [](const Tensor& t) { return t.reshape({4, 6}); },
      [](const Tensor& t) { return t.flatten(); },
      [](const Tensor& t) { return t.permute({2, 0, 1}); },
      [](const Tensor& t) { return t.transpose(0, 2); },
      [](const Tensor& t) { return t.select(1, 2).t(); },
      [](const Tensor& t) { return t.slice(2, 1, 4, 2); },
      [](const Tensor& t) { return t.narrow(0, 1, 1).squeeze(); },
      [](const Tensor& t) { return t.narrow(0, 1, 1).squeeze(0); },
      [](const Tensor& t) { return t.unsqueeze(1); },
      [](const Tensor& t) { return t.unsqueeze(0).expand({5, 2, 3, 4}); },
      [](const Tensor& t) { return t.as_strided({3, 2}, {1, 3}, 2); },
      [](const Tensor& t) { return t.detach(); },
      [](const Tensor& t) { return t.transpose(0, 1).reshape({-1}); },  // a copy, then a view
  };
  for (const Tensor& t : {q, on_grid}) {
    for (const auto& view : views) {
      Tensor v = view(t);
      EXPECT_EQ(v.impl()->quant_params(), t.impl()->quant_params());
    }
  }
  for (const auto& view : views) expect_view_commutes_with_dequantize(q, view, "per tensor");
}

TEST(QuantizedViews, PerChannelAxisFollowsTheDims) {
  Tensor q = per_channel_tensor();
  struct Case {
    const char* what;
    View view;
    int64_t axis;
  };
  const Case cases[] = {
      {"permute", [](const Tensor& t) { return t.permute({0, 2, 3, 1}); }, 3},
      {"permute negative", [](const Tensor& t) { return t.permute({-1, -3, 0, 2}); }, 1},
      {"transpose", [](const Tensor& t) { return t.transpose(0, 1); }, 0},
      {"transpose others", [](const Tensor& t) { return t.transpose(2, 3); }, 1},
      {"select before", [](const Tensor& t) { return t.select(0, 1); }, 0},
      {"select after", [](const Tensor& t) { return t.select(2, 3); }, 1},
      {"unsqueeze before", [](const Tensor& t) { return t.unsqueeze(0); }, 2},
      {"unsqueeze at", [](const Tensor& t) { return t.unsqueeze(1); }, 2},
      {"unsqueeze after", [](const Tensor& t) { return t.unsqueeze(-1); }, 1},
      {"squeeze", [](const Tensor& t) { return t.narrow(0, 0, 1).squeeze(); }, 0},
      {"squeeze dim", [](const Tensor& t) { return t.narrow(3, 0, 1).squeeze(3); }, 1},
      {"view keeping the axis", [](const Tensor& t) { return t.view({2, 3, 20}); }, 1},
      {"view splitting others", [](const Tensor& t) { return t.view({1, 2, 3, 2, 10}); }, 2},
      {"flatten the rest", [](const Tensor& t) { return t.flatten(2); }, 1},
      {"reshape of a copy", [](const Tensor& t) { return t.transpose(2, 3).reshape({2, 3, 20}); }, 1},
      {"expand", [](const Tensor& t) { return t.expand({4, 2, 3, 4, 5}); }, 2},
      {"as_strided identity", [](const Tensor& t) { return t.as_strided(t.shape(), t.strides(), t.storage_offset()); },
       1},
      {"detach", [](const Tensor& t) { return t.detach(); }, 1},
  };
  for (const Case& c : cases) {
    Tensor v = c.view(q);
    EXPECT_EQ(params(v).scheme, QuantParams::Scheme::PerChannel) << c.what;
    EXPECT_EQ(params(v).axis, c.axis) << c.what;
    EXPECT_EQ(params(v).scales, params(q).scales) << c.what;
    expect_view_commutes_with_dequantize(q, c.view, c.what);
  }
  EXPECT_EQ(params(q).axis, 1);  // the base is untouched
}

TEST(QuantizedViews, SlicingTheChannelAxisSlicesTheParams) {
  Tensor q = per_channel_tensor();
  Tensor s = q.slice(1, 1, 3);
  EXPECT_EQ(params(s).scales, (std::vector<double>{0.02, 0.05}));
  EXPECT_EQ(params(s).zero_points, (std::vector<int64_t>{0, 7}));
  Tensor stepped = q.slice(1, 0, 3, 2);
  EXPECT_EQ(params(stepped).scales, (std::vector<double>{0.01, 0.05}));
  EXPECT_EQ(params(stepped).zero_points, (std::vector<int64_t>{-3, 7}));
  Tensor n = q.narrow(1, 2, 1);
  EXPECT_EQ(params(n).scales, (std::vector<double>{0.05}));
  Tensor other = q.slice(2, 1, 3);
  EXPECT_EQ(other.impl()->quant_params(), q.impl()->quant_params());
  expect_view_commutes_with_dequantize(q, [](const Tensor& t) { return t.slice(1, 0, 3, 2); }, "stepped");
  expect_view_commutes_with_dequantize(q, [](const Tensor& t) { return t.narrow(1, 1, 2).transpose(1, 3); },
                                       "narrow then transpose");
}

TEST(QuantizedViews, ExpandingOneChannelRepeatsItsGrid) {
  Tensor q = ops::quantize_per_channel(random_floats({1, 4}, 5), {0.25}, {3}, 0, DType::UInt8);
  Tensor e = q.expand({3, 4});
  EXPECT_EQ(params(e).axis, 0);
  EXPECT_EQ(params(e).scales, (std::vector<double>{0.25, 0.25, 0.25}));
  EXPECT_EQ(params(e).zero_points, (std::vector<int64_t>{3, 3, 3}));
  expect_view_commutes_with_dequantize(q, [](const Tensor& t) { return t.expand({3, 4}); }, "expand 1 channel");
}

TEST(QuantizedViews, ViewsThatDestroyTheChannelAxisAreErrors) {
  Tensor q = per_channel_tensor();
  expect_error([&] { q.select(1, 0); }, "select: dim 1 is the channel axis of per-channel quantization parameters");
  expect_error([&] { q.view({6, 20}); }, "view: shape [6, 20] merges or splits dim 1 of shape [2, 3, 4, 5]");
  expect_error([&] { q.reshape({2, 60}); }, "reshape: shape [2, 60] merges or splits dim 1");
  expect_error([&] { q.flatten(); }, "flatten: shape [120] merges or splits dim 1");
  expect_error([&] { q.flatten(0, 1); }, "flatten: shape [6, 4, 5] merges");
  expect_error([&] { q.as_strided({3, 2}, {1, 3}, 0); },
               "as_strided: a tensor with per-channel quantization parameters (axis 1) can only be viewed with its "
               "own sizes");
  Tensor one = q.narrow(1, 0, 1);  // a single channel of size 1
  expect_error([&] { one.squeeze(); }, "squeeze: dim 1 is the channel axis");
  expect_error([&] { one.squeeze(1); }, "squeeze: dim 1 is the channel axis");
  // The same rules for a float tensor carrying per-channel params.
  Tensor f = random_floats({2, 3, 4, 5}, 9);
  f.impl()->set_quant_params(q.impl()->quant_params());
  expect_error([&] { f.select(1, 2); }, "select: dim 1 is the channel axis");
  EXPECT_EQ(params(f.transpose(1, 3)).axis, 3);
}

// ---- relu and max pooling pass a float grid on --------------------------------------

TEST(QuantizedGrid, ReluAndMaxPoolingKeepAFloatTensorsPerTensorGrid) {
  Tensor x = random_floats({1, 2, 4, 4}, 4);
  auto grid = ops::quantize_per_tensor(x, 0.1, 0, DType::UInt8).impl()->quant_params();
  x.impl()->set_quant_params(grid);
  EXPECT_EQ(ops::relu(x).impl()->quant_params(), grid);
  EXPECT_EQ(ops::max_pool2d(x, {.kernel = 2}).impl()->quant_params(), grid);
  EXPECT_EQ(ops::max_pool2d_with_indices(x, {.kernel = 2}).values.impl()->quant_params(), grid);
  // Ops that leave the grid (average pooling, sigmoid) and tensors without one give plain outputs.
  EXPECT_EQ(ops::avg_pool2d(x, {.kernel = 2}).impl()->quant_params(), nullptr);
  EXPECT_EQ(ops::sigmoid(x).impl()->quant_params(), nullptr);
  EXPECT_EQ(ops::relu(random_floats({3}, 1)).impl()->quant_params(), nullptr);
  // A per-channel grid is not passed on by relu, and pooling reads through it.
  Tensor pc = random_floats({1, 2, 4, 4}, 6);
  pc.impl()->set_quant_params(ops::quantize_per_channel(pc, {0.1, 0.2}, {0, 0}, 1, DType::Int8).impl()->quant_params());
  EXPECT_EQ(ops::relu(pc).impl()->quant_params(), nullptr);
  Tensor plain = pc.clone();
  plain.impl()->set_quant_params(nullptr);
  EXPECT_TRUE(equal(ops::max_pool2d(pc, {.kernel = 2}), ops::max_pool2d(plain, {.kernel = 2})));
}

TEST(QuantizedGrid, QuantizedReluClampsAtTheZeroPoint) {
  Tensor x = random_floats({2, 3, 5}, 8);
  Tensor q = ops::quantize_per_tensor(x, 0.05, 100, DType::UInt8);
  Tensor r = ops::relu(q);
  EXPECT_EQ(r.impl()->quant_params(), q.impl()->quant_params());
  for (int64_t k = 0; k < q.numel(); ++k) EXPECT_EQ(flat_value(r, k), std::max(flat_value(q, k), 100.0));
  // relu commutes with dequantize.
  EXPECT_TRUE(equal(ops::dequantize(r), ops::relu(ops::dequantize(q))));

  Tensor pc = ops::quantize_per_channel(x, {0.1, 0.02, 0.05}, {-5, 0, 20}, 1, DType::Int8);
  Tensor rp = ops::relu(pc);
  EXPECT_EQ(rp.impl()->quant_params(), pc.impl()->quant_params());
  EXPECT_TRUE(equal(ops::dequantize(rp), ops::relu(ops::dequantize(pc))));

  Tensor in_place = q.clone();
  ops::relu_(in_place);
  EXPECT_TRUE(equal(ops::int_repr(in_place), ops::int_repr(r)));
  Tensor pc_in_place = pc.clone();
  ops::relu_(pc_in_place);
  EXPECT_TRUE(equal(ops::int_repr(pc_in_place), ops::int_repr(rp)));
}

}  // namespace
}  // namespace kiln
