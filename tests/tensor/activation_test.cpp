// The activations with settings on the tensor layer (tensor/activation.h):
// elu and the elu and hardtanh gradients against float64 references in every
// floating dtype and layout, hardtanh at and around its bounds, the vector
// kernels of every level this CPU runs against the scalar references
// (tensor/cpu/activation_simd.h), the in-place forms and every error.
#include "tensor/cpu/activation_simd.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tensor/cpu/cpu_features.h"
#include "tensor/ops.h"
#include "tensor/quantize.h"
#include "tests/tensor/elementwise_reference.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr DType kFloatDTypes[] = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// x rounded to `dtype` and back, the input a kernel of that dtype sees.
std::vector<double> rounded(const std::vector<double>& x, DType dtype) {
  return values(from_vector<double>(x).to(dtype));
}

// One rounding of the dtype (relative), with room for the float32 or
// polynomial steps before it.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float32: return 1e-6;
    default: return 1e-15;
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": got " << got[i];
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
    } else {
      EXPECT_LE(std::fabs(got[i] - want[i]), rtol * std::fabs(want[i]) + 1e-300) << what << " at " << i << ": got "
                                                                                 << got[i] << ", want " << want[i];
    }
  }
}

double elu_reference(double x, double alpha) { return x <= 0 ? alpha * std::expm1(x) : x; }

// The inputs every kernel must handle: both sides of 0 down to tiny values,
// the range where e^x - 1 is -1, and the special values.
const std::vector<double> kEluInputs = {-104.0, -30.0, -17.0, -5.0, -1.0, -0.3, -1e-3, -1e-8, -0.0, 0.0,
                                        1e-8,   1e-3,  0.7,   1.0,  4.0,  1e30, kInf,  -kInf, kNan};

TEST(Activation, EluMatchesTheReferenceInEveryDtypeAndLayout) {
  for (DType dtype : kFloatDTypes) {
    std::vector<double> x = rounded(kEluInputs, dtype);
    for (double alpha : {1.0, 0.5, 0.0, 2.5}) {
      std::vector<double> want;
      for (double v : x) want.push_back(elu_reference(v, alpha));
      want = rounded(want, dtype);
      const std::string what = std::string(dtype_name(dtype)) + " alpha " + std::to_string(alpha);
      Tensor input = from_vector<double>(x).to(dtype);
      Tensor out = ops::elu(input, alpha);
      EXPECT_EQ(out.dtype(), dtype);
      expect_close(values(out), want, tolerance(dtype), what);
      // Every other element of a wider tensor: the strided scalar loop.
      Tensor wide = ops::stack({input, input}, 1).view({-1}).slice(0, 0, 2 * input.numel(), 2);
      ASSERT_FALSE(wide.is_contiguous());
      expect_close(values(ops::elu(wide, alpha)), want, tolerance(dtype), what + " strided");
    }
  }
}

TEST(Activation, EluBackwardFromTheInputAndFromTheOutput) {
  const std::vector<double> x = {-30.0, -3.0, -1.0, -0.25, -1e-6, 0.0, 1e-6, 0.5, 3.0, kNan};
  for (DType dtype : kFloatDTypes) {
    std::vector<double> xr = rounded(x, dtype);
    std::vector<double> g = rounded(std::vector<double>(x.size(), -1.75), dtype);
    Tensor xt = from_vector<double>(xr).to(dtype), gt = from_vector<double>(g).to(dtype);
    for (double alpha : {1.0, 0.3, 0.0}) {
      const std::string what = std::string(dtype_name(dtype)) + " alpha " + std::to_string(alpha);
      // x <= 0 takes alpha e^x, so the gradient at 0 is alpha, as torch's;
      // a NaN input passes g through.
      std::vector<double> want;
      for (size_t i = 0; i < x.size(); ++i) want.push_back(xr[i] <= 0 ? g[i] * alpha * std::exp(xr[i]) : g[i]);
      want = rounded(want, dtype);
      expect_close(values(ops::elu_backward(gt, xt, alpha, /*from_output=*/false)), want, tolerance(dtype), what);
      // From the output, g * (y + alpha): the same derivative for alpha >= 0
      // up to the rounding of y (relative to alpha, as y + alpha cancels).
      Tensor y = ops::elu(xt, alpha);
      std::vector<double> from_output = values(ops::elu_backward(gt, y, alpha, /*from_output=*/true));
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(from_output[i])) << what;
          continue;
        }
        EXPECT_NEAR(from_output[i], want[i], 4 * tolerance(dtype) * (std::fabs(g[i]) * (alpha + 1))) << what << " x "
                                                                                                   << xr[i];
      }
    }
  }
}

