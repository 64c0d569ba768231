// batch_norm and its backward against the float64 references of
// tests/tensor/norm_reference.h, and the float32 run sums per SIMD level.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/norm_simd.h"
#include "tensor/ops.h"
#include "tests/tensor/norm_reference.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
using namespace kiln::norm_testing;
namespace {

// (N, C), (N, C, L) and (N, C, H, W); S = 1 and 7 take the column layout,
// S = 36, 64 and 70000 (cut into pieces) the plane layout.
const std::vector<Shape> kBatchShapes = {{8, 5}, {4, 3, 7}, {2, 3, 8, 8}, {3, 2, 6, 6}, {1, 2, 70000}, {300, 3}};

// ---- batch norm tests ------------------------------------------------------------

TEST(BatchNorm, TrainingForwardMatchesReference) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    double tol = dtype == DType::Float64 ? 1e-12 : 2e-5;
    for (const Shape& shape : kBatchShapes) {
      for (bool affine : {false, true}) {
        BatchDims d(shape);
        std::string what =
            std::string(dtype_name(dtype)) + " " + ::testing::PrintToString(shape) + (affine ? " affine" : "");
        Tensor x = make(pseudo_random(shape_numel(shape), -3, 5, 7), shape, dtype);
        Values w = affine ? pseudo_random(d.c, 0.5, 2, 8) : Values{};
        Values b = affine ? pseudo_random(d.c, -1, 1, 9) : Values{};
        Values rm0 = pseudo_random(d.c, -1, 1, 10), rv0 = pseudo_random(d.c, 0.5, 2, 11);
        Tensor rm = make(rm0, {d.c}, dtype), rv = make(rv0, {d.c}, dtype);
        BatchNormResult r = batch_norm(x, affine ? make(w, {d.c}, dtype) : Tensor(),
                                       affine ? make(b, {d.c}, dtype) : Tensor(), rm, rv, true, 0.1, 1e-5);
        BatchRef want = batch_norm_ref(values_of(x), shape, w, b, rm0, rv0, true, 0.1, 1e-5);
        EXPECT_EQ(r.output.shape(), shape) << what;
        EXPECT_EQ(r.output.dtype(), dtype) << what;
        EXPECT_EQ(r.save_mean.dtype(), dtype) << what;
        expect_close(values_of(r.output), want.out, tol, tol, what + " output");
        expect_close(values_of(r.save_mean), want.mean, tol, tol, what + " save_mean");
        expect_close(values_of(r.save_invstd), want.invstd, tol, tol, what + " save_invstd");
        expect_close(values_of(rm), want.running_mean, tol, tol, what + " running_mean");
        expect_close(values_of(rv), want.running_var, tol, tol, what + " running_var");
      }
    }
  }
}

