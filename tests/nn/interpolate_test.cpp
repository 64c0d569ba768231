// F::interpolate and the upsampling layers: each mode by hand, against
// PyTorch (forward and backward; up- and downsampling, odd sizes,
// non-integer and recomputed scale factors, align_corners both ways,
// float64 and float32, non-contiguous inputs; the layers with their
// printing), gradcheck, and every error.
#include <cmath>
#include <limits>
#include <sstream>

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

Tensor row(const std::vector<double>& values) {
  return from_vector<double>(values, {1, 1, static_cast<int64_t>(values.size())});
}

TEST(Interpolate, EachModeByHand) {
  Tensor x = row({0, 10, 20});
  // nearest: floor(o * 3/5); nearest-exact: floor((o + 0.5) * 3/5).
  EXPECT_EQ(resized(x, {.size = {5}}), (std::vector<double>{0, 0, 10, 10, 20}));
  EXPECT_EQ(resized(x, {.size = {5}, .mode = InterpolateMode::NearestExact}), (std::vector<double>{0, 0, 10, 20, 20}));
  // With scale_factor the scale is 1 / scale_factor: floor(o / 1.5) for 4 outputs.
  EXPECT_EQ(resized(x, {.scale_factor = {1.5}}), (std::vector<double>{0, 0, 10, 20}));
  // Linear, align_corners: positions o * (3 - 1) / (5 - 1).
  EXPECT_EQ(resized(x, {.size = {5}, .mode = InterpolateMode::Linear, .align_corners = true}),
            (std::vector<double>{0, 5, 10, 15, 20}));
  // Linear, half-pixel positions (o + 0.5) * 2/4 - 0.5, the first clamped to 0.
  Tensor pair = row({0, 10});
  EXPECT_EQ(resized(pair, {.size = {4}, .mode = InterpolateMode::Linear}), (std::vector<double>{0, 2.5, 7.5, 10}));
  // Downsampling 4 -> 2 reads positions 0.5 and 2.5.
  EXPECT_EQ(resized(row({0, 1, 2, 3}), {.size = {2}, .mode = InterpolateMode::Linear}),
            (std::vector<double>{0.5, 2.5}));
  // One output with align_corners reads position 0.
  EXPECT_EQ(resized(row({4, 1, 2}), {.size = {1}, .mode = InterpolateMode::Linear, .align_corners = true}),
            (std::vector<double>{4}));
  // Bilinear of a 2x2 ramp with align_corners is the plane through it.
  Tensor square = from_vector<double>({0, 1, 2, 3}, {1, 1, 2, 2});
  EXPECT_EQ(resized(square, {.size = {3, 3}, .mode = InterpolateMode::Bilinear, .align_corners = true}),
            (std::vector<double>{0, 0.5, 1, 1, 1.5, 2, 2, 2.5, 3}));
  EXPECT_EQ(F::interpolate(uniform64({2, 3, 4, 5, 6}, 1), {.scale_factor = {2, 0.5, 1.5}}).shape(),
            (Shape{2, 3, 8, 2, 9}));
  EXPECT_EQ(F::interpolate(uniform64({0, 3, 4}, 1), {.size = {7}, .mode = InterpolateMode::Linear}).shape(),
            (Shape{0, 3, 7}));
}

TEST(Interpolate, UnchangedSizes) {
  // A linear dim of unchanged size is copied, as torch does.
  Tensor x = uniform64({2, 3, 5}, 1);
  EXPECT_EQ(resized(x, {.scale_factor = {1.1}, .mode = InterpolateMode::Linear}), testing::values_of(x));
  // nearest with scale_factor still reads floor(o / 1.1), as torch's forward kernel.
  EXPECT_EQ(resized(row({0, 1, 2, 3, 4}), {.scale_factor = {1.1}}), (std::vector<double>{0, 0, 1, 2, 3}));
  // The result is never the input itself.
  Tensor y = F::interpolate(x, {.size = {5}});
  EXPECT_EQ(testing::values_of(y), testing::values_of(x));
  EXPECT_NE(y.data_ptr(), x.data_ptr());
}

