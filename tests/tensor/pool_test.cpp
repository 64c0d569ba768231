// 2-d pooling against float64 reference loops written here from torch's
// definitions, backward as the adjoint of forward, and error messages
// (pool_torch_test.cpp compares with torch itself).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t k = 0; k < t.numel(); ++k) v[k] = flat_value(t, k);
  return v;
}

std::vector<int64_t> indices_of(const Tensor& t) {
  Tensor c = t.contiguous();
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

Tensor make(const std::vector<double>& v, const Shape& shape, DType dtype = DType::Float64) {
  return from_vector<double>(v, shape).to(dtype);
}

// NaN equals NaN, infinities must match exactly.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    bool ok = std::isnan(want[i])   ? std::isnan(got[i])
              : std::isinf(want[i]) ? got[i] == want[i]
                                    : std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- the reference ----

// One pooling problem: x of `shape`, window arguments as torch's.
struct Case {
  Shape shape;
  Size2d kernel, stride, padding = 0, dilation = 1;
  bool ceil_mode = false;
};

MaxPool2dOptions max_options(const Case& c) {
  return {.kernel = c.kernel, .stride = c.stride, .padding = c.padding, .dilation = c.dilation,
          .ceil_mode = c.ceil_mode};
}

std::string describe(const Case& c) {
  return detail::str(c.shape, " k=", c.kernel.h, "x", c.kernel.w, " s=", c.stride.h, "x", c.stride.w, " p=",
                     c.padding.h, "x", c.padding.w, " d=", c.dilation.h, "x", c.dilation.w,
                     c.ceil_mode ? " ceil" : "");
}

// torch's output size, written with floating floor/ceil rather than integer tricks.
int64_t ref_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

struct Dims {
  int64_t planes, h, w, oh, ow;
};
Dims dims_of(const Case& c) {
  int64_t h = c.shape[c.shape.size() - 2], w = c.shape.back();
  return {shape_numel(c.shape) / (h * w), h, w,
          ref_out(h, c.kernel.h, c.stride.h, c.padding.h, c.dilation.h, c.ceil_mode),
          ref_out(w, c.kernel.w, c.stride.w, c.padding.w, c.dilation.w, c.ceil_mode)};
}

// Calls fn(out, iy, ix) for every tap of every window that lies inside the
// input, out being the flat output position (plane-major).
template <class Fn>
void for_each_tap(const Case& c, const Fn& fn) {
  Dims d = dims_of(c);
  for (int64_t p = 0; p < d.planes; ++p)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t ki = 0; ki < c.kernel.h; ++ki)
          for (int64_t kj = 0; kj < c.kernel.w; ++kj) {
            int64_t iy = oy * c.stride.h - c.padding.h + ki * c.dilation.h;
            int64_t ix = ox * c.stride.w - c.padding.w + kj * c.dilation.w;
            if (iy >= 0 && iy < d.h && ix >= 0 && ix < d.w) fn((p * d.oh + oy) * d.ow + ox, p, iy, ix);
          }
}

// Max pooling by definition: NaN wins (the last one), ties keep the first.
void ref_max_pool(const std::vector<double>& x, const Case& c, std::vector<double>& values,
                  std::vector<int64_t>& indices) {
  Dims d = dims_of(c);
  values.assign(d.planes * d.oh * d.ow, -kInf);
  indices.assign(values.size(), -1);
  for_each_tap(c, [&](int64_t o, int64_t p, int64_t iy, int64_t ix) {
    double v = x[(p * d.h + iy) * d.w + ix];
    if (indices[o] < 0 || v > values[o] || std::isnan(v)) {
      values[o] = v;
      indices[o] = iy * d.w + ix;
    }
  });
}