TEST(BatchNorm, RunningStatsUseUnbiasedVariance) {
  // Channel 0 holds {1, 3}: mean 2, biased variance 1, unbiased 2.
  Tensor x = from_vector<double>({1, 10, 3, 30}, {2, 2});
  Tensor rm = zeros({2}, DType::Float64), rv = ones({2}, DType::Float64);
  BatchNormResult r = batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.25, 0.0);
  EXPECT_DOUBLE_EQ(r.save_mean.at<double>({0}), 2.0);
  EXPECT_DOUBLE_EQ(r.save_invstd.at<double>({0}), 1.0);
  EXPECT_DOUBLE_EQ(r.output.at<double>({0, 0}), -1.0);
  EXPECT_DOUBLE_EQ(rm.at<double>({0}), 0.5);                  // 0.75 * 0 + 0.25 * 2
  EXPECT_DOUBLE_EQ(rv.at<double>({0}), 0.75 + 0.25 * 2.0);    // unbiased, not 1
  EXPECT_DOUBLE_EQ(rv.at<double>({1}), 0.75 + 0.25 * 200.0);  // {10, 30}: unbiased 200
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThem) {
  for (const Shape& shape : kBatchShapes) {
    BatchDims d(shape);
    Tensor x = make(pseudo_random(shape_numel(shape), -3, 5, 1), shape, DType::Float32);
    Values w = pseudo_random(d.c, 0.5, 2, 2), b = pseudo_random(d.c, -1, 1, 3);
    Values rm0 = pseudo_random(d.c, -1, 1, 4), rv0 = pseudo_random(d.c, 0.5, 2, 5);
    Tensor rm = make(rm0, {d.c}, DType::Float32), rv = make(rv0, {d.c}, DType::Float32);
    BatchNormResult r =
        batch_norm(x, make(w, {d.c}, DType::Float32), make(b, {d.c}, DType::Float32), rm, rv, false, 0.1, 1e-3);
    BatchRef want = batch_norm_ref(values_of(x), shape, w, b, values_of(rm), values_of(rv), false, 0.1, 1e-3);
    std::string what = ::testing::PrintToString(shape);
    expect_close(values_of(r.output), want.out, 2e-5, 2e-5, what + " output");
    expect_close(values_of(r.save_mean), values_of(rm), 0, 0, what + " save_mean");
    expect_close(values_of(r.save_invstd), want.invstd, 1e-6, 0, what + " save_invstd");
    expect_close(values_of(rm), values_of(make(rm0, {d.c}, DType::Float32)), 0, 0, what + " running_mean");
    expect_close(values_of(rv), values_of(make(rv0, {d.c}, DType::Float32)), 0, 0, what + " running_var");
    // save_mean is a copy: later training steps must not change it.
    batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.5, 1e-3);
    EXPECT_NE(values_of(r.save_mean), values_of(rm)) << what;
  }
}

TEST(BatchNorm, NonContiguousInputAndGrad) {
  // (N, H, W, C) permuted to (N, C, H, W): channels are the fastest dim.
  Shape shape = {3, 4, 5, 6};
  Tensor x = make(pseudo_random(360, -2, 2, 12), {3, 5, 6, 4}, DType::Float32).permute({0, 3, 1, 2});
  Tensor dy = make(pseudo_random(360, -1, 1, 13), {3, 5, 6, 4}, DType::Float32).permute({0, 3, 1, 2});
  ASSERT_FALSE(x.is_contiguous());
  Values w = pseudo_random(4, 0.5, 2, 14), b = pseudo_random(4, -1, 1, 15);
  Tensor wt = make(w, {4}, DType::Float32);
  BatchNormResult r = batch_norm(x, wt, make(b, {4}, DType::Float32), Tensor(), Tensor(), true, 0.1, 1e-5);
  BatchRef want = batch_norm_ref(values_of(x), shape, w, b, {}, {}, true, 0.1, 1e-5);
  expect_close(values_of(r.output), want.out, 2e-5, 2e-5, "output");
  BatchNormGrads g = batch_norm_backward(dy, x, wt, r.save_mean, r.save_invstd, true, {true, true, true});
  Grads gw = batch_norm_backward_ref(values_of(dy), values_of(x), shape, w, want.mean, want.invstd, true);
  expect_close(values_of(g.grad_input), gw.x, 1e-4, 1e-5, "grad_input");
  expect_close(values_of(g.grad_weight), gw.w, 1e-4, 1e-4, "grad_weight");
  expect_close(values_of(g.grad_bias), gw.b, 1e-4, 1e-4, "grad_bias");
}

TEST(BatchNorm, LargeMeanKeepsTheVariance) {
  for (const LargeMeanCase& lm : kLargeMeanCases) {
    for (const Shape& shape : {Shape{4096, 2}, Shape{8, 2, 4096}}) {
      Values v = pseudo_random(shape_numel(shape), lm.mean - 1.7, lm.mean + 1.7, 16);
      Tensor x = make(v, shape, lm.dtype);
      BatchNormResult r = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 0.0);
      BatchRef want = batch_norm_ref(values_of(x), shape, {}, {}, {}, {}, true, 0.1, 0.0);
      std::string what = std::string(dtype_name(lm.dtype)) + " " + ::testing::PrintToString(shape);
      expect_close(values_of(r.save_invstd), want.invstd, lm.rtol, 0, what + " invstd");
      expect_close(values_of(r.save_mean), want.mean, 1e-7, 0, what + " mean");
      expect_close(values_of(r.output), want.out, 0, lm.atol, what + " output");
    }
  }
}

