// F::interpolate's bicubic, trilinear and area modes, and Upsample with
// them: by hand, against PyTorch (forward and backward; up- and
// downsampling, odd sizes, scale factors given and recomputed,
// align_corners both ways, float64 and float32, non-contiguous inputs),
// gradcheck, 16-bit floats and every error.
#include <sstream>

#include "nn/functional.h"
#include "nn/functional_composite.h"
#include "nn/interpolate_cases.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"
#include "nn/upsampling.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using F::InterpolateMode;
using F::InterpolateOptions;
using gradtest::expect_gradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::float32_case;
using testing::functional_case;
using testing::OracleCase;
using testing::resized;
using M = InterpolateMode;

TEST(InterpolateModes, BicubicByHand) {
  // align_corners, 3 -> 5: positions 0, 0.5, 1, 1.5, 2. At t = 0.5 the Keys
  // weights with A = -0.75 are (-0.09375, 0.59375, 0.59375, -0.09375), the
  // taps outside [0, 2] clamped to the border: o = 1 reads (1, 1, 2, 5), o = 3
  // reads (1, 2, 5, 5); whole positions read the input itself.
  Tensor x = from_vector<double>({1, 2, 5}, {1, 1, 1, 3});
  EXPECT_EQ(resized(x, {.size = {1, 5}, .mode = M::Bicubic, .align_corners = true}),
            (std::vector<double>{1, 1.21875, 2, 3.59375, 5}));
  // A constant stays constant: the weights sum to 1, whatever the clamping.
  Tensor c = F::interpolate(full({1, 2, 3, 4}, 0.25, DType::Float64), {.size = {7, 2}, .mode = M::Bicubic});
  for (double v : testing::values_of(c)) EXPECT_DOUBLE_EQ(v, 0.25);
  // Unlike the linear modes, an unchanged size with a scale factor is
  // resampled: scale 1/1.1 puts the positions between the pixels.
  Tensor ramp = from_vector<double>({0, 1, 4, 9, 16}, {1, 1, 1, 5});
  std::vector<double> y = resized(ramp, {.scale_factor = {1.1}, .mode = M::Bicubic});
  EXPECT_EQ(y.size(), 5u);
  EXPECT_LT(y[0], 0.0);  // cubic overshoots below the input's minimum
}

TEST(InterpolateModes, TrilinearAndAreaByHand) {
  // Trilinear with align_corners on a 2x2x2 cube: the centre of the 3x3x3
  // result is the mean of the eight corners.
  Tensor cube = arange(0, 8, 1, DType::Float64).view({1, 1, 2, 2, 2});
  Tensor t = F::interpolate(cube, {.size = {3}, .mode = M::Trilinear, .align_corners = true});
  EXPECT_EQ(t.shape(), (Shape{1, 1, 3, 3, 3}));
  EXPECT_DOUBLE_EQ(t.select(2, 1).select(2, 1).select(2, 1).item<double>(), 3.5);
  // Area 5 -> 3: windows [0, 2), [1, 4), [3, 5).
  Tensor row = from_vector<double>({0, 1, 4, 9, 16}, {1, 1, 5});
  std::vector<double> a = resized(row, {.size = {3}, .mode = M::Area});
  ASSERT_EQ(a.size(), 3u);
  EXPECT_DOUBLE_EQ(a[0], 0.5);
  EXPECT_DOUBLE_EQ(a[1], 14.0 / 3.0);
  EXPECT_DOUBLE_EQ(a[2], 12.5);
  // Area of a 5-d input is adaptive average pooling over boxes: 4x4x4 to
  // 2x2x2 averages each 2x2x2 octant.
  Tensor box = arange(0, 64, 1, DType::Float64).view({1, 1, 4, 4, 4});
  Tensor pooled = F::interpolate(box, {.scale_factor = {0.5}, .mode = M::Area});
  EXPECT_EQ(pooled.shape(), (Shape{1, 1, 2, 2, 2}));
  // The first octant holds 0, 1, 4, 5, 16, 17, 20, 21.
  EXPECT_DOUBLE_EQ(testing::values_of(pooled)[0], 10.5);
  // Area of a 4-d input is adaptive_avg_pool2d itself.
  Tensor image = uniform64({2, 3, 7, 5}, 1);
  EXPECT_EQ(resized(image, {.size = {3, 4}, .mode = M::Area}),
            testing::values_of(F::adaptive_avg_pool2d(image, {3, 4})));
}