// The divisor of window o (flat within a plane) as torch's avg_pool2d.
int64_t ref_divisor(const Case& c, int64_t oy, int64_t ox, bool count_include_pad) {
  Dims d = dims_of(c);
  int64_t h0 = oy * c.stride.h - c.padding.h, w0 = ox * c.stride.w - c.padding.w;
  int64_t h1 = std::min(h0 + c.kernel.h, d.h + c.padding.h), w1 = std::min(w0 + c.kernel.w, d.w + c.padding.w);
  if (count_include_pad) return (h1 - h0) * (w1 - w0);
  return (std::min(h1, d.h) - std::max<int64_t>(h0, 0)) * (std::min(w1, d.w) - std::max<int64_t>(w0, 0));
}

std::vector<double> ref_avg_pool(const std::vector<double>& x, const Case& c, bool include_pad,
                                 std::optional<int64_t> divisor_override) {
  Dims d = dims_of(c);
  std::vector<double> out(d.planes * d.oh * d.ow, 0.0);
  for_each_tap(c, [&](int64_t o, int64_t p, int64_t iy, int64_t ix) { out[o] += x[(p * d.h + iy) * d.w + ix]; });
  for (size_t o = 0; o < out.size(); ++o) {
    int64_t oy = (o / d.ow) % d.oh, ox = o % d.ow;
    out[o] /= static_cast<double>(divisor_override.value_or(ref_divisor(c, oy, ox, include_pad)));
  }
  return out;
}

std::vector<double> ref_avg_pool_backward(const std::vector<double>& g, const Case& c, bool include_pad,
                                          std::optional<int64_t> divisor_override) {
  Dims d = dims_of(c);
  std::vector<double> gx(d.planes * d.h * d.w, 0.0);
  for_each_tap(c, [&](int64_t o, int64_t p, int64_t iy, int64_t ix) {
    int64_t oy = (o / d.ow) % d.oh, ox = o % d.ow;
    double divisor = static_cast<double>(divisor_override.value_or(ref_divisor(c, oy, ox, include_pad)));
    gx[(p * d.h + iy) * d.w + ix] += g[o] / divisor;
  });
  return gx;
}

// Adaptive windows: rows floor(i*H/oh) .. ceil((i+1)*H/oh) - 1, in float64 math.
std::vector<double> ref_adaptive(const std::vector<double>& x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                                 int64_t ow, const std::vector<double>* grad, std::vector<double>* grad_x) {
  std::vector<double> out(planes * oh * ow, 0.0);
  if (grad_x) grad_x->assign(planes * h * w, 0.0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double y0 = std::floor(double(i) * h / oh), y1 = std::ceil(double(i + 1) * h / oh);
        double x0 = std::floor(double(j) * w / ow), x1 = std::ceil(double(j + 1) * w / ow);
        double area = (y1 - y0) * (x1 - x0);
        int64_t o = (p * oh + i) * ow + j;
        for (auto iy = static_cast<int64_t>(y0); iy < y1; ++iy)
          for (auto ix = static_cast<int64_t>(x0); ix < x1; ++ix) {
            out[o] += x[(p * h + iy) * w + ix] / area;
            if (grad_x) (*grad_x)[(p * h + iy) * w + ix] += (*grad)[o] / area;
          }
      }
  return out;
}

// Padding, stride != kernel, dilation, ceil_mode (with a last window
// overhanging the input), odd sizes, non-square arguments, 1x1, LeNet.
std::vector<Case> cases() {
  return {{{2, 3, 28, 28}, 2, 2},
          {{2, 4, 10, 10}, 2, 2},
          {{2, 3, 7, 9}, 2, 2},
          {{2, 3, 5, 7}, 2, 2, 0, 1, true},
          {{2, 3, 7, 6}, 3, 2, 1},
          {{1, 2, 9, 8}, {3, 2}, {2, 1}, {1, 0}},
          {{2, 2, 9, 9}, 3, 1, 1, 2},
          {{2, 2, 9, 9}, 2, 2, 0, 2},
          {{1, 3, 8, 11}, {2, 4}, {3, 2}, {1, 2}, {2, 1}},
          {{2, 3, 6, 6}, 3, 2, 0, 1, true},
          {{1, 2, 7, 8}, 3, 3, 1, 1, true},
          {{1, 2, 10, 9}, {4, 3}, {3, 2}, {2, 1}, {1, 2}, true},
          {{2, 3, 5, 4}, 1, 1},
          {{3, 11, 13}, 3, 2, 1}};
}