TEST(BatchNorm, BackwardMatchesReference) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    double tol = dtype == DType::Float64 ? 1e-10 : 1e-4;
    for (const Shape& shape : kBatchShapes) {
      for (bool training : {true, false}) {
        for (bool affine : {false, true}) {
          BatchDims d(shape);
          std::string what = std::string(dtype_name(dtype)) + " " + ::testing::PrintToString(shape) +
                             (training ? " training" : " eval") + (affine ? " affine" : "");
          Tensor x = make(pseudo_random(shape_numel(shape), -3, 5, 17), shape, dtype);
          Tensor dy = make(pseudo_random(shape_numel(shape), -1, 1, 18), shape, dtype);
          Values w = affine ? pseudo_random(d.c, 0.5, 2, 19) : Values{};
          Tensor wt = affine ? make(w, {d.c}, dtype) : Tensor();
          Tensor rm = make(pseudo_random(d.c, -1, 1, 20), {d.c}, dtype);
          Tensor rv = make(pseudo_random(d.c, 0.5, 2, 21), {d.c}, dtype);
          BatchNormResult r = batch_norm(x, wt, Tensor(), rm, rv, training, 0.1, 1e-5);
          BatchNormGrads g = batch_norm_backward(dy, x, wt, r.save_mean, r.save_invstd, training, {true, true, true});
          Grads want = batch_norm_backward_ref(values_of(dy), values_of(x), shape, w, values_of(r.save_mean),
                                               values_of(r.save_invstd), training);
          // Sums over up to 140000 values: scale the tolerance of the sums.
          double sum_tol = tol * std::sqrt(static_cast<double>(d.n * d.s));
          expect_close(values_of(g.grad_input), want.x, tol, tol, what + " grad_input");
          expect_close(values_of(g.grad_weight), want.w, tol, sum_tol, what + " grad_weight");
          expect_close(values_of(g.grad_bias), want.b, tol, sum_tol, what + " grad_bias");
          EXPECT_EQ(g.grad_input.dtype(), dtype);
        }
      }
    }
  }
}

