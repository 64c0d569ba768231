// im2col / col2im against naive loops, a direct convolution, and each other
// (col2im is im2col's adjoint).
#include <gtest/gtest.h>

#include <random>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t k = 0; k < t.numel(); ++k) v[k] = flat_value(t, k);
  return v;
}

Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 100);
  std::vector<double> v(shape_numel(shape));
  for (double& e : v) e = is_floating(dtype) ? real(rng) : small(rng);
  return from_vector<double>(v, shape).to(dtype);
}

// One case: the settings and the shape of one group they give.
struct Case {
  Conv2dShape s;
  Conv2dParams p;
};

Case geometry(int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh = 1, int64_t sw = 1, int64_t ph = 0,
              int64_t pw = 0, int64_t dh = 1, int64_t dw = 1) {
  const Conv2dParams p{.stride = {sh, sw}, .padding = {ph, pw}, .dilation = {dh, dw}};
  return {conv2d_shape(c, {h, w}, {kh, kw}, p), p};
}

std::string describe(const Case& g) {
  return detail::str("C=", g.s.channels, " ", g.s.input.h, "x", g.s.input.w, " k=", g.s.kernel.h, "x", g.s.kernel.w,
                     " s=", g.p.stride.h, "x", g.p.stride.w, " p=", g.p.padding.h, "x", g.p.padding.w,
                     " d=", g.p.dilation.h, "x", g.p.dilation.w);
}

// ops::im2col and ops::col2im for a case.
Tensor unfold(const Tensor& x, const Case& g) { return im2col(x, g.s.kernel, g.p); }
Tensor fold(const Tensor& cols, const Case& g) { return col2im(cols, g.s.input, g.s.kernel, g.p); }

// The geometries every test runs: stride 2, padding 1 and 2, dilation 2,
// non-square kernels, 1x1, and LeNet's two convolutions.
std::vector<Case> geometries() {
  return {geometry(1, 4, 4, 3, 3),
          geometry(2, 7, 6, 3, 3, 2, 2, 1, 1),
          geometry(3, 9, 8, 3, 2, 1, 2, 2, 1),
          geometry(2, 9, 9, 3, 3, 1, 1, 1, 1, 2, 2),
          geometry(2, 8, 11, 2, 4, 3, 2, 2, 2, 2, 1),
          geometry(4, 5, 5, 1, 1),
          geometry(1, 3, 3, 5, 5, 1, 1, 2, 2),  // kernel larger than the image, all padding
          geometry(3, 32, 32, 5, 5),            // LeNet conv1
          geometry(6, 14, 14, 5, 5)};           // LeNet conv2
}

// cols[n][(c*kh + ki)*kw + kj][oy*ow + ox] straight from the definition.
std::vector<double> im2col_reference(const std::vector<double>& x, int64_t n_images, const Case& g) {
  int64_t oh = g.s.output.h, ow = g.s.output.w, rows = g.s.channels * g.s.kernel.h * g.s.kernel.w;
  std::vector<double> cols(n_images * rows * oh * ow, 0.0);
  for (int64_t n = 0; n < n_images; ++n)
    for (int64_t c = 0; c < g.s.channels; ++c)
      for (int64_t ki = 0; ki < g.s.kernel.h; ++ki)
        for (int64_t kj = 0; kj < g.s.kernel.w; ++kj)
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              int64_t iy = oy * g.p.stride.h - g.p.padding.h + ki * g.p.dilation.h;
              int64_t ix = ox * g.p.stride.w - g.p.padding.w + kj * g.p.dilation.w;
              if (iy < 0 || iy >= g.s.input.h || ix < 0 || ix >= g.s.input.w) continue;
              int64_t row = (c * g.s.kernel.h + ki) * g.s.kernel.w + kj;
              cols[(n * rows + row) * oh * ow + oy * ow + ox] =
                  x[((n * g.s.channels + c) * g.s.input.h + iy) * g.s.input.w + ix];
            }
  return cols;
}