TEST(PoolOutputSize, FollowsTorchFloorAndCeilRules) {
  EXPECT_EQ(pool_output_size(28, 2, 2, 0, 1, false), 14);
  EXPECT_EQ(pool_output_size(5, 2, 2, 0, 1, false), 2);
  EXPECT_EQ(pool_output_size(5, 2, 2, 0, 1, true), 3);
  // ceil_mode's extra window would start at 6 >= 5 + 1 (inside the right padding): dropped.
  EXPECT_EQ(pool_output_size(5, 2, 3, 1, 1, true), 2);
  EXPECT_EQ(pool_output_size(6, 3, 2, 0, 1, true), 3);
  EXPECT_EQ(pool_output_size(9, 3, 1, 1, 2, false), 7);
  EXPECT_EQ(pool_output_size(5, 7, 1, 0, 1, false), -1);  // floor(-2 / 1) + 1
  EXPECT_EQ(pool_output_size(2, 9, 2, 0, 1, false), -3);  // floor(-7 / 2) + 1; truncation would give -2
  for (int64_t in = 1; in < 12; ++in)
    for (int64_t k = 1; k < 5; ++k)
      for (int64_t s = 1; s < 4; ++s)
        for (int64_t p = 0; p <= k / 2; ++p)
          for (int64_t d = 1; d < 3; ++d)
            for (bool ceil_mode : {false, true})
              EXPECT_EQ(pool_output_size(in, k, s, p, d, ceil_mode), ref_out(in, k, s, p, d, ceil_mode))
                  << in << " " << k << " " << s << " " << p << " " << d << " " << ceil_mode;
}

TEST(MaxPool2d, MatchesReferenceForEveryGeometry) {
  for (const Case& c : cases()) {
    // Coarse values make ties common, so the first-maximum rule is exercised.
    std::vector<double> xv = pseudo_random(shape_numel(c.shape), -4, 4, 3);
    for (double& v : xv) v = std::round(v);
    std::vector<double> want;
    std::vector<int64_t> want_idx;
    ref_max_pool(xv, c, want, want_idx);
    for (DType dtype : {DType::Float64, DType::Float32, DType::BFloat16}) {
      PoolResult r = max_pool2d_with_indices(make(xv, c.shape, dtype), max_options(c));
      Dims d = dims_of(c);
      Shape out_shape = c.shape;
      out_shape[out_shape.size() - 2] = d.oh;
      out_shape.back() = d.ow;
      ASSERT_EQ(r.values.shape(), out_shape) << describe(c);
      EXPECT_EQ(r.values.dtype(), dtype);
      EXPECT_EQ(r.indices.dtype(), DType::Int64);
      EXPECT_EQ(values_of(r.values), want) << describe(c) << " " << dtype;
      EXPECT_EQ(indices_of(r.indices), want_idx) << describe(c) << " " << dtype;
      // The values-only form (inference) gives the same values.
      EXPECT_EQ(values_of(max_pool2d(make(xv, c.shape, dtype), max_options(c))), want) << describe(c) << " " << dtype;
    }
  }
}

