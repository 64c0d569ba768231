// layer_norm and its backward against the float64 references of
// tests/tensor/norm_reference.h.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/norm_reference.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
using namespace kiln::norm_testing;
namespace {

// ---- layer norm tests --------------------------------------------------------------

struct LayerCase {
  Shape shape;
  Shape normalized;
};

// Over 1 and 2 trailing dims; K = 5000 spans several summation blocks, and
// 300 rows of 70 several row blocks of the weight gradient.
const std::vector<LayerCase> kLayerCases = {{{2, 3, 4}, {4}},    {{2, 3, 4}, {3, 4}}, {{5, 6}, {6}},
                                            {{3, 5000}, {5000}}, {{300, 70}, {70}},   {{7}, {7}}};

TEST(LayerNorm, ForwardMatchesReference) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    double tol = dtype == DType::Float64 ? 1e-12 : 2e-5;
    for (const LayerCase& lc : kLayerCases) {
      for (bool affine : {false, true}) {
        int64_t k = shape_numel(lc.normalized);
        std::string what = std::string(dtype_name(dtype)) + " " + ::testing::PrintToString(lc.shape) + " over " +
                           ::testing::PrintToString(lc.normalized) + (affine ? " affine" : "");
        Tensor x = make(pseudo_random(shape_numel(lc.shape), -3, 5, 40), lc.shape, dtype);
        Values w = affine ? pseudo_random(k, 0.5, 2, 41) : Values{};
        Values b = affine ? pseudo_random(k, -1, 1, 42) : Values{};
        LayerNormResult r = layer_norm(x, lc.normalized, affine ? make(w, lc.normalized, dtype) : Tensor(),
                                       affine ? make(b, lc.normalized, dtype) : Tensor(), 1e-5);
        LayerRef want = layer_norm_ref(values_of(x), k, w, b, 1e-5);
        Shape stats_shape = lc.shape;
        for (size_t i = lc.shape.size() - lc.normalized.size(); i < lc.shape.size(); ++i) stats_shape[i] = 1;
        EXPECT_EQ(r.output.shape(), lc.shape) << what;
        EXPECT_EQ(r.mean.shape(), stats_shape) << what;
        EXPECT_EQ(r.rstd.shape(), stats_shape) << what;
        EXPECT_EQ(r.mean.dtype(), dtype) << what;
        expect_close(values_of(r.output), want.out, tol, tol, what + " output");
        expect_close(values_of(r.mean), want.mean, tol, tol, what + " mean");
        expect_close(values_of(r.rstd), want.rstd, tol, tol, what + " rstd");
      }
    }
  }
}

TEST(LayerNorm, NonContiguousInputAndGrad) {
  Tensor x = make(pseudo_random(120, -2, 2, 43), {4, 5, 6}, DType::Float32).transpose(0, 2);  // (6, 5, 4)
  Tensor dy = make(pseudo_random(120, -1, 1, 44), {6, 4, 5}, DType::Float32).transpose(1, 2);
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(dy.is_contiguous());
  Values w = pseudo_random(20, 0.5, 2, 45), b = pseudo_random(20, -1, 1, 46);
  Tensor wt = make(w, {5, 4}, DType::Float32);
  LayerNormResult r = layer_norm(x, {5, 4}, wt, make(b, {5, 4}, DType::Float32), 1e-5);
  LayerRef want = layer_norm_ref(values_of(x), 20, w, b, 1e-5);
  expect_close(values_of(r.output), want.out, 2e-5, 2e-5, "output");
  LayerNormGrads g = layer_norm_backward(dy, x, {5, 4}, r.mean, r.rstd, wt, {true, true, true});
  Grads gw = layer_norm_backward_ref(values_of(dy), values_of(x), 20, w, want.mean, want.rstd);
  EXPECT_EQ(g.grad_weight.shape(), (Shape{5, 4}));
  expect_close(values_of(g.grad_input), gw.x, 1e-4, 1e-5, "grad_input");
  expect_close(values_of(g.grad_weight), gw.w, 1e-4, 1e-5, "grad_weight");
  expect_close(values_of(g.grad_bias), gw.b, 1e-4, 1e-5, "grad_bias");
}