TEST(Activation, GradientsBroadcastAndPromoteTheirOperands) {
  Tensor g = from_vector<float>({2.0f});
  Tensor x = from_vector<double>({-1.0, 0.5, 2.0, 3.0}, {2, 2});
  Tensor e = ops::elu_backward(g, x, 1.0, false);
  EXPECT_EQ(e.dtype(), DType::Float64);
  EXPECT_EQ(e.shape(), (Shape{2, 2}));
  expect_close(values(e), {2 * std::exp(-1.0), 2, 2, 2}, 1e-15, "elu_backward broadcast");
  Tensor h = ops::hardtanh_backward(g, x, -1.0, 2.5);
  expect_close(values(h), {0, 2, 2, 0}, 0, "hardtanh_backward broadcast");
}

TEST(Activation, HardtanhIsAClampAndItsGradientStopsAtTheBounds) {
  // Strictly inside the bounds the gradient passes; at a bound and beyond
  // it is 0; a NaN passes it (torch's x <= min || x >= max test).
  const std::vector<double> x = {-3.0, -1.0, -0.9999, -0.5, 0.0, 0.9999, 1.0, 1.0001, 7.0, kNan};
  const std::vector<double> grad = {0, 0, 1, 1, 1, 1, 0, 0, 0, 1};
  for (DType dtype : kFloatDTypes) {
    const std::string what(dtype_name(dtype));
    std::vector<double> xr = rounded(x, dtype);
    Tensor xt = from_vector<double>(xr).to(dtype);
    Tensor g = ops::mul(ones_like(xt), 3.0);
    Tensor y = ops::hardtanh(xt);
    EXPECT_EQ(y.dtype(), dtype);
    std::vector<double> want_y;
    for (double v : xr) want_y.push_back(std::isnan(v) ? v : std::fmin(std::fmax(v, -1.0), 1.0));
    expect_close(values(y), want_y, 0, what);
    std::vector<double> want_g;
    for (size_t i = 0; i < x.size(); ++i) want_g.push_back(3.0 * ((xr[i] > -1 && xr[i] < 1) || std::isnan(xr[i])));
    // bfloat16 rounds 0.9999 to 1 and -0.9999 to -1: they are bounds there.
    expect_close(values(ops::hardtanh_backward(g, xt, -1.0, 1.0)), want_g, 0, what);
    // From the output the mask is the same: clamping puts every value
    // outside on a bound.
    expect_close(values(ops::hardtanh_backward(g, y, -1.0, 1.0)), want_g, 0, what + " from the output");
  }
  for (size_t i = 0; i < x.size(); ++i) {
    Tensor one = from_vector<double>({x[i]});
    EXPECT_EQ(values(ops::hardtanh_backward(ones_like(one), one, -1.0, 1.0))[0], grad[i]) << "x " << x[i];
  }
}