TEST(MaxPool2d, NaNWinsAndInfinitiesCompare) {
  // Each 2x2 window of the plane tests one rule: two NaNs (the last wins),
  // inf, all -inf (the first tap's index), a tie (the first wins).
  std::vector<double> xv = {kNaN, kInf, 3, kInf,   //
                            kNaN, 5, 2, -kInf,     //
                            -kInf, -kInf, 7, 7,    //
                            -kInf, -kInf, 7, 6};
  Tensor x = make(xv, {1, 1, 4, 4}, DType::Float32);
  PoolResult r = max_pool2d_with_indices(x, {.kernel = 2});
  EXPECT_EQ(indices_of(r.indices), (std::vector<int64_t>{4, 3, 8, 10}));
  expect_close(values_of(r.values), {kNaN, kInf, -kInf, 7}, 0, "2x2");
  expect_close(values_of(max_pool2d(x, {.kernel = 2})), {kNaN, kInf, -kInf, 7}, 0, "2x2 values only");
  // The general path (padding) against the reference.
  MaxPool2dOptions o{.kernel = 3, .stride = 1, .padding = 1};
  Case c{{1, 1, 4, 4}, 3, 1, 1};
  std::vector<double> want;
  std::vector<int64_t> want_idx;
  ref_max_pool(xv, c, want, want_idx);
  r = max_pool2d_with_indices(x, o);
  expect_close(values_of(r.values), want, 0, describe(c));
  EXPECT_EQ(indices_of(r.indices), want_idx) << describe(c);
}

// Float32 2x2 pooling without indices runs an AVX2 kernel when rows are
// exactly two windows wide (tensor/cpu/pool_avx2.cpp): widths from 2 to 40
// reach its vector loops with every tail length and rows narrower than a
// vector, odd heights leave a last row unread, and the values (coarse, so
// ties are common, with NaNs, infinities and zeros of both signs) must
// equal the reference's, the sign of each zero included. An odd width takes
// the general path and must agree as well.
TEST(MaxPool2d, TwoByTwoValuesOnlyForEveryRowWidth) {
  uint64_t seed = 40;
  for (int64_t w = 2; w <= 41; ++w) {
    for (int64_t h : {2, 3, 6}) {
      Case c{{2, 3, h, w}, 2, 2};
      std::vector<double> xv = pseudo_random(shape_numel(c.shape), -3, 3, seed++);
      for (size_t i = 0; i < xv.size(); ++i) {
        double v = std::round(xv[i]);
        xv[i] = i % 13 == 0 ? kNaN : i % 17 == 0 ? -kInf : v == 0 && i % 2 ? -0.0 : v;
      }
      std::vector<double> want;
      std::vector<int64_t> want_idx;
      ref_max_pool(xv, c, want, want_idx);
      std::vector<double> got = values_of(max_pool2d(make(xv, c.shape, DType::Float32), max_options(c)));
      ASSERT_EQ(got.size(), want.size()) << describe(c);
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << describe(c) << " at " << i;
        } else {
          EXPECT_EQ(got[i], want[i]) << describe(c) << " at " << i;
          EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << describe(c) << " at " << i;
        }
      }
    }
  }
}