TEST(Interpolate, NearestMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  using M = InterpolateMode;
  std::vector<OracleCase> cases = {
      functional_case("nearest 1-d up, odd sizes", leaf({2, 3, 3}, 1), {.size = {7}}, "size=7"),
      functional_case("nearest 1-d down", leaf({2, 2, 9}, 2), {.size = {4}}, "size=4"),
      functional_case("nearest 1-d scale 1.7", leaf({1, 2, 6}, 3), {.scale_factor = {1.7}}, "scale_factor=1.7"),
      functional_case("nearest 1-d scale 0.45", leaf({1, 2, 11}, 4), {.scale_factor = {0.45}}, "scale_factor=0.45"),
      functional_case("nearest 1-d scale 1.7 recomputed", leaf({1, 2, 6}, 5),
                      {.scale_factor = {1.7}, .recompute_scale_factor = true},
                      "scale_factor=1.7, recompute_scale_factor=True"),
      functional_case("nearest 2-d", leaf({2, 3, 3, 4}, 6), {.size = {5, 3}}, "size=(5, 3)"),
      functional_case("nearest 2-d scale (2.5, 0.5)", leaf({1, 2, 3, 6}, 7), {.scale_factor = {2.5, 0.5}},
                      "scale_factor=(2.5, 0.5)"),
      functional_case("nearest 3-d", leaf({1, 2, 2, 3, 4}, 8), {.size = {3, 5, 2}}, "size=(3, 5, 2)"),
      functional_case("nearest 3-d scale 2", leaf({1, 1, 2, 2, 3}, 9), {.scale_factor = {2}}, "scale_factor=2.0"),
      functional_case("nearest-exact 1-d up", leaf({2, 3, 3}, 10), {.size = {7}, .mode = M::NearestExact},
                      "size=7, mode='nearest-exact'"),
      functional_case("nearest-exact 1-d down", leaf({2, 2, 9}, 11), {.size = {4}, .mode = M::NearestExact},
                      "size=4, mode='nearest-exact'"),
      functional_case("nearest-exact 2-d scale 1.3", leaf({1, 2, 5, 4}, 12),
                      {.scale_factor = {1.3}, .mode = M::NearestExact}, "scale_factor=1.3, mode='nearest-exact'"),
      functional_case("nearest-exact 3-d", leaf({1, 2, 3, 2, 5}, 13), {.size = {2, 5, 3}, .mode = M::NearestExact},
                      "size=(2, 5, 3), mode='nearest-exact'"),
      functional_case("nearest 2-d, transposed input", gradtest::transposed_leaf({2, 3, 5, 4}, 14), {.size = {7, 3}},
                      "size=(7, 3)"),
      // torch's backward kernel treats output == input size as a copy while
      // its forward reads floor(o / 1.1) (and output == 2 * input as o / 2
      // while its forward reads floor(o / 2.1)): values only, Kiln's
      // gradient follows its forward.
      functional_case("nearest, scale 1.1 keeps the size", uniform64({1, 2, 5}, 15), {.scale_factor = {1.1}},
                      "scale_factor=1.1"),
      functional_case("nearest, scale 2.1 doubles the size", uniform64({1, 2, 5}, 16), {.scale_factor = {2.1}},
                      "scale_factor=2.1"),
  };
  expect_matches_torch(cases);
}