TEST(InterpolateModes, BicubicAndTrilinearMatchTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  for (bool align : {false, true}) {
    const std::string a = ", align_corners=" + std::string(align ? "True" : "False");
    const std::string tag = align ? ", align_corners" : "";
    auto add = [&](const std::string& name, Tensor x, InterpolateOptions o, const std::string& args) {
      o.align_corners = align;
      cases.push_back(functional_case(name + tag, std::move(x), o, args + a));
    };
    add("bicubic up", leaf({2, 3, 4, 5}, 1), {.size = {9, 7}, .mode = M::Bicubic}, "size=(9, 7), mode='bicubic'");
    add("bicubic down", leaf({1, 2, 9, 11}, 2), {.size = {4, 3}, .mode = M::Bicubic}, "size=(4, 3), mode='bicubic'");
    add("bicubic to and from one", leaf({1, 2, 1, 6}, 3), {.size = {5, 1}, .mode = M::Bicubic},
        "size=(5, 1), mode='bicubic'");
    add("bicubic scale (1.5, 2.5)", leaf({1, 2, 5, 3}, 4), {.scale_factor = {1.5, 2.5}, .mode = M::Bicubic},
        "scale_factor=(1.5, 2.5), mode='bicubic'");
    add("bicubic scale 0.6", leaf({1, 2, 8, 7}, 5), {.scale_factor = {0.6}, .mode = M::Bicubic},
        "scale_factor=0.6, mode='bicubic'");
    // Values only: torch 1.13's bicubic backward copies the gradient when
    // no size changes, which is not the gradient of its forward (torch's own
    // gradcheck fails there); Gradcheck below checks Kiln's.
    add("bicubic scale 1.1, unchanged size", uniform64({1, 1, 5, 6}, 6), {.scale_factor = {1.1}, .mode = M::Bicubic},
        "scale_factor=1.1, mode='bicubic'");
    add("bicubic scale 0.7 recomputed", leaf({1, 2, 9, 6}, 7),
        {.scale_factor = {0.7}, .mode = M::Bicubic, .recompute_scale_factor = true},
        "scale_factor=0.7, mode='bicubic', recompute_scale_factor=True");
    add("bicubic, transposed input", gradtest::transposed_leaf({2, 2, 4, 6}, 8), {.size = {5, 9}, .mode = M::Bicubic},
        "size=(5, 9), mode='bicubic'");
    add("trilinear up", leaf({2, 2, 3, 4, 2}, 9), {.size = {5, 7, 3}, .mode = M::Trilinear},
        "size=(5, 7, 3), mode='trilinear'");
    add("trilinear down", leaf({1, 2, 6, 5, 7}, 10), {.size = {2, 3, 4}, .mode = M::Trilinear},
        "size=(2, 3, 4), mode='trilinear'");
    add("trilinear scale (1.5, 0.5, 2)", leaf({1, 1, 4, 6, 3}, 11),
        {.scale_factor = {1.5, 0.5, 2}, .mode = M::Trilinear}, "scale_factor=(1.5, 0.5, 2.0), mode='trilinear'");
    add("trilinear, one dim unchanged, strided input", gradtest::strided_leaf({1, 2, 3, 4, 3}, 12),
        {.size = {3, 6, 5}, .mode = M::Trilinear}, "size=(3, 6, 5), mode='trilinear'");
  }
  cases.push_back(functional_case("bicubic, align_corners not given", leaf({1, 1, 3, 3}, 13),
                                  {.scale_factor = {2}, .mode = M::Bicubic}, "scale_factor=2, mode='bicubic'"));
  expect_matches_torch(cases);
}