TEST(LayerNorm, LargeMeanKeepsTheVariance) {
  for (const LargeMeanCase& lm : kLargeMeanCases) {
    Values v = pseudo_random(4 * 3000, lm.mean - 1.7, lm.mean + 1.7, 47);
    Tensor x = make(v, {4, 3000}, lm.dtype);
    LayerNormResult r = layer_norm(x, {3000}, Tensor(), Tensor(), 0.0);
    LayerRef want = layer_norm_ref(values_of(x), 3000, {}, {}, 0.0);
    std::string what(dtype_name(lm.dtype));
    expect_close(values_of(r.rstd), want.rstd, lm.rtol, 0, what + " rstd");
    expect_close(values_of(r.mean), want.mean, 1e-7, 0, what + " mean");
    expect_close(values_of(r.output), want.out, 0, lm.atol, what + " output");
  }
}

TEST(LayerNorm, BackwardMatchesReference) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    double tol = dtype == DType::Float64 ? 1e-10 : 1e-4;
    for (const LayerCase& lc : kLayerCases) {
      for (bool affine : {false, true}) {
        int64_t k = shape_numel(lc.normalized);
        std::string what = std::string(dtype_name(dtype)) + " " + ::testing::PrintToString(lc.shape) + " over " +
                           ::testing::PrintToString(lc.normalized) + (affine ? " affine" : "");
        Tensor x = make(pseudo_random(shape_numel(lc.shape), -3, 5, 48), lc.shape, dtype);
        Tensor dy = make(pseudo_random(shape_numel(lc.shape), -1, 1, 49), lc.shape, dtype);
        Values w = affine ? pseudo_random(k, 0.5, 2, 50) : Values{};
        Tensor wt = affine ? make(w, lc.normalized, dtype) : Tensor();
        LayerNormResult r = layer_norm(x, lc.normalized, wt, Tensor(), 1e-5);
        LayerNormGrads g = layer_norm_backward(dy, x, lc.normalized, r.mean, r.rstd, wt, {true, true, true});
        Grads want = layer_norm_backward_ref(values_of(dy), values_of(x), k, w, values_of(r.mean), values_of(r.rstd));
        double sum_tol = tol * std::sqrt(static_cast<double>(shape_numel(lc.shape) / k));
        expect_close(values_of(g.grad_input), want.x, tol, tol, what + " grad_input");
        expect_close(values_of(g.grad_weight), want.w, tol, sum_tol, what + " grad_weight");
        expect_close(values_of(g.grad_bias), want.b, tol, sum_tol, what + " grad_bias");
        EXPECT_EQ(g.grad_bias.shape(), lc.normalized);
        LayerNormGrads only_x = layer_norm_backward(dy, x, lc.normalized, r.mean, r.rstd, wt, {true, false, false});
        EXPECT_FALSE(only_x.grad_weight.defined());
        EXPECT_FALSE(only_x.grad_bias.defined());
        EXPECT_EQ(values_of(only_x.grad_input), values_of(g.grad_input)) << what;
      }
    }
  }
}