TEST(Interpolate, LinearMatchesTorch) {
  SKIP_WITHOUT_TORCH();
  using M = InterpolateMode;
  std::vector<OracleCase> cases;
  for (bool align : {false, true}) {
    const std::string a = align ? "True" : "False";
    const std::string tag = align ? ", align_corners" : "";
    cases.push_back(functional_case("linear up" + tag, leaf({2, 3, 3}, 1),
                                    {.size = {7}, .mode = M::Linear, .align_corners = align},
                                    "size=7, mode='linear', align_corners=" + a));
    cases.push_back(functional_case("linear down" + tag, leaf({2, 2, 9}, 2),
                                    {.size = {4}, .mode = M::Linear, .align_corners = align},
                                    "size=4, mode='linear', align_corners=" + a));
    cases.push_back(functional_case("linear to one" + tag, leaf({1, 2, 5}, 3),
                                    {.size = {1}, .mode = M::Linear, .align_corners = align},
                                    "size=1, mode='linear', align_corners=" + a));
    cases.push_back(functional_case("linear from one" + tag, leaf({1, 2, 1}, 4),
                                    {.size = {4}, .mode = M::Linear, .align_corners = align},
                                    "size=4, mode='linear', align_corners=" + a));
    cases.push_back(functional_case("linear scale 1.7" + tag, leaf({1, 2, 6}, 5),
                                    {.scale_factor = {1.7}, .mode = M::Linear, .align_corners = align},
                                    "scale_factor=1.7, mode='linear', align_corners=" + a));
    cases.push_back(functional_case(
        "linear scale 0.4 recomputed" + tag, leaf({1, 2, 11}, 6),
        {.scale_factor = {0.4}, .mode = M::Linear, .align_corners = align, .recompute_scale_factor = true},
        "scale_factor=0.4, mode='linear', recompute_scale_factor=True, align_corners=" + a));
    cases.push_back(functional_case("bilinear" + tag, leaf({2, 3, 4, 5}, 7),
                                    {.size = {7, 3}, .mode = M::Bilinear, .align_corners = align},
                                    "size=(7, 3), mode='bilinear', align_corners=" + a));
    cases.push_back(functional_case("bilinear scale (1.5, 2.5)" + tag, leaf({1, 2, 5, 3}, 8),
                                    {.scale_factor = {1.5, 2.5}, .mode = M::Bilinear, .align_corners = align},
                                    "scale_factor=(1.5, 2.5), mode='bilinear', align_corners=" + a));
    cases.push_back(functional_case(
        "bilinear scale 0.7 recomputed" + tag, leaf({1, 2, 9, 6}, 9),
        {.scale_factor = {0.7}, .mode = M::Bilinear, .align_corners = align, .recompute_scale_factor = true},
        "scale_factor=0.7, mode='bilinear', recompute_scale_factor=True, align_corners=" + a));
    cases.push_back(functional_case("bilinear, transposed input" + tag, gradtest::transposed_leaf({2, 2, 4, 6}, 10),
                                    {.size = {5, 9}, .mode = M::Bilinear, .align_corners = align},
                                    "size=(5, 9), mode='bilinear', align_corners=" + a));
    cases.push_back(functional_case("bilinear, strided input, one dim unchanged" + tag,
                                    gradtest::strided_leaf({2, 3, 4, 3}, 11),
                                    {.size = {4, 7}, .mode = M::Bilinear, .align_corners = align},
                                    "size=(4, 7), mode='bilinear', align_corners=" + a));
  }
  cases.push_back(functional_case("bilinear, align_corners not given", leaf({1, 1, 3, 3}, 12),
                                  {.scale_factor = {2}, .mode = M::Bilinear}, "scale_factor=2, mode='bilinear'"));
  expect_matches_torch(cases);
}