TEST(Im2col, MatchesNaiveReferenceForEveryGeometry) {
  set_num_threads(2);
  for (const Case& g : geometries()) {
    Tensor x = random_tensor({2, g.s.channels, g.s.input.h, g.s.input.w}, DType::Float32, 1);
    Tensor cols = unfold(x, g);
    ASSERT_EQ(cols.shape(), (Shape{2, g.s.channels * g.s.kernel.h * g.s.kernel.w, g.s.output.h * g.s.output.w}))
        << describe(g);
    EXPECT_EQ(values(cols), im2col_reference(values(x), 2, g)) << describe(g);
  }
}

TEST(Im2col, EveryElementSizeAndStridedInput) {
  Case g = geometry(3, 9, 8, 3, 2, 2, 1, 1, 2, 1, 2);
  for (DType dtype : {DType::Float64, DType::Int32, DType::Float16, DType::BFloat16, DType::UInt8, DType::Bool}) {
    Tensor x = random_tensor({2, 3, 9, 8}, dtype, 2);
    EXPECT_EQ(values(unfold(x, g)), im2col_reference(values(x), 2, g)) << dtype;
  }
  // W is not the unit-stride dim (every other column; NHWC memory seen as
  // NCHW), so the strided loops run instead of the row copies.
  for (const Case& gs : geometries()) {
    Tensor every_other = random_tensor({2, gs.s.channels, gs.s.input.h, 2 * gs.s.input.w}, DType::Float32, 3)
                             .slice(3, 0, 2 * gs.s.input.w, 2);
    Tensor nhwc =
        random_tensor({2, gs.s.input.h, gs.s.input.w, gs.s.channels}, DType::Float32, 4).permute({0, 3, 1, 2});
    for (const Tensor& x : {every_other, nhwc}) {
      ASSERT_TRUE(x.stride(3) != 1 || gs.s.channels == 1);
      EXPECT_EQ(values(unfold(x, gs)), im2col_reference(values(x), 2, gs)) << describe(gs);
    }
  }
}

TEST(Im2col, OneIntIsASquareSize) {
  Tensor x = random_tensor({1, 2, 7, 7}, DType::Float32, 4);
  Case g = geometry(2, 7, 7, 3, 3, 2, 2, 1, 1, 2, 2);
  EXPECT_EQ(values(im2col(x, 3, {.stride = 2, .padding = 1, .dilation = 2})), values(unfold(x, g)));
}

TEST(Im2col, WeightTimesColsIsTheDirectConvolution) {
  for (const Case& g : geometries()) {
    const int64_t n_images = 2, out_channels = 4;
    int64_t oh = g.s.output.h, ow = g.s.output.w, rows = g.s.channels * g.s.kernel.h * g.s.kernel.w;
    std::vector<double> x =
        values(random_tensor({n_images, g.s.channels, g.s.input.h, g.s.input.w}, DType::Float32, 5));
    std::vector<double> w = values(random_tensor({out_channels, rows}, DType::Float32, 6));  // (OC, C*kh*kw)
    Tensor cols = unfold(from_vector<double>(x, {n_images, g.s.channels, g.s.input.h, g.s.input.w}), g);
    const double* c = cols.data<double>();
    for (int64_t n = 0; n < n_images; ++n) {
      for (int64_t oc = 0; oc < out_channels; ++oc) {
        for (int64_t oy = 0; oy < oh; ++oy) {
          for (int64_t ox = 0; ox < ow; ++ox) {
            double gemm = 0.0;  // (weight @ cols[n])[oc][oy*ow + ox]
            for (int64_t r = 0; r < rows; ++r) gemm += w[oc * rows + r] * c[(n * rows + r) * oh * ow + oy * ow + ox];
            double direct = 0.0;  // sum over c, ki, kj of w * x at the tap
            for (int64_t ch = 0; ch < g.s.channels; ++ch)
              for (int64_t ki = 0; ki < g.s.kernel.h; ++ki)
                for (int64_t kj = 0; kj < g.s.kernel.w; ++kj) {
                  int64_t iy = oy * g.p.stride.h - g.p.padding.h + ki * g.p.dilation.h;
                  int64_t ix = ox * g.p.stride.w - g.p.padding.w + kj * g.p.dilation.w;
                  if (iy < 0 || iy >= g.s.input.h || ix < 0 || ix >= g.s.input.w) continue;
                  direct += w[oc * rows + (ch * g.s.kernel.h + ki) * g.s.kernel.w + kj] *
                            x[((n * g.s.channels + ch) * g.s.input.h + iy) * g.s.input.w + ix];
                }
            ASSERT_NEAR(gemm, direct, 1e-12 * rows) << describe(g) << " at " << n << "," << oc << "," << oy << ","
                                                    << ox;
          }
        }
      }
    }
  }
}