TEST(Activation, HardtanhBoundsRoundToTheDtypeAsTheClampRoundsThem) {
  // 0.1 is not a float16: the bound is its rounding, which a float16 x of
  // 0.1 equals, so the output there is x and the gradient 0.
  Tensor x = from_vector<double>({0.1, 0.2, 0.5, 0.6}).to(DType::Float16);
  Tensor y = ops::hardtanh(x, 0.1, 0.5);
  std::vector<double> xv = values(x);
  EXPECT_EQ(values(y), (std::vector<double>{xv[0], xv[1], 0.5, 0.5}));
  Tensor g = ones_like(x);
  EXPECT_EQ(values(ops::hardtanh_backward(g, x, 0.1, 0.5)), (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(values(ops::hardtanh_backward(g, y, 0.1, 0.5)), (std::vector<double>{0, 1, 0, 0}));
}

TEST(Activation, HardtanhOfIntegersTruncatesTheBounds) {
  // torch clamps integers to the bounds' integer parts, keeping the dtype.
  Tensor x = from_vector<int64_t>({-3, 0, 5});
  Tensor y = ops::hardtanh(x, -1.5, 2.7);
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(values(y), (std::vector<double>{-1, 0, 2}));
  Tensor u = from_vector<int64_t>({3, 0, 9}).to(DType::UInt8);
  EXPECT_EQ(values(ops::hardtanh(u, 0.0, 6.0)), (std::vector<double>{3, 0, 6}));
  // Equal bounds are allowed: everything becomes the bound.
  EXPECT_EQ(values(ops::hardtanh(from_vector<float>({-2.0f, 0.5f, 3.0f}), 0.25, 0.25)),
            (std::vector<double>{0.25, 0.25, 0.25}));
}

TEST(Activation, InPlaceFormsWriteTheirInput) {
  for (DType dtype : kFloatDTypes) {
    Tensor x = from_vector<double>({-2.0, -0.5, 0.0, 0.5, 2.0}).to(dtype);
    Tensor want = ops::elu(x, 0.7);
    Tensor written = x.clone();
    const uint64_t version = written.version();
    Tensor& r = ops::elu_(written, 0.7);
    EXPECT_TRUE(r.is_same(written));
    EXPECT_GT(written.version(), version);
    EXPECT_EQ(values(written), values(want));
    Tensor h = x.clone();
    ops::hardtanh_(h, -0.5, 1.0);
    EXPECT_EQ(values(h), values(ops::hardtanh(x, -0.5, 1.0)));
  }
  // A transposed view is written through its strides.
  Tensor base = from_vector<float>({-1.0f, 2.0f, -3.0f, 4.0f}, {2, 2});
  Tensor t = base.t();
  ops::elu_(t);
  EXPECT_EQ(values(base), values(ops::elu(from_vector<float>({-1.0f, 2.0f, -3.0f, 4.0f}, {2, 2}))));
}

TEST(Activation, ErrorsNameTheOpAndTheValues) {
  Tensor ints = from_vector<int64_t>({1, 2});
  expect_error([&] { ops::elu(ints); }, "elu: expected a floating tensor, got int64");
  expect_error([&] { ops::elu_(ints); }, "elu_: expected a floating tensor, got int64");
  expect_error([&] { ops::elu_backward(ints, ints, 1.0, false); },
               "elu_backward: expected floating tensors, got int64 and int64");
  expect_error([&] { ops::hardtanh_backward(ints, ints, -1.0, 1.0); },
               "hardtanh_backward: expected floating tensors, got int64 and int64");
  Tensor x = from_vector<float>({1.0f, 2.0f});
  expect_error([&] { ops::hardtanh(x, 2.0, 1.0); }, "hardtanh: min_val (2) is greater than max_val (1)");
  expect_error([&] { ops::hardtanh_(x, 2.0, 1.0); }, "hardtanh_: min_val (2) is greater than max_val (1)");
  expect_error([&] { ops::hardtanh(from_vector<bool>({true})); }, "hardtanh: bool tensors are not supported");
  expect_error([&] { ops::hardtanh(from_vector<int64_t>({1}).to(DType::UInt8)); },
               "hardtanh: cannot clamp a uint8 tensor to negative bounds (min_val -1, max_val 1)");
  expect_error([&] { ops::hardtanh(ints, -kInf, 1.0); }, "hardtanh: bound -inf does not fit the int64 tensor");
  expect_error([&] { ops::hardtanh(ops::quantize_per_tensor(x, 0.1, 0, DType::Int8)); },
               "hardtanh: quantized int8 tensors are not supported");
  Tensor broadcast = from_vector<float>({1.0f}).expand({3});
  expect_error([&] { ops::elu_(broadcast); }, "elu_: cannot write in place to a broadcast view");
  expect_error([&] { ops::hardtanh_(broadcast); }, "hardtanh_: cannot write in place to a broadcast view");
  expect_error([&] { ops::elu_backward(x, from_vector<float>({1.0f, 2.0f, 3.0f}), 1.0, false); }, "elu_backward");
}

// ---- the vector kernels, at every level this CPU runs ----

struct Level {
  const char* name;
  const cpu::ActivationF32Kernels* kernels;
};

std::vector<Level> levels() {
  std::vector<Level> out;
  cpu::SimdLevel level = cpu::simd_level();
  if (level >= cpu::SimdLevel::Avx2) out.push_back({"avx2", &cpu::activation_f32_avx2});
  if (level >= cpu::SimdLevel::Avx512) out.push_back({"avx512", &cpu::activation_f32_avx512});
  return out;
}

// |got - ref| in float32 ulps of ref; NaN and infinities must match exactly.
double ulps(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(static_cast<float>(ref))) return static_cast<float>(ref) == got ? 0 : INFINITY;
  return std::fabs(got - ref) / reference::float_ulp(ref);
}

TEST(ActivationSimd, EluAndItsGradientOverDenseSweeps) {
  if (levels().empty()) GTEST_SKIP() << "no vector level on this CPU";
  std::vector<float> x = reference::sweep(-25, 10, 1000003);
  for (float v : reference::sweep(-0.4, 0.4, 200003)) x.push_back(v);  // where e^x - 1 must keep its relative precision
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), g(x.size(), 1.0f);
  for (const Level& level : levels()) {
    for (float alpha : {1.0f, 0.3f}) {
      level.kernels->elu(y.data(), x.data(), n, alpha);
      double worst = 0, worst_grad = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        worst = std::max(worst, ulps(y[i], elu_reference(x[i], static_cast<double>(alpha))));
      }
      // The derivative from the input, alpha e^x from -104 (where float
      // e^x underflows) up: one rounding of g alpha, then e^x's ulp.
      std::vector<float> xg = reference::sweep(-104, 10, 1000003), d(xg.size());
      level.kernels->elu_backward(d.data(), g.data(), 0, xg.data(), 1, static_cast<int64_t>(xg.size()), alpha, false);
      for (size_t i = 0; i < xg.size(); ++i) {
        double ref = std::isnan(xg[i]) || xg[i] > 0 ? 1.0 : static_cast<double>(alpha) * std::exp(double{xg[i]});
        if (std::fabs(ref) < FLT_MIN) continue;  // subnormal results: absolute error, covered below
        worst_grad = std::max(worst_grad, ulps(d[i], ref));
      }
      EXPECT_LE(worst, 2.0) << level.name << " elu alpha " << alpha;
      EXPECT_LE(worst_grad, 2.5) << level.name << " elu_backward alpha " << alpha;
      std::cout << "[ accuracy ] " << level.name << " elu alpha " << alpha << ": " << worst
                << " ulp, its derivative " << worst_grad << " ulp\n";
    }
  }
}