TEST(BatchNorm, BackwardLeavesUnrequestedGradsUndefined) {
  Tensor x = make(pseudo_random(24, -1, 1, 22), {4, 3, 2}, DType::Float32);
  Tensor w = ones({3});
  BatchNormResult r = batch_norm(x, w, Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  BatchNormGrads g = batch_norm_backward(ones_like(x), x, w, r.save_mean, r.save_invstd, true, {false, true, false});
  EXPECT_FALSE(g.grad_input.defined());
  EXPECT_TRUE(g.grad_weight.defined());
  EXPECT_FALSE(g.grad_bias.defined());
  BatchNormGrads only_x =
      batch_norm_backward(ones_like(x), x, w, r.save_mean, r.save_invstd, true, {true, false, false});
  EXPECT_TRUE(only_x.grad_input.defined());
  EXPECT_FALSE(only_x.grad_weight.defined());
  // A constant grad_out is removed entirely by the mean subtraction.
  expect_close(values_of(only_x.grad_input), Values(24, 0.0), 0, 1e-6, "grad_input of ones");
}

TEST(BatchNorm, ReferenceGradientsMatchFiniteDifferences) {
  // The closed form above against the forward reference, and kiln's float64
  // backward against the same finite differences.
  for (const Shape& shape : {Shape{6, 3}, Shape{3, 2, 5}, Shape{2, 2, 6, 6}}) {
    for (bool training : {true, false}) {
      BatchDims d(shape);
      std::string what = ::testing::PrintToString(shape) + (training ? " training" : " eval");
      Values x = pseudo_random(shape_numel(shape), -2, 2, 23), dy = pseudo_random(x.size(), -1, 1, 24);
      Values w = pseudo_random(d.c, 0.5, 2, 25), b = pseudo_random(d.c, -1, 1, 26);
      Values rm = pseudo_random(d.c, -1, 1, 27), rv = pseudo_random(d.c, 0.5, 2, 28);
      auto forward = [&](const Values& xv, const Values& wv, const Values& bv) {
        return batch_norm_ref(xv, shape, wv, bv, rm, rv, training, 0.1, 1e-5).out;
      };
      Values fd_x = finite_differences(x, dy, [&](const Values& v) { return forward(v, w, b); });
      Values fd_w = finite_differences(w, dy, [&](const Values& v) { return forward(x, v, b); });
      Values fd_b = finite_differences(b, dy, [&](const Values& v) { return forward(x, w, v); });

      BatchRef ref = batch_norm_ref(x, shape, w, b, rm, rv, training, 0.1, 1e-5);
      Grads closed = batch_norm_backward_ref(dy, x, shape, w, ref.mean, ref.invstd, training);
      expect_close(closed.x, fd_x, 1e-6, 1e-7, what + " reference grad_input");
      expect_close(closed.w, fd_w, 1e-6, 1e-7, what + " reference grad_weight");
      expect_close(closed.b, fd_b, 1e-6, 1e-7, what + " reference grad_bias");

      Tensor xt = make(x, shape, DType::Float64), wt = make(w, {d.c}, DType::Float64);
      Tensor rmt = make(rm, {d.c}, DType::Float64), rvt = make(rv, {d.c}, DType::Float64);
      BatchNormResult r = batch_norm(xt, wt, make(b, {d.c}, DType::Float64), rmt, rvt, training, 0.1, 1e-5);
      BatchNormGrads g = batch_norm_backward(make(dy, shape, DType::Float64), xt, wt, r.save_mean, r.save_invstd,
                                             training, {true, true, true});
      expect_close(values_of(g.grad_input), fd_x, 1e-6, 1e-7, what + " grad_input");
      expect_close(values_of(g.grad_weight), fd_w, 1e-6, 1e-7, what + " grad_weight");
      expect_close(values_of(g.grad_bias), fd_b, 1e-6, 1e-7, what + " grad_bias");
    }
  }
}

TEST(BatchNorm, SixteenBitInputsComputeInFloat32) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : {Shape{16, 3}, Shape{4, 3, 40}}) {
      BatchDims d(shape);
      std::string what = std::string(dtype_name(dtype)) + " " + ::testing::PrintToString(shape);
      Tensor x = make(pseudo_random(shape_numel(shape), -3, 3, 29), shape, dtype);
      Tensor dy = make(pseudo_random(shape_numel(shape), -1, 1, 30), shape, dtype);
      Values w = pseudo_random(d.c, 0.5, 2, 31), b = pseudo_random(d.c, -1, 1, 32);
      // float32 parameters with a 16-bit input (mixed precision).
      Tensor wt = make(w, {d.c}, DType::Float32);
      Tensor rm = zeros({d.c}), rv = ones({d.c});
      BatchNormResult r = batch_norm(x, wt, make(b, {d.c}, DType::Float32), rm, rv, true, 0.1, 1e-5);
      EXPECT_EQ(r.output.dtype(), dtype);
      EXPECT_EQ(r.save_mean.dtype(), DType::Float32);
      BatchRef want = batch_norm_ref(values_of(x), shape, w, b, Values(d.c, 0.0), Values(d.c, 1.0), true, 0.1, 1e-5);
      double tol = dtype == DType::Float16 ? 4e-3 : 3e-2;  // the rounding of the output
      expect_close(values_of(r.output), want.out, tol, tol, what + " output");
      expect_close(values_of(r.save_invstd), want.invstd, 1e-5, 0, what + " save_invstd");
      expect_close(values_of(rv), want.running_var, 1e-5, 0, what + " running_var");
      BatchNormGrads g = batch_norm_backward(dy, x, wt, r.save_mean, r.save_invstd, true, {true, true, true});
      Grads gw = batch_norm_backward_ref(values_of(dy), values_of(x), shape, w, want.mean, want.invstd, true);
      EXPECT_EQ(g.grad_weight.dtype(), DType::Float32);
      expect_close(values_of(g.grad_input), gw.x, tol, tol, what + " grad_input");
      expect_close(values_of(g.grad_weight), gw.w, 1e-4, 1e-4, what + " grad_weight");
      expect_close(values_of(g.grad_bias), gw.b, 1e-4, 1e-4, what + " grad_bias");
    }
  }
}