// x[n][c][iy][ix] += cols[...] straight from the definition, in the order
// (row, position) so that float sums round as the kernel's do.
template <class Acc>
std::vector<Acc> col2im_reference(const Tensor& cols, const Case& g) {
  std::vector<double> c = values(cols);
  int64_t n_images = cols.size(0), oh = g.s.output.h, ow = g.s.output.w, rows = cols.size(1);
  std::vector<Acc> x(n_images * g.s.channels * g.s.input.h * g.s.input.w, Acc{0});
  for (int64_t n = 0; n < n_images; ++n)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          int64_t ch = r / (g.s.kernel.h * g.s.kernel.w), ki = r / g.s.kernel.w % g.s.kernel.h, kj = r % g.s.kernel.w;
          int64_t iy = oy * g.p.stride.h - g.p.padding.h + ki * g.p.dilation.h;
          int64_t ix = ox * g.p.stride.w - g.p.padding.w + kj * g.p.dilation.w;
          if (iy < 0 || iy >= g.s.input.h || ix < 0 || ix >= g.s.input.w) continue;
          x[((n * g.s.channels + ch) * g.s.input.h + iy) * g.s.input.w + ix] +=
              static_cast<Acc>(c[(n * rows + r) * oh * ow + oy * ow + ox]);
        }
  return x;
}

TEST(Col2im, MatchesNaiveReference) {
  set_num_threads(2);
  for (const Case& g : geometries()) {
    Shape cols_shape{3, g.s.channels * g.s.kernel.h * g.s.kernel.w, g.s.output.h * g.s.output.w};
    Tensor cols = random_tensor(cols_shape, DType::Float32, 7);
    Tensor x = fold(cols, g);
    ASSERT_EQ(x.shape(), (Shape{3, g.s.channels, g.s.input.h, g.s.input.w}));
    std::vector<float> expected = col2im_reference<float>(cols, g);
    const float* p = x.data<float>();
    for (int64_t k = 0; k < x.numel(); ++k) ASSERT_EQ(p[k], expected[k]) << describe(g) << " at " << k;
  }
}

TEST(Col2im, HalfIntegerAndStridedCols) {
  Case g = geometry(2, 7, 6, 3, 3, 2, 1, 1, 2, 1, 1);
  Shape cols_shape{2, 18, g.s.output.h * g.s.output.w};
  // 16-bit floats accumulate in float and round once.
  Tensor half_cols = random_tensor(cols_shape, DType::Float16, 8);
  std::vector<float> expected_half = col2im_reference<float>(half_cols, g);
  std::vector<double> got_half = values(fold(half_cols, g));
  for (size_t k = 0; k < got_half.size(); ++k) {
    EXPECT_EQ(got_half[k], static_cast<float>(Half(expected_half[k]))) << k;
  }
  Tensor int_cols = random_tensor(cols_shape, DType::Int64, 9);
  std::vector<int64_t> expected_int = col2im_reference<int64_t>(int_cols, g);
  std::vector<double> got_int = values(fold(int_cols, g));
  for (size_t k = 0; k < got_int.size(); ++k) EXPECT_EQ(got_int[k], static_cast<double>(expected_int[k]));
  // cols stored as (N, oh*ow, C*kh*kw) and transposed: no unit stride along positions.
  Tensor strided = random_tensor({2, g.s.output.h * g.s.output.w, 18}, DType::Float64, 10).transpose(1, 2);
  std::vector<double> expected = col2im_reference<double>(strided, g);
  EXPECT_EQ(values(fold(strided, g)), expected);
}