TEST(ActivationSimd, EveryLengthAndStepMatchesTheScalarReference) {
  // Lengths 0..40 cover runs shorter than a vector and every tail; broadcast
  // steps (0) too. The selections (hardtanh's gradient, elu's from the
  // output) are exact, so bit for bit equal to the scalar float formulas;
  // elu and its derivative from the input differ only by e^x's ulps.
  std::vector<float> x(64), g(64), out(65);
  std::vector<double> v = pseudo_random(64, -4, 4, 11), w = pseudo_random(64, -3, 3, 12);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(v[i]), g[i] = static_cast<float>(w[i]);
  x[5] = -1.0f, x[6] = 1.0f, x[7] = 0.0f, x[8] = std::numeric_limits<float>::quiet_NaN();
  const float alpha = 0.6f, lo = -1.0f, hi = 1.0f;
  for (const Level& level : levels()) {
    for (int64_t n = 0; n <= 40; ++n) {
      std::fill(out.begin(), out.end(), -12345.0f);
      level.kernels->elu(out.data(), x.data(), n, alpha);
      for (int64_t i = 0; i < n; ++i) {
        float want = x[i] <= 0 ? alpha * std::expm1(x[i]) : x[i];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(out[i]));
        } else {
          EXPECT_LE(ulps(out[i], want), 3.0) << level.name << " elu n=" << n << " x=" << x[i];
        }
      }
      EXPECT_EQ(out[n], -12345.0f) << level.name << " elu wrote past the end, n=" << n;
      for (int steps = 0; steps < 4; ++steps) {
        const int64_t g_step = steps & 1, x_step = steps >> 1;
        const std::string what = std::string(level.name) + " n=" + std::to_string(n) + " steps " +
                                 std::to_string(steps);
        auto gi = [&](int64_t i) { return g[i * g_step]; };
        auto xi = [&](int64_t i) { return x[i * x_step]; };
        std::fill(out.begin(), out.end(), -12345.0f);
        level.kernels->hardtanh_backward(out.data(), g.data(), g_step, x.data(), x_step, n, lo, hi);
        for (int64_t i = 0; i < n; ++i) {
          float want = xi(i) <= lo || xi(i) >= hi ? 0.0f : gi(i);
          EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want)) << what << " hardtanh_backward";
        }
        EXPECT_EQ(out[n], -12345.0f) << what;
        std::fill(out.begin(), out.end(), -12345.0f);
        level.kernels->elu_backward(out.data(), g.data(), g_step, x.data(), x_step, n, alpha, true);
        for (int64_t i = 0; i < n; ++i) {
          float want = xi(i) <= 0 ? gi(i) * (xi(i) + alpha) : gi(i);
          EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want)) << what << " from the output";
        }
        EXPECT_EQ(out[n], -12345.0f) << what;
        std::fill(out.begin(), out.end(), -12345.0f);
        level.kernels->elu_backward(out.data(), g.data(), g_step, x.data(), x_step, n, alpha, false);
        for (int64_t i = 0; i < n; ++i) {
          float want = xi(i) <= 0 ? gi(i) * alpha * std::exp(xi(i)) : gi(i);
          if (std::isnan(xi(i))) {
            EXPECT_EQ(out[i], gi(i)) << what << " NaN passes g";
          } else {
            EXPECT_LE(ulps(out[i], want), 3.0) << what << " from the input";
          }
        }
        EXPECT_EQ(out[n], -12345.0f) << what;
      }
    }
  }
}