TEST(LayerNorm, ReferenceGradientsMatchFiniteDifferences) {
  for (const LayerCase& lc : {LayerCase{{3, 5}, {5}}, LayerCase{{2, 3, 4}, {3, 4}}}) {
    int64_t k = shape_numel(lc.normalized);
    std::string what = ::testing::PrintToString(lc.shape) + " over " + ::testing::PrintToString(lc.normalized);
    Values x = pseudo_random(shape_numel(lc.shape), -2, 2, 51), dy = pseudo_random(x.size(), -1, 1, 52);
    Values w = pseudo_random(k, 0.5, 2, 53), b = pseudo_random(k, -1, 1, 54);
    auto forward = [&](const Values& xv, const Values& wv, const Values& bv) {
      return layer_norm_ref(xv, k, wv, bv, 1e-5).out;
    };
    Values fd_x = finite_differences(x, dy, [&](const Values& v) { return forward(v, w, b); });
    Values fd_w = finite_differences(w, dy, [&](const Values& v) { return forward(x, v, b); });
    Values fd_b = finite_differences(b, dy, [&](const Values& v) { return forward(x, w, v); });

    LayerRef ref = layer_norm_ref(x, k, w, b, 1e-5);
    Grads closed = layer_norm_backward_ref(dy, x, k, w, ref.mean, ref.rstd);
    expect_close(closed.x, fd_x, 1e-6, 1e-7, what + " reference grad_input");
    expect_close(closed.w, fd_w, 1e-6, 1e-7, what + " reference grad_weight");
    expect_close(closed.b, fd_b, 1e-6, 1e-7, what + " reference grad_bias");

    Tensor xt = make(x, lc.shape, DType::Float64), wt = make(w, lc.normalized, DType::Float64);
    LayerNormResult r = layer_norm(xt, lc.normalized, wt, make(b, lc.normalized, DType::Float64), 1e-5);
    LayerNormGrads g = layer_norm_backward(make(dy, lc.shape, DType::Float64), xt, lc.normalized, r.mean, r.rstd, wt,
                                           {true, true, true});
    expect_close(values_of(g.grad_input), fd_x, 1e-6, 1e-7, what + " grad_input");
    expect_close(values_of(g.grad_weight), fd_w, 1e-6, 1e-7, what + " grad_weight");
    expect_close(values_of(g.grad_bias), fd_b, 1e-6, 1e-7, what + " grad_bias");
  }
}

TEST(LayerNorm, SixteenBitInputsComputeInFloat32) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    Tensor x = make(pseudo_random(6 * 40, -3, 3, 55), {6, 40}, dtype);
    Tensor dy = make(pseudo_random(6 * 40, -1, 1, 56), {6, 40}, dtype);
    Values w = pseudo_random(40, 0.5, 2, 57), b = pseudo_random(40, -1, 1, 58);
    Tensor wt = make(w, {40}, dtype);
    LayerNormResult r = layer_norm(x, {40}, wt, make(b, {40}, dtype), 1e-5);
    EXPECT_EQ(r.output.dtype(), dtype);
    EXPECT_EQ(r.rstd.dtype(), DType::Float32);
    // The reference sees the parameters as rounded to the 16-bit type.
    Values w16 = values_of(wt), b16 = values_of(make(b, {40}, dtype));
    LayerRef want = layer_norm_ref(values_of(x), 40, w16, b16, 1e-5);
    double tol = dtype == DType::Float16 ? 4e-3 : 3e-2;
    std::string what(dtype_name(dtype));
    expect_close(values_of(r.output), want.out, tol, tol, what + " output");
    expect_close(values_of(r.rstd), want.rstd, 1e-5, 0, what + " rstd");
    LayerNormGrads g = layer_norm_backward(dy, x, {40}, r.mean, r.rstd, wt, {true, true, true});
    Grads gw = layer_norm_backward_ref(values_of(dy), values_of(x), 40, w16, want.mean, want.rstd);
    EXPECT_EQ(g.grad_weight.dtype(), dtype);
    expect_close(values_of(g.grad_input), gw.x, tol, tol, what + " grad_input");
    expect_close(values_of(g.grad_weight), gw.w, tol, tol, what + " grad_weight");
  }
}

TEST(LayerNorm, SameResultForAnyThreadCount) {
  int saved = get_num_threads();
  for (const Shape& shape : {Shape{3000, 70}, Shape{3, 5000}, Shape{40, 700}}) {
    Tensor x = make(pseudo_random(shape_numel(shape), -3, 5, 63), shape, DType::Float32);
    Tensor dy = make(pseudo_random(shape_numel(shape), -1, 1, 64), shape, DType::Float32);
    Tensor w = make(pseudo_random(shape[1], 0.5, 2, 65), {shape[1]}, DType::Float32);
    std::vector<Values> results;
    for (int threads : {1, 3, 4}) {
      set_num_threads(threads);
      LayerNormResult r = layer_norm(x, {shape[1]}, w, Tensor(), 1e-5);
      LayerNormGrads g = layer_norm_backward(dy, x, {shape[1]}, r.mean, r.rstd, w, {true, true, true});
      Values all = values_of(r.output);
      for (const Tensor& t : {r.rstd, g.grad_input, g.grad_weight, g.grad_bias}) {
        Values v = values_of(t);
        all.insert(all.end(), v.begin(), v.end());
      }
      results.push_back(all);
    }
    EXPECT_EQ(results[0], results[1]) << ::testing::PrintToString(shape);
    EXPECT_EQ(results[0], results[2]) << ::testing::PrintToString(shape);
  }
  set_num_threads(saved);
}