TEST(InterpolateModes, AreaMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases = {
      functional_case("area 1-d down", leaf({2, 3, 11}, 1), {.size = {4}, .mode = M::Area}, "size=4, mode='area'"),
      functional_case("area 1-d up", leaf({1, 2, 3}, 2), {.size = {7}, .mode = M::Area}, "size=7, mode='area'"),
      functional_case("area 2-d", leaf({2, 2, 7, 9}, 3), {.size = {3, 4}, .mode = M::Area}, "size=(3, 4), mode='area'"),
      functional_case("area 2-d scale 0.45", leaf({1, 2, 9, 11}, 4), {.scale_factor = {0.45}, .mode = M::Area},
                      "scale_factor=0.45, mode='area'"),
      functional_case("area 3-d", leaf({2, 2, 5, 7, 6}, 5), {.size = {2, 3, 4}, .mode = M::Area},
                      "size=(2, 3, 4), mode='area'"),
      functional_case("area 3-d mixed up and down", leaf({1, 3, 3, 8, 2}, 6), {.size = {5, 3, 2}, .mode = M::Area},
                      "size=(5, 3, 2), mode='area'"),
      functional_case("area 3-d, transposed input", gradtest::transposed_leaf({1, 2, 4, 5, 6}, 7),
                      {.scale_factor = {0.5, 0.6, 0.75}, .mode = M::Area},
                      "scale_factor=(0.5, 0.6, 0.75), mode='area'"),
  };
  expect_matches_torch(cases);
}

TEST(InterpolateModes, Float32MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases = {
      float32_case("bicubic scale 2.3", {2, 2, 5, 7}, 1, {.scale_factor = {2.3}, .mode = M::Bicubic},
                   "scale_factor=2.3, mode='bicubic'"),
      float32_case("bicubic align_corners", {1, 2, 6, 4}, 2,
                   {.scale_factor = {1.5, 0.6}, .mode = M::Bicubic, .align_corners = true},
                   "scale_factor=(1.5, 0.6), mode='bicubic', align_corners=True"),
      float32_case("trilinear", {1, 2, 3, 5, 4}, 3, {.size = {4, 7, 3}, .mode = M::Trilinear},
                   "size=(4, 7, 3), mode='trilinear'"),
      float32_case("area 3-d", {1, 2, 6, 5, 7}, 4, {.size = {4, 2, 3}, .mode = M::Area}, "size=(4, 2, 3), mode='area'"),
  };
  expect_matches_torch(cases);
}

TEST(InterpolateModes, SixteenBitFloats) {
  Tensor x = uniform64({1, 2, 3, 5, 4}, 1);
  Tensor image = x.select(2, 0);
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    for (auto [input, options] :
         std::vector<std::pair<Tensor, InterpolateOptions>>{{image, {.size = {6, 7}, .mode = M::Bicubic}},
                                                            {x, {.size = {4, 3, 6}, .mode = M::Trilinear}},
                                                            {x, {.size = {2, 3, 2}, .mode = M::Area}}}) {
      Tensor y = F::interpolate(input.to(dtype), options);
      EXPECT_EQ(y.dtype(), dtype);
      gradtest::expect_values(y, testing::values_of(F::interpolate(input, options)), 3e-2);
    }
  }
}

TEST(InterpolateModes, Gradcheck) {
  const std::vector<std::pair<Shape, InterpolateOptions>> cases = {
      {{1, 2, 3, 4}, {.size = {5, 3}, .mode = M::Bicubic}},
      {{1, 1, 4, 3}, {.scale_factor = {0.6, 1.7}, .mode = M::Bicubic, .align_corners = true}},
      {{1, 1, 5, 6}, {.scale_factor = {1.1}, .mode = M::Bicubic}},  // no size changes, yet resampled
      {{1, 1, 2, 3, 2}, {.size = {3, 2, 4}, .mode = M::Trilinear}},
      {{2, 2, 5}, {.size = {3}, .mode = M::Area}},
      {{1, 2, 5, 4}, {.size = {2, 3}, .mode = M::Area}},
      {{1, 1, 3, 4, 5}, {.size = {2, 3, 2}, .mode = M::Area}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const InterpolateOptions o = cases[i].second;
    expect_gradcheck([o](const TensorList& in) { return TensorList{F::interpolate(in[0], o)}; },
                     {leaf(cases[i].first, 10 + i)});
  }
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) {
        Tensor y = F::interpolate(in[0], {.size = {4, 5}, .mode = M::Bicubic});
        return TensorList{kiln::mul(y, y)};
      },
      {leaf({1, 1, 3, 3}, 4)});
}