TEST(BatchNorm, SameResultForAnyThreadCount) {
  int saved = get_num_threads();
  for (const Shape& shape : {Shape{5000, 3}, Shape{2, 3, 70000}, Shape{64, 40, 7}}) {
    Tensor x = make(pseudo_random(shape_numel(shape), -3, 5, 33), shape, DType::Float32);
    Tensor dy = make(pseudo_random(shape_numel(shape), -1, 1, 34), shape, DType::Float32);
    std::vector<Values> results;
    for (int threads : {1, 3, 4}) {
      set_num_threads(threads);
      BatchNormResult r = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
      BatchNormGrads g = batch_norm_backward(dy, x, Tensor(), r.save_mean, r.save_invstd, true, {true, true, true});
      Values all = values_of(r.output);
      for (const Tensor& t : {r.save_mean, r.save_invstd, g.grad_input, g.grad_weight}) {
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

TEST(BatchNorm, EmptyInputs) {
  // No images in eval mode, and no channels in training.
  BatchNormResult eval = batch_norm(zeros({0, 3, 4}), ones({3}), zeros({3}), zeros({3}), ones({3}), false, 0.1, 1e-5);
  EXPECT_EQ(eval.output.shape(), (Shape{0, 3, 4}));
  BatchNormGrads g = batch_norm_backward(zeros({0, 3, 4}), zeros({0, 3, 4}), ones({3}), eval.save_mean,
                                         eval.save_invstd, false, {true, true, true});
  EXPECT_EQ(g.grad_input.shape(), (Shape{0, 3, 4}));
  expect_close(values_of(g.grad_weight), Values(3, 0.0), 0, 0, "grad_weight of nothing");
  BatchNormResult train = batch_norm(zeros({4, 0}), Tensor(), Tensor(), zeros({0}), ones({0}), true, 0.1, 1e-5);
  EXPECT_EQ(train.output.shape(), (Shape{4, 0}));
  EXPECT_EQ(train.save_mean.shape(), (Shape{0}));
  LayerNormResult ln = layer_norm(zeros({0, 5}), {5}, Tensor(), Tensor(), 1e-5);
  EXPECT_EQ(ln.output.shape(), (Shape{0, 5}));
  EXPECT_EQ(ln.mean.shape(), (Shape{0, 1}));
  LayerNormGrads lg =
      layer_norm_backward(zeros({0, 5}), zeros({0, 5}), {5}, ln.mean, ln.rstd, Tensor(), {true, true, true});
  expect_close(values_of(lg.grad_bias), Values(5, 0.0), 0, 0, "grad_bias of nothing");
}

TEST(BatchNorm, Errors) {
  Tensor x = zeros({4, 3, 2});
  Tensor c3 = ones({3}), c4 = ones({4});
  Tensor none;
  auto bn = [&](const Tensor& in, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv,
                bool training = true,
                double eps = 1e-5) { return [=] { batch_norm(in, w, b, rm, rv, training, 0.1, eps); }; };
  expect_error(bn(zeros({3}), none, none, none, none),
               "batch_norm: expected an input of at least 2 dims (N, C, *), got shape [3]");
  expect_error(bn(zeros({4, 3}, DType::Int64), none, none, none, none),
               "batch_norm: expected a floating point input, got int64");
  expect_error(bn(x, c4, none, none, none), "batch_norm: expected weight of shape [3], got [4]");
  expect_error(bn(x, none, c4, none, none), "batch_norm: expected bias of shape [3], got [4]");
  expect_error(bn(x, none, none, c4, c3), "batch_norm: expected running_mean of shape [3], got [4]");
  expect_error(bn(x, none, none, c3, ones({3, 1})), "batch_norm: expected running_var of shape [3], got [3, 1]");
  expect_error(bn(x, ones({3}, DType::Float64), none, none, none),
               "batch_norm: weight has dtype float64 but the input is float32 (expected float32)");
  expect_error(bn(zeros({1, 3}), none, none, none, none),
               "batch_norm: Expected more than 1 value per channel when training, got input size [1, 3]");
  expect_error(bn(zeros({1, 3, 1, 1}), none, none, none, none),
               "Expected more than 1 value per channel when training, got input size [1, 3, 1, 1]");
  expect_error(bn(x, none, none, none, none, false),
               "batch_norm: running_mean and running_var are required when not training (training=false)");
  expect_error(bn(x, none, none, c3, none), "batch_norm: running_mean and running_var must be given together");
  expect_error(bn(x, none, none, none, none, true, -1e-5), "batch_norm: eps must be non-negative, got -1e-05");
  // Eval mode needs only one value per channel.
  EXPECT_NO_THROW(batch_norm(zeros({1, 3}), none, none, zeros({3}), ones({3}), false, 0.1, 1e-5));

  BatchNormResult r = batch_norm(x, none, none, none, none, true, 0.1, 1e-5);
  auto backward = [&](const Tensor& dy, const Tensor& w, const Tensor& mean) {
    return [=] { batch_norm_backward(dy, x, w, mean, r.save_invstd, true, {true, true, true}); };
  };
  expect_error(backward(zeros({4, 3}), none, r.save_mean),
               "batch_norm_backward: grad_out ([4, 3], float32, cpu) must match the input ([4, 3, 2], float32, cpu)");
  expect_error(backward(zeros_like(x), none, c4), "batch_norm_backward: expected save_mean of shape [3], got [4]");
  expect_error(backward(zeros_like(x), c4, r.save_mean), "batch_norm_backward: expected weight of shape [3], got [4]");
}

// ---- the float32 row sums, per SIMD level ------------------------------------------

TEST(NormSimd, RowSumsMatchFloat64ForEveryLevel) {
  using cpu::NormSums;
  bool avx2 = cpu::simd_level() >= cpu::SimdLevel::Avx2;
  // Around the block size and the vector widths, and with a mean of 1e4.
  for (int64_t n : {0, 1, 7, 33, 1023, 1024, 1025, 5000}) {
    for (double center : {0.0, 1e4}) {
      Values xs = pseudo_random(n, center - 2, center + 2, 60), dys = pseudo_random(n, -1, 1, 61);
      Values ws = pseudo_random(n, 0.5, 2, 62);
      std::vector<float> x(xs.begin(), xs.end()), dy(dys.begin(), dys.end()), w(ws.begin(), ws.end());
      float shift = static_cast<float>(center + 0.25), mean = static_cast<float>(center - 0.5);
      double want[4] = {};  // shifted sum, of squares, grad sum, of dy * w * (x - mean)
      for (int64_t i = 0; i < n; ++i) {
        double d = static_cast<double>(x[i]) - shift, g = static_cast<double>(dy[i]) * w[i];
        want[0] += d, want[1] += d * d, want[2] += g, want[3] += g * (static_cast<double>(x[i]) - mean);
      }
      std::string what = "n " + std::to_string(n) + " center " + std::to_string(center);
      std::vector<std::pair<NormSums, NormSums>> levels = {
          {cpu::shifted_sums_f32_scalar(x.data(), n, shift),
           cpu::grad_sums_f32_scalar(dy.data(), x.data(), w.data(), n, mean)}};
      if (avx2) {
        levels.push_back({cpu::shifted_sums_f32_avx2(x.data(), n, shift),
                          cpu::grad_sums_f32_avx2(dy.data(), x.data(), w.data(), n, mean)});
      }
      for (const auto& [shifted, grad] : levels) {
        expect_close({shifted.first, shifted.second, grad.first, grad.second}, Values(want, want + 4), 1e-5,
                     1e-5 * static_cast<double>(n), what);
      }
      if (avx2) {
        // Without a weight the grad sums are plain sums of dy.
        NormSums plain = cpu::grad_sums_f32_avx2(dy.data(), x.data(), nullptr, n, mean);
        NormSums plain_scalar = cpu::grad_sums_f32_scalar(dy.data(), x.data(), nullptr, n, mean);
        EXPECT_NEAR(plain.first, plain_scalar.first, 1e-5 * static_cast<double>(n) + 1e-12) << what;
        EXPECT_NEAR(plain.second, plain_scalar.second, 1e-4 * static_cast<double>(n) + 1e-12) << what;
      }
    }
  }
  if (!avx2) GTEST_SKIP() << "this CPU has no AVX2: only the baseline sums were checked";
}

}  // namespace
}  // namespace kiln