TEST(LayerNorm, EmptyRows) {
  // Normalising over nothing: torch gives mean 0 and rstd NaN, and no gradients.
  Tensor x = zeros({3, 0});
  LayerNormResult r = layer_norm(x, {0}, Tensor(), Tensor(), 1e-5);
  EXPECT_EQ(r.output.shape(), (Shape{3, 0}));
  EXPECT_EQ(r.mean.shape(), (Shape{3, 1}));
  expect_close(values_of(r.mean), Values(3, 0.0), 0, 0, "mean");
  EXPECT_TRUE(std::isnan(r.rstd.at<float>({0, 0})));
  LayerNormGrads g = layer_norm_backward(zeros({3, 0}), x, {0}, r.mean, r.rstd, Tensor(), {true, true, true});
  EXPECT_EQ(g.grad_input.shape(), (Shape{3, 0}));
  EXPECT_EQ(g.grad_weight.shape(), (Shape{0}));
  EXPECT_EQ(g.grad_bias.shape(), (Shape{0}));
}

TEST(LayerNorm, Errors) {
  Tensor x = zeros({2, 3, 4});
  Tensor none;
  auto ln = [&](const Tensor& in, const Shape& normalized, const Tensor& w, const Tensor& b, double eps = 1e-5) {
    return [=] { layer_norm(in, normalized, w, b, eps); };
  };
  expect_error(ln(x, {3}, none, none),
               "layer_norm: normalized_shape [3] does not match the last 1 dims of the input of shape [2, 3, 4]");
  expect_error(ln(x, {2, 4}, none, none), "layer_norm: normalized_shape [2, 4] does not match the last 2 dims");
  expect_error(ln(zeros({4}), {3, 4}, none, none),
               "layer_norm: normalized_shape [3, 4] does not match the last 2 dims of the input of shape [4]");
  expect_error(ln(x, {}, none, none), "layer_norm: normalized_shape must have at least one dim, got []");
  expect_error(ln(x, {4}, ones({3}), none), "layer_norm: expected weight of shape [4], got [3]");
  expect_error(ln(x, {3, 4}, none, ones({12})), "layer_norm: expected bias of shape [3, 4], got [12]");
  expect_error(ln(zeros({2, 4}, DType::Int32), {4}, none, none),
               "layer_norm: expected a floating point input, got int32");
  expect_error(ln(x, {4}, none, none, -1.0), "layer_norm: eps must be non-negative, got -1");
  expect_error(ln(zeros({2, 4}, DType::BFloat16), {4}, ones({4}, DType::Float64), none),
               "layer_norm: weight has dtype float64 but the input is bfloat16 (expected bfloat16 or float32)");

  LayerNormResult r = layer_norm(x, {4}, none, none, 1e-5);
  auto backward = [&](const Tensor& dy, const Shape& normalized, const Tensor& mean) {
    return [=] { layer_norm_backward(dy, x, normalized, mean, r.rstd, none, {true, true, true}); };
  };
  expect_error(backward(zeros({2, 3}), {4}, r.mean),
               "layer_norm_backward: grad_out ([2, 3], float32, cpu) must match the input ([2, 3, 4], float32, cpu)");
  expect_error(backward(zeros_like(x), {4}, zeros({5})),
               "layer_norm_backward: expected mean and rstd with 6 values (one per normalized row), got shapes [5] "
               "and [2, 3, 1]");
  expect_error(backward(zeros_like(x), {3, 3}, r.mean), "layer_norm_backward: normalized_shape [3, 3] does not match");
}

}  // namespace
}  // namespace kiln