TEST(Interpolate, Float32MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  using M = InterpolateMode;
  // torch computes the positions in float for float32 inputs (in double
  // for float64 ones), and so does Kiln.
  std::vector<OracleCase> cases = {
      float32_case("nearest scale 1.7", {1, 2, 13}, 1, {.scale_factor = {1.7}}, "scale_factor=1.7"),
      float32_case("nearest scale (0.3, 2.2)", {1, 2, 17, 5}, 2, {.scale_factor = {0.3, 2.2}},
                   "scale_factor=(0.3, 2.2)"),
      float32_case("nearest-exact size 11", {2, 2, 7}, 3, {.size = {11}, .mode = M::NearestExact},
                   "size=11, mode='nearest-exact'"),
      float32_case("linear scale 2.3", {2, 2, 7}, 4, {.scale_factor = {2.3}, .mode = M::Linear},
                   "scale_factor=2.3, mode='linear'"),
      float32_case("bilinear", {2, 3, 5, 7}, 5, {.size = {8, 4}, .mode = M::Bilinear}, "size=(8, 4), mode='bilinear'"),
      float32_case("bilinear align_corners", {1, 2, 4, 6}, 6,
                   {.scale_factor = {1.5, 0.6}, .mode = M::Bilinear, .align_corners = true},
                   "scale_factor=(1.5, 0.6), mode='bilinear', align_corners=True"),
  };
  expect_matches_torch(cases);
}

TEST(Interpolate, SixteenBitFloats) {
  // Positions in float, weights and sums in the 16-bit type: close to float64.
  Tensor x = uniform64({1, 2, 3, 5}, 1);
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    for (InterpolateOptions options : {InterpolateOptions{.size = {6, 4}, .mode = InterpolateMode::Bilinear},
                                       InterpolateOptions{.scale_factor = {1.5}}}) {
      Tensor y = F::interpolate(x.to(dtype), options);
      EXPECT_EQ(y.dtype(), dtype);
      gradtest::expect_values(y, testing::values_of(F::interpolate(x, options)), 2e-2);
    }
  }
}

TEST(Interpolate, Gradcheck) {
  using M = InterpolateMode;
  const std::vector<InterpolateOptions> options = {
      {.size = {5}},
      {.scale_factor = {0.6}, .mode = M::NearestExact},
      {.size = {7}, .mode = M::Linear},
      {.scale_factor = {0.7}, .mode = M::Linear, .align_corners = true},
      {.size = {4}, .mode = M::Linear},  // unchanged: a copy
  };
  for (const InterpolateOptions& o : options)
    expect_gradcheck([o](const TensorList& in) { return TensorList{F::interpolate(in[0], o)}; }, {leaf({2, 2, 4}, 1)});
  expect_gradcheck(
      [](const TensorList& in) {
        return TensorList{F::interpolate(in[0], {.size = {5, 3}, .mode = M::Bilinear, .align_corners = false})};
      },
      {leaf({1, 2, 3, 4}, 2)});
  expect_gradcheck(
      [](const TensorList& in) {
        return TensorList{F::interpolate(in[0], {.scale_factor = {1.5, 2, 0.5}})};
      },
      {leaf({1, 1, 2, 3, 4}, 3)});
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) {
        Tensor y = F::interpolate(in[0], {.size = {4, 5}, .mode = M::Bilinear, .align_corners = true});
        return TensorList{kiln::mul(y, y)};
      },
      {leaf({1, 1, 3, 3}, 4)});
}