TEST(Col2im, IsTheAdjointOfIm2col) {
  // <im2col(x), y> == <x, col2im(y)> in float64 for random x and y.
  for (const Case& g : geometries()) {
    Tensor x = random_tensor({2, g.s.channels, g.s.input.h, g.s.input.w}, DType::Float64, 11);
    Tensor y =
        random_tensor({2, g.s.channels * g.s.kernel.h * g.s.kernel.w, g.s.output.h * g.s.output.w}, DType::Float64, 12);
    std::vector<double> ix = values(unfold(x, g)), yv = values(y), xv = values(x), cy = values(fold(y, g));
    double lhs = 0.0, rhs = 0.0, scale = 0.0;
    for (size_t k = 0; k < ix.size(); ++k) {
      lhs += ix[k] * yv[k];
      scale += std::abs(ix[k] * yv[k]);
    }
    for (size_t k = 0; k < xv.size(); ++k) rhs += xv[k] * cy[k];
    EXPECT_NEAR(lhs, rhs, 1e-12 * scale) << describe(g);
    EXPECT_GT(scale, 0.0);
  }
}

TEST(Im2col, Errors) {
  Tensor x = zeros({1, 3, 8, 8});
  expect_error([&] { im2col(zeros({3, 8, 8}), 3); }, "im2col: expected a 4-d input (N, C, H, W), got shape [3, 8, 8]");
  expect_error([&] { im2col(x, 3, {.groups = 3}); }, "im2col: unfolds one group, so groups must be 1, got 3");
  expect_error([&] { im2col(x, {0, 3}); }, "im2col: kernel size must be positive, got 0 x 3");
  expect_error([&] { im2col(x, 3, {.stride = 0}); }, "im2col: stride must be positive, got 0 x 0");
  expect_error([&] { im2col(x, 3, {.padding = -1}); }, "im2col: padding must be non-negative, got -1 x -1");
  expect_error([&] { im2col(x, 3, {.dilation = 0}); }, "im2col: dilation must be positive, got 0 x 0");
  expect_error(
      [&] {
        im2col(x, {9, 3});
      },
      "im2col: kernel 9 x 3 with dilation 1 x 1 spans 9 x 3, more than the padded input 8 x 8");
  // (4 - 5) / 2 truncates to 0 in C++: a check on the output size would pass.
  expect_error(
      [&] {
        im2col(zeros({1, 1, 4, 9}), 5, {.stride = 2});
      },
      "im2col: kernel 5 x 5 with dilation 1 x 1 spans 5 x 5, more than the padded input 4 x 9");
  expect_error([&] { im2col(x, 3, {.dilation = 4}); }, "im2col: kernel 3 x 3 with dilation 4 x 4 spans 9 x 9");
}

TEST(Col2im, Errors) {
  expect_error(
      [] {
        col2im(zeros({1, 27, 35}), {8, 8}, 3);
      },
      "col2im: expected cols of shape [N, 27, 36] (C*kh*kw, oh*ow) for an input of 8 x 8, got [1, 27, 35]");
  expect_error(
      [] {
        col2im(zeros({27, 36}), {8, 8}, 3);
      },
      "col2im: expected cols of shape [N, C*kh*kw, oh*ow] with C*kh*kw a multiple of kh*kw = 9, got [27, 36]");
  expect_error([] { col2im(zeros({1, 26, 36}), {8, 8}, 3); }, "a multiple of kh*kw = 9, got [1, 26, 36]");
  expect_error(
      [] {
        col2im(zeros({1, 27, 36}), {8, 8}, 3, {.groups = 3});
      },
      "col2im: unfolds one group, so groups must be 1, got 3");
  expect_error([] { col2im(zeros({1, 27, 36}), {8, 8}, {0, 3}); }, "col2im: kernel size must be positive, got 0 x 3");
  expect_error([] { col2im(zeros({1, 0, 36}), {8, 8}, 3); }, "col2im: expected a positive input size, got C=0 H=8 W=8");
  expect_error(
      [] {
        col2im(zeros({1, 27, 36}), {8, 8}, 3, {.dilation = {5, 1}});
      },
      "col2im: kernel 3 x 3 with dilation 5 x 1 spans 11 x 3, more than the padded input 8 x 8");
}

}  // namespace
}  // namespace kiln