TEST(InterpolateModes, Errors) {
  expect_error(
      [] {
        F::interpolate(uniform64({1, 2, 4}, 1), {.size = {3}, .mode = M::Bicubic});
      },
      "interpolate: bicubic mode needs a 4-d input (N, C, H, W), got 3-d input of shape [1, 2, 4]");
  expect_error(
      [] {
        F::interpolate(uniform64({1, 2, 4, 4}, 1), {.size = {3}, .mode = M::Trilinear});
      },
      "interpolate: trilinear mode needs a 5-d input (N, C, D, H, W), got 4-d input of shape [1, 2, 4, 4]");
  expect_error(
      [] {
        F::interpolate(uniform64({1, 2, 4, 4}, 1), {.size = {3}, .mode = M::Area, .align_corners = false});
      },
      "interpolate: align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, "
      "trilinear), not area");
  expect_error(
      [] {
        F::interpolate(from_vector<int64_t>({1, 2, 3, 4}, {1, 1, 2, 2}), {.size = {3}, .mode = M::Bicubic});
      },
      "interpolate: bicubic mode needs a floating input, got int64");
  expect_error(
      [] {
        F::interpolate(from_vector<int64_t>({1, 2, 3}, {1, 1, 3}), {.size = {2}, .mode = M::Area});
      },
      "interpolate: area mode needs a floating input, got int64");
  expect_error(
      [] {
        F::interpolate(uniform64({1, 2, 4, 4, 4}, 1), {.scale_factor = {0.2}, .mode = M::Area});
      },
      "output (D: 0, H: 0, W: 0)");
}

TEST(InterpolateModes, UpsampleMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  struct Case {
    std::shared_ptr<Module> module;
    std::string torch;
    Shape shape;
  };
  const std::vector<Case> layers = {
      {std::make_shared<Upsample>(InterpolateOptions{.scale_factor = {2}, .mode = M::Bicubic}),
       "nn.Upsample(scale_factor=2, mode='bicubic')",
       {2, 2, 3, 4}},
      {std::make_shared<Upsample>(InterpolateOptions{.size = {3, 5, 4}, .mode = M::Trilinear, .align_corners = true}),
       "nn.Upsample(size=(3, 5, 4), mode='trilinear', align_corners=True)",
       {1, 2, 2, 3, 2}},
      {std::make_shared<Upsample>(InterpolateOptions{.size = {2, 3}, .mode = M::Area}),
       "nn.Upsample(size=(2, 3), mode='area')",
       {2, 2, 5, 7}},
  };
  std::vector<OracleCase> cases;
  for (size_t i = 0; i < layers.size(); ++i) {
    cases.push_back({.name = layers[i].torch,
                     .module = layers[i].module,
                     .torch_module = layers[i].torch,
                     .inputs = {leaf(layers[i].shape, 50 + i)},
                     .python = "outs = [m(in0)]"});
  }
  expect_matches_torch(cases);
}

TEST(InterpolateModes, UpsamplePrintsAndChecks) {
  EXPECT_EQ(Upsample({.scale_factor = {2}, .mode = M::Bicubic}).extra_repr(), "scale_factor=2.0, mode='bicubic'");
  EXPECT_EQ(Upsample({.size = {2, 3, 4}, .mode = M::Trilinear}).extra_repr(), "size=(2, 3, 4), mode='trilinear'");
  std::ostringstream os;
  os << Upsample({.size = {7}, .mode = M::Area});
  EXPECT_EQ(os.str(), "Upsample(size=7, mode='area')");
  expect_error([] { Upsample({.size = {3}, .mode = M::Area, .align_corners = true}); },
               "Upsample: align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, "
               "trilinear), not area");
  Upsample cubic({.scale_factor = {2}, .mode = M::Bicubic, .align_corners = true});
  expect_error([&] { cubic(uniform64({1, 2, 3, 3, 3}, 1)); }, "interpolate: bicubic mode needs a 4-d input");
}

}  // namespace
}  // namespace kiln::nn