TEST(MaxPool2d, WindowWithNoTapInsideGivesMinusInfAndIndexMinusOne) {
  // H = W = 1, kernel 2 with dilation 2 and padding 1: the taps are at -1 and 1.
  Tensor x = make({5.0}, {1, 1, 1, 1});
  PoolResult r = max_pool2d_with_indices(x, {.kernel = 2, .stride = 1, .padding = 1, .dilation = 2});
  ASSERT_EQ(r.values.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(r.values.at<double>({0, 0, 0, 0}), -kInf);
  EXPECT_EQ(r.indices.at<int64_t>({0, 0, 0, 0}), -1);
  Tensor g = max_pool2d_backward(make({3.0}, {1, 1, 1, 1}), x.shape(), r.indices,
                                 {.kernel = 2, .stride = 1, .padding = 1, .dilation = 2});
  EXPECT_EQ(values_of(g), std::vector<double>{0.0});
}

TEST(MaxPool2d, NonContiguousAndThreeDimInputsMatchContiguous) {
  std::vector<double> xv = pseudo_random(2 * 3 * 9 * 8, -1, 1, 5);
  Tensor base = make(xv, {2, 3, 9, 8}, DType::Float32);
  MaxPool2dOptions o{.kernel = 3, .stride = 2, .padding = 1};
  // A transposed view (W and H swapped) and a channel slice with a step.
  Tensor t = base.transpose(2, 3);
  ASSERT_FALSE(t.is_contiguous());
  PoolResult want_t = max_pool2d_with_indices(t.contiguous(), o);
  PoolResult got_t = max_pool2d_with_indices(t, o);
  EXPECT_EQ(values_of(got_t.values), values_of(want_t.values));
  EXPECT_EQ(indices_of(got_t.indices), indices_of(want_t.indices));
  Tensor s = base.slice(1, 0, 3, 2);
  PoolResult got_s = max_pool2d_with_indices(s, o);
  EXPECT_EQ(values_of(got_s.values), values_of(max_pool2d_with_indices(s.contiguous(), o).values));
  // (C, H, W) pools as (1, C, H, W) and keeps its rank.
  Tensor plane = base.select(0, 1);
  PoolResult r3 = max_pool2d_with_indices(plane, o);
  PoolResult r4 = max_pool2d_with_indices(plane.unsqueeze(0), o);
  EXPECT_EQ(r3.values.shape(), (Shape{3, 5, 4}));
  EXPECT_EQ(values_of(r3.values), values_of(r4.values));
  EXPECT_EQ(indices_of(r3.indices), indices_of(r4.indices));
}

TEST(MaxPool2d, BackwardScatterAddsAlongIndices) {
  for (const Case& c : cases()) {
    std::vector<double> xv = pseudo_random(shape_numel(c.shape), -1, 1, 7);
    PoolResult r = max_pool2d_with_indices(make(xv, c.shape), max_options(c));
    std::vector<double> gv = pseudo_random(r.values.numel(), -1, 1, 8);
    std::vector<int64_t> idx = indices_of(r.indices);
    Dims d = dims_of(c);
    std::vector<double> want(xv.size(), 0.0);
    for (size_t o = 0; o < gv.size(); ++o) {
      int64_t p = static_cast<int64_t>(o) / (d.oh * d.ow);
      want[p * d.h * d.w + idx[o]] += gv[o];
    }
    for (auto [dtype, tol] : {std::pair{DType::Float64, 1e-15}, {DType::Float32, 1e-6}, {DType::BFloat16, 2e-2}}) {
      Tensor gx = max_pool2d_backward(make(gv, r.values.shape(), dtype), c.shape, r.indices, max_options(c));
      EXPECT_EQ(gx.shape(), c.shape);
      EXPECT_EQ(gx.dtype(), dtype);
      expect_close(values_of(gx), want, tol, describe(c) + " " + std::string(dtype_name(dtype)));
    }
  }
}

TEST(MaxPool2d, LeNetShapesGiveTheSameResultOnAnyThreadCount) {
  Tensor x = make(pseudo_random(64 * 16 * 10 * 10, -1, 1, 9), {64, 16, 10, 10}, DType::Float32);
  int threads = get_num_threads();
  set_num_threads(1);
  PoolResult one = max_pool2d_with_indices(x, {.kernel = 2});
  Tensor g_one = max_pool2d_backward(one.values, x.shape(), one.indices, {.kernel = 2});
  set_num_threads(4);
  PoolResult four = max_pool2d_with_indices(x, {.kernel = 2});
  Tensor g_four = max_pool2d_backward(four.values, x.shape(), four.indices, {.kernel = 2});
  set_num_threads(threads);
  EXPECT_EQ(values_of(one.values), values_of(four.values));
  EXPECT_EQ(indices_of(one.indices), indices_of(four.indices));
  EXPECT_EQ(values_of(g_one), values_of(g_four));
}

TEST(AvgPool2d, MatchesReferenceForEveryGeometryAndDivisor) {
  for (const Case& c : cases()) {
    if (c.dilation.h != 1 || c.dilation.w != 1) continue;  // avg_pool2d has no dilation
    std::vector<double> xv = pseudo_random(shape_numel(c.shape), -1, 1, 11);
    for (bool include_pad : {true, false}) {
      for (std::optional<int64_t> divisor : {std::optional<int64_t>{}, std::optional<int64_t>{3}}) {
        AvgPool2dOptions o{.kernel = c.kernel, .stride = c.stride, .padding = c.padding, .ceil_mode = c.ceil_mode,
                           .count_include_pad = include_pad, .divisor_override = divisor};
        std::string what = describe(c) + (include_pad ? " include_pad" : "") + (divisor ? " divisor 3" : "");
        std::vector<double> want = ref_avg_pool(xv, c, include_pad, divisor);
        expect_close(values_of(avg_pool2d(make(xv, c.shape), o)), want, 1e-14, what);
        expect_close(values_of(avg_pool2d(make(xv, c.shape, DType::Float32), o)), want, 1e-6, what);
        expect_close(values_of(avg_pool2d(make(xv, c.shape, DType::Float16), o)), want, 2e-3, what);

        // Backward: against the reference, and as forward's adjoint:
        // <g, avg(x)> == <avg_backward(g), x> because avg_pool2d is linear.
        Tensor y = avg_pool2d(make(xv, c.shape), o);
        std::vector<double> gv = pseudo_random(y.numel(), -1, 1, 12);
        Tensor gx = avg_pool2d_backward(make(gv, y.shape()), c.shape, o);
        ASSERT_EQ(gx.shape(), c.shape) << what;
        std::vector<double> gxv = values_of(gx);
        expect_close(gxv, ref_avg_pool_backward(gv, c, include_pad, divisor), 1e-14, what);
        EXPECT_NEAR(dot(gv, values_of(y)), dot(gxv, xv), 1e-12) << what;
        Tensor gx32 = avg_pool2d_backward(make(gv, y.shape(), DType::Float32), c.shape, o);
        expect_close(values_of(gx32), gxv, 1e-6, what);
      }
    }
  }
}

TEST(AvgPool2d, NonContiguousInputMatchesContiguous) {
  Tensor x = make(pseudo_random(2 * 3 * 8 * 7, -1, 1, 13), {2, 3, 8, 7}).transpose(2, 3);
  AvgPool2dOptions o{.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false};
  EXPECT_EQ(values_of(avg_pool2d(x, o)), values_of(avg_pool2d(x.contiguous(), o)));
  // A broadcast (stride 0) gradient, as autograd hands out for a sum.
  Tensor g = make({1.0}, {1, 1, 1, 1}).expand({2, 3, 4, 4});
  EXPECT_EQ(values_of(avg_pool2d_backward(g, x.shape(), o)),
            values_of(avg_pool2d_backward(g.contiguous(), x.shape(), o)));
}

TEST(AdaptiveAvgPool2d, MatchesReferenceAndIsItsBackwardsAdjoint) {
  struct Sizes {
    int64_t h, w, oh, ow;
  };
  for (Sizes s : {Sizes{7, 7, 1, 1}, Sizes{10, 9, 3, 4}, Sizes{5, 7, 5, 7}, Sizes{4, 3, 6, 5}, Sizes{28, 28, 7, 7},
                  Sizes{13, 11, 4, 3}}) {
    Shape shape{2, 3, s.h, s.w};
    std::string what = detail::str(shape, " -> ", s.oh, "x", s.ow);
    std::vector<double> xv = pseudo_random(shape_numel(shape), -1, 1, 17);
    std::vector<double> gv = pseudo_random(6 * s.oh * s.ow, -1, 1, 18);
    std::vector<double> want_gx;
    std::vector<double> want = ref_adaptive(xv, 6, s.h, s.w, s.oh, s.ow, &gv, &want_gx);
    Tensor y = adaptive_avg_pool2d(make(xv, shape), {s.oh, s.ow});
    ASSERT_EQ(y.shape(), (Shape{2, 3, s.oh, s.ow})) << what;
    expect_close(values_of(y), want, 1e-14, what);
    expect_close(values_of(adaptive_avg_pool2d(make(xv, shape, DType::Float32), {s.oh, s.ow})), want, 1e-6, what);
    Tensor gx = adaptive_avg_pool2d_backward(make(gv, y.shape()), shape);
    expect_close(values_of(gx), want_gx, 1e-14, what);
    EXPECT_NEAR(dot(gv, values_of(y)), dot(values_of(gx), xv), 1e-12) << what;
  }
  // (C, H, W) input, and output size 0 giving an empty result with a zero gradient.
  Tensor x = make(pseudo_random(3 * 5 * 5, -1, 1, 19), {3, 5, 5});
  EXPECT_EQ(adaptive_avg_pool2d(x, 2).shape(), (Shape{3, 2, 2}));
  Tensor empty = adaptive_avg_pool2d(x, {0, 2});
  EXPECT_EQ(empty.shape(), (Shape{3, 0, 2}));
  EXPECT_EQ(values_of(adaptive_avg_pool2d_backward(empty, x.shape())), std::vector<double>(75, 0.0));
}

TEST(Pool2d, EmptyBatchGivesEmptyResults) {
  Tensor x = Tensor::empty({0, 3, 8, 8});
  PoolResult r = max_pool2d_with_indices(x, {.kernel = 2});
  EXPECT_EQ(r.values.shape(), (Shape{0, 3, 4, 4}));
  EXPECT_EQ(max_pool2d_backward(r.values, x.shape(), r.indices, {.kernel = 2}).shape(), x.shape());
  EXPECT_EQ(avg_pool2d(x, {.kernel = 3}).shape(), (Shape{0, 3, 2, 2}));
  EXPECT_EQ(adaptive_avg_pool2d(x, 1).shape(), (Shape{0, 3, 1, 1}));
}

TEST(Pool2d, RejectsBadArgumentsWithHelpfulMessages) {
  Tensor x = Tensor::empty({1, 2, 5, 5});
  expect_error([&] { max_pool2d_with_indices(Tensor::empty({5, 5}), {.kernel = 2}); },
               "max_pool2d: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape [5, 5]");
  expect_error([&] { avg_pool2d(Tensor::empty({2, 0, 5, 5}), {.kernel = 2}); },
               "avg_pool2d: expected input with non-zero C, H and W (only N may be 0), got shape [2, 0, 5, 5]");
  expect_error([&] { max_pool2d_with_indices(Tensor::empty({1, 2, 5, 5}, DType::Int64), {.kernel = 2}); },
               "max_pool2d: expected a floating point input, got int64");
  expect_error([&] { max_pool2d_with_indices(x, {.kernel = {0, 2}}); },
               "max_pool2d: kernel size must be positive, got 0 x 2");
  expect_error([&] { avg_pool2d(x, {.kernel = 2, .stride = Size2d(1, -1)}); },
               "avg_pool2d: stride must be positive, got 1 x -1");
  expect_error([&] { max_pool2d_with_indices(x, {.kernel = 2, .dilation = 0}); },
               "max_pool2d: dilation must be positive, got 0 x 0");
  expect_error([&] { max_pool2d_with_indices(x, {.kernel = 2, .padding = -1}); },
               "max_pool2d: padding must be non-negative, got -1 x -1");
  expect_error([&] { avg_pool2d(x, {.kernel = 3, .padding = {1, 2}}); },
               "avg_pool2d: padding must be at most half the kernel size, got padding 1 x 2 for kernel 3 x 3");
  expect_error([&] { max_pool2d_with_indices(x, {.kernel = 7}); },
               "max_pool2d: input 5 x 5 is too small for kernel 7 x 7 with padding 0 x 0, dilation 1 x 1 and "
               "stride 7 x 7: the output would be 0 x 0");
  expect_error([&] { avg_pool2d(x, {.kernel = 2, .divisor_override = 0}); },
               "avg_pool2d: divisor_override must be non-zero");
  expect_error([&] { adaptive_avg_pool2d(x, {-1, 2}); },
               "adaptive_avg_pool2d: output size must be non-negative, got -1 x 2");
  expect_error([&] { adaptive_avg_pool2d(Tensor::empty({1, 5, 5}, DType::Int32), 2); },
               "adaptive_avg_pool2d: expected a floating point input, got int32");
}

TEST(Pool2d, BackwardRejectsMismatchedGradients) {
  Tensor x = Tensor::empty({2, 3, 6, 6});
  PoolResult r = max_pool2d_with_indices(zeros({2, 3, 6, 6}), {.kernel = 2});
  const MaxPool2dOptions k2{.kernel = 2};
  expect_error([&] { max_pool2d_backward(zeros({2, 3, 3, 2}), x.shape(), r.indices, k2); },
               "max_pool2d_backward: grad_out of shape [2, 3, 3, 2] does not match indices of shape [2, 3, 3, 3]");
  expect_error([&] { max_pool2d_backward(r.values, x.shape(), r.indices.to(DType::Int32), k2); },
               "max_pool2d_backward: expected int64 indices, got int32");
  expect_error([&] { max_pool2d_backward(r.values, {2, 4, 6, 6}, r.indices, k2); },
               "max_pool2d_backward: grad_out of shape [2, 3, 3, 3] does not fit input shape [2, 4, 6, 6] "
               "(expected the same rank and the same sizes but the last two)");
  expect_error([&] { max_pool2d_backward(r.values, {6, 6}, r.indices, k2); },
               "max_pool2d_backward: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input shape, got shape [6, 6]");
  expect_error([&] { max_pool2d_backward(r.values.to(DType::Int64), x.shape(), r.indices, k2); },
               "max_pool2d_backward: expected a floating point grad_out, got int64");
  Tensor bad = full({1, 1, 1, 1}, 4, DType::Int64);
  expect_error([&] { max_pool2d_backward(zeros({1, 1, 1, 1}), {1, 1, 2, 2}, bad, k2); },
               "max_pool2d_backward: index 4 at position 0 of plane 0 is outside the input plane of 2 x 2 elements");
  Tensor negative = full({1, 2, 1, 1}, -2, DType::Int64);
  expect_error([&] { max_pool2d_backward(zeros({1, 2, 1, 1}), {1, 2, 2, 2}, negative, k2); },
               "max_pool2d_backward: index -2 at position 0 of plane 0 is outside the input plane of 2 x 2 elements");
  // grad_out must have the shape the options give the input.
  expect_error([&] { max_pool2d_backward(zeros({2, 3, 2, 2}), x.shape(), zeros({2, 3, 2, 2}, DType::Int64), k2); },
               "max_pool2d_backward: expected grad_out of shape [2, 3, 3, 3] for input shape [2, 3, 6, 6], got "
               "[2, 3, 2, 2]");
  expect_error([&] { avg_pool2d_backward(zeros({2, 3, 3, 2}), x.shape(), {.kernel = 2}); },
               "avg_pool2d_backward: expected grad_out of shape [2, 3, 3, 3] for input shape [2, 3, 6, 6], got "
               "[2, 3, 3, 2]");
  expect_error([&] { adaptive_avg_pool2d_backward(zeros({2, 3, 2, 2}), {3, 6, 6}); },
               "adaptive_avg_pool2d_backward: grad_out of shape [2, 3, 2, 2] does not fit input shape [3, 6, 6]");
}

}  // namespace
}  // namespace kiln