TEST(Interpolate, Errors) {
  using M = InterpolateMode;
  Tensor x = uniform64({1, 2, 4, 5}, 1);
  expect_error(
      [&] {
        F::interpolate(x, {.size = {3, 3}, .align_corners = true});
      },
      "interpolate: align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, "
      "trilinear), not nearest");
  expect_error(
      [&] {
        F::interpolate(x, {.size = {3, 3}, .mode = M::NearestExact, .align_corners = false});
      },
      "not nearest-exact");
  expect_error(
      [] {
        F::interpolate(uniform64({2, 5}, 1), {.size = {3}});
      },
      "interpolate: expected a 3-d, 4-d or 5-d input (N, C, d1, ...), got 2-d input of shape [2, 5] for "
      "mode nearest");
  expect_error([] { F::interpolate(uniform64({1, 1, 1, 1, 1, 1}, 1), {.size = {3}}); }, "got 6-d input");
  expect_error([&] { F::interpolate(x, {.size = {3}, .mode = M::Linear}); },
               "interpolate: linear mode needs a 3-d input (N, C, W), got 4-d input of shape [1, 2, 4, 5]");
  expect_error(
      [] {
        F::interpolate(uniform64({1, 2, 4}, 1), {.size = {3}, .mode = M::Bilinear});
      },
      "interpolate: bilinear mode needs a 4-d input (N, C, H, W), got 3-d input of shape [1, 2, 4]");
  expect_error(
      [] {
        F::interpolate(uniform64({1, 2, 3, 4, 5}, 1), {.size = {3}, .mode = M::Bilinear});
      },
      "bilinear mode needs a 4-d input (N, C, H, W), got 5-d input");
  expect_error(
      [&] {
        F::interpolate(x, {.size = {3, 3}, .scale_factor = {2}});
      },
      "interpolate: only one of size and scale_factor may be given, got size [3, 3] and scale_factor [2]");
  expect_error([&] { F::interpolate(x, {}); }, "interpolate: either size or scale_factor must be given");
  expect_error(
      [&] {
        F::interpolate(x, {.size = {3, 3, 3}});
      },
      "interpolate: input of shape [1, 2, 4, 5] has 2 spatial dims [4, 5], but size [3, 3, 3] has 3 entries; "
      "give one per spatial dim, or one for all");
  expect_error([&] { F::interpolate(x, {.scale_factor = {2, 2, 2}}); }, "but scale_factor [2, 2, 2] has 3 entries");
  expect_error(
      [&] {
        F::interpolate(x, {.size = {3, 3}, .recompute_scale_factor = true});
      },
      "interpolate: recompute_scale_factor is not meaningful with an explicit size");
  expect_error(
      [&] {
        F::interpolate(x, {.size = {-1, 3}});
      },
      "interpolate: input and output sizes must be positive, got input (H: 4, W: 5) and output (H: -1, W: 3) "
      "for input of shape [1, 2, 4, 5]");
  expect_error([] { F::interpolate(uniform64({1, 2, 4}, 1), {.size = {0}}); }, "got input (W: 4) and output (W: 0)");
  expect_error(
      [] {
        F::interpolate(uniform64({1, 2, 0, 3, 3}, 1), {.size = {2}});
      },
      "got input (D: 0, H: 3, W: 3) and output (D: 2, H: 2, W: 2)");
  // floor(4 * 0.2) = 0.
  expect_error([&] { F::interpolate(x, {.scale_factor = {0.2}}); }, "and output (H: 0, W: 1)");
  expect_error([&] { F::interpolate(x, {.scale_factor = {-2}}); },
               "interpolate: scale_factor must be positive and finite, got [-2]");
  expect_error(
      [&] {
        F::interpolate(x, {.scale_factor = {2, std::numeric_limits<double>::quiet_NaN()}});
      },
      "interpolate: scale_factor must be positive and finite, got [2, nan]");
  expect_error(
      [] {
        F::interpolate(uniform64({2, 0, 3}, 1), {.size = {6}});
      },
      "interpolate: expected input (N, C, d1, ...) with C > 0 (N may be 0), got shape [2, 0, 3]");
  expect_error(
      [] {
        F::interpolate(from_vector<int64_t>({1, 2, 3}, {1, 1, 3}), {.size = {6}, .mode = M::Linear});
      },
      "interpolate: linear mode needs a floating input, got int64");
  expect_error([] { F::interpolate(Tensor(), {.size = {6}}); }, "interpolate: input is undefined");
}