TEST(ActivationSimd, VectorAndScalarPathsOfThePublicOpsAgree) {
  // The same float32 values contiguous (the vector kernel, at this CPU's
  // level) and every other element of a wider tensor (the scalar loop).
  std::vector<double> v = pseudo_random(4096, -9, 9, 21);
  v[0] = -1.0, v[1] = 1.0, v[2] = 0.0;
  Tensor x = from_vector<double>(v).to(DType::Float32);
  Tensor g = from_vector<double>(pseudo_random(4096, -2, 2, 22)).to(DType::Float32);
  auto strided = [](const Tensor& t) { return ops::stack({t, t}, 1).view({-1}).slice(0, 0, 2 * t.numel(), 2); };
  Tensor xs = strided(x), gs = strided(g);
  ASSERT_FALSE(xs.is_contiguous());
  auto compare = [](const Tensor& fast, const Tensor& slow, double max_ulps, const std::string& what) {
    std::vector<double> a = values(fast), b = values(slow);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LE(ulps(static_cast<float>(a[i]), b[i]), max_ulps) << what << " at " << i;
    }
  };
  compare(ops::elu(x, 1.3), ops::elu(xs, 1.3), 3, "elu");
  compare(ops::elu_backward(g, x, 1.3, false), ops::elu_backward(gs, xs, 1.3, false), 3, "elu_backward");
  Tensor y = ops::elu(x, 1.3);
  compare(ops::elu_backward(g, y, 1.3, true), ops::elu_backward(gs, strided(y), 1.3, true), 0, "from the output");
  compare(ops::hardtanh_backward(g, x, -1.0, 6.0), ops::hardtanh_backward(gs, xs, -1.0, 6.0), 0, "hardtanh_backward");
}

}  // namespace
}  // namespace kiln