TEST(UpsamplingLayers, MatchTorch) {
  SKIP_WITHOUT_TORCH();
  using M = InterpolateMode;
  struct Case {
    std::shared_ptr<Module> module;
    std::string torch;
    Shape shape;
  };
  const std::vector<Case> layers = {
      {std::make_shared<Upsample>(InterpolateOptions{.scale_factor = {2}}),
       "nn.Upsample(scale_factor=2)",
       {2, 3, 3, 4}},
      {std::make_shared<Upsample>(InterpolateOptions{.size = {5, 7}, .mode = M::Bilinear}),
       "nn.Upsample(size=(5, 7), mode='bilinear')",
       {2, 2, 3, 4}},
      {std::make_shared<Upsample>(InterpolateOptions{.scale_factor = {1.5}, .mode = M::Linear, .align_corners = true}),
       "nn.Upsample(scale_factor=1.5, mode='linear', align_corners=True)",
       {2, 3, 5}},
      {std::make_shared<Upsample>(InterpolateOptions{.size = {4}, .mode = M::NearestExact}),
       "nn.Upsample(size=4, mode='nearest-exact')",
       {1, 2, 3, 3, 2}},
      {std::make_shared<UpsamplingNearest2d>(UpsamplingSize{.size = {3, 5}}),
       "nn.UpsamplingNearest2d(size=(3, 5))",
       {1, 2, 4, 3}},
      {std::make_shared<UpsamplingBilinear2d>(UpsamplingSize{.scale_factor = {1.5}}),
       "nn.UpsamplingBilinear2d(scale_factor=1.5)",
       {2, 2, 3, 5}},
  };
  std::vector<OracleCase> cases;
  for (size_t i = 0; i < layers.size(); ++i) {
    cases.push_back({.name = layers[i].torch,
                     .module = layers[i].module,
                     .torch_module = layers[i].torch,
                     .inputs = {leaf(layers[i].shape, 40 + i)},
                     .python = "outs = [m(in0)]"});
  }
  expect_matches_torch(cases);
}

TEST(UpsamplingLayers, PrintAsTorch) {
  using M = InterpolateMode;
  // The strings torch 2.x prints for the same layers.
  EXPECT_EQ(Upsample({.scale_factor = {2}}).extra_repr(), "scale_factor=2.0, mode='nearest'");
  EXPECT_EQ(Upsample({.scale_factor = {2, 1.5}}).extra_repr(), "scale_factor=(2.0, 1.5), mode='nearest'");
  EXPECT_EQ(Upsample({.size = {3, 4}, .mode = M::Bilinear}).extra_repr(), "size=(3, 4), mode='bilinear'");
  EXPECT_EQ(Upsample({.size = {8}, .mode = M::NearestExact}).extra_repr(), "size=8, mode='nearest-exact'");
  std::ostringstream os;
  os << UpsamplingBilinear2d({.scale_factor = {2}});
  EXPECT_EQ(os.str(), "UpsamplingBilinear2d(scale_factor=2.0, mode='bilinear')");
  std::ostringstream nearest;
  nearest << UpsamplingNearest2d({.size = {5}});
  EXPECT_EQ(nearest.str(), "UpsamplingNearest2d(size=5, mode='nearest')");
  UpsamplingBilinear2d bilinear({.size = {4, 4}});
  EXPECT_EQ(bilinear.options.align_corners, std::optional<bool>(true));
  EXPECT_EQ(bilinear.options.mode, M::Bilinear);
  EXPECT_TRUE(bilinear.state_dict().empty());
}

TEST(UpsamplingLayers, Errors) {
  using M = InterpolateMode;
  expect_error([] { Upsample({}); },
               "Upsample: give exactly one of size and scale_factor, got size [] and scale_factor []");
  expect_error([] { Upsample({.size = {2}, .scale_factor = {2}}); },
               "Upsample: give exactly one of size and scale_factor");
  expect_error([] { Upsample({.size = {4, 0}}); }, "Upsample: size must be positive, got [4, 0]");
  expect_error([] { Upsample({.scale_factor = {2}, .align_corners = true}); },
               "Upsample: align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, "
               "trilinear), not nearest");
  expect_error([] { UpsamplingBilinear2d({}); }, "UpsamplingBilinear2d: give exactly one of size and scale_factor");
  // Input errors are F::interpolate's.
  Upsample up({.scale_factor = {2}, .mode = M::Bilinear});
  expect_error([&] { up(uniform64({1, 2, 3}, 1)); }, "interpolate: bilinear mode needs a 4-d input");
}

}  // namespace
}  // namespace kiln::nn
