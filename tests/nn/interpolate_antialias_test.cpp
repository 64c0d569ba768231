// F::interpolate's antialias for bilinear and bicubic (Note [Antialiased
// interpolation] in nn/functional/interpolate.cpp): against torch 1.13's
// antialias=True (values and input gradients) downscaling by integer and
// fractional factors, upscaling, mixed, with a scale factor and with
// align_corners; the windows' weights by hand; gradcheck; the errors.
#include <string>

#include "kiln.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::expect_gradcheck;
using gradtest::leaf;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::OracleCase;

OracleCase aa_case(const std::string& torch_args, const Shape& shape, F::InterpolateOptions options, uint64_t seed) {
  options.antialias = true;
  return {.name = "interpolate(" + torch_args + ") on " + gradtest::shape_str(shape),
          .inputs = {leaf(shape, seed)},
          .python = "outs = [F.interpolate(in0, " + torch_args + ", antialias=True)]",
          .kiln = [options](const TensorList& in) { return TensorList{F::interpolate(in[0], options)}; }};
}

TEST(InterpolateAntialias, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  using M = F::InterpolateMode;
  std::vector<OracleCase> cases = {
      aa_case("size=(4, 5), mode='bilinear'", {2, 2, 9, 11}, {.size = {4, 5}, .mode = M::Bilinear}, 1),
      aa_case("size=(3, 3), mode='bicubic'", {1, 2, 10, 8}, {.size = {3, 3}, .mode = M::Bicubic}, 2),
      aa_case("size=(3, 2), mode='bilinear'", {1, 1, 12, 8}, {.size = {3, 2}, .mode = M::Bilinear}, 3),
      aa_case("size=(7, 9), mode='bilinear'", {1, 2, 4, 5}, {.size = {7, 9}, .mode = M::Bilinear}, 4),
      aa_case("size=(8, 5), mode='bicubic'", {2, 1, 5, 12}, {.size = {8, 5}, .mode = M::Bicubic}, 5),
      aa_case("scale_factor=0.4, mode='bicubic'", {1, 2, 10, 9}, {.scale_factor = {0.4}, .mode = M::Bicubic}, 6),
      aa_case("scale_factor=(0.3, 0.6), mode='bilinear', recompute_scale_factor=True", {1, 1, 11, 9},
              {.scale_factor = {0.3, 0.6}, .mode = M::Bilinear, .recompute_scale_factor = true}, 7),
      aa_case("size=(4, 3), mode='bilinear', align_corners=True", {1, 2, 9, 7},
              {.size = {4, 3}, .mode = M::Bilinear, .align_corners = true}, 8),
      aa_case("size=(3, 4), mode='bicubic', align_corners=True", {1, 1, 8, 10},
              {.size = {3, 4}, .mode = M::Bicubic, .align_corners = true}, 9),
      aa_case("size=(5, 1), mode='bilinear'", {1, 1, 5, 6}, {.size = {5, 1}, .mode = M::Bilinear}, 10),
  };
  expect_matches_torch(cases);
}

TEST(InterpolateAntialias, HalvingAveragesTriangleWindows) {
  // 4 -> 2 by bilinear: scale 2, support 2, centres 1 and 3. Output 0's
  // window is [0, 3) with triangle weights at |i - 1 + 0.5| / 2 = 0.25,
  // 0.25, 0.75: 0.75, 0.75, 0.25, divided by their sum 1.75.
  Tensor x = from_vector<double>({1, 2, 3, 4}, {1, 1, 1, 4});
  Tensor y = F::interpolate(x, {.size = {1, 2}, .mode = F::InterpolateMode::Bilinear, .antialias = true});
  const double first = (0.75 * 1 + 0.75 * 2 + 0.25 * 3) / 1.75, second = (0.25 * 2 + 0.75 * 3 + 0.75 * 4) / 1.75;
  gradtest::expect_values(y, {first, second});
  // The builder reaches it.
  Tensor z = F::interpolate(
      x, F::InterpolateFuncOptions().size({1, 2}).mode(F::InterpolateMode::Bilinear).antialias(true));
  EXPECT_EQ(testing::values_of(z), testing::values_of(y));
}

TEST(InterpolateAntialias, Gradcheck) {
  for (F::InterpolateMode mode : {F::InterpolateMode::Bilinear, F::InterpolateMode::Bicubic}) {
    expect_gradcheck(
        [mode](const TensorList& in) {
          return TensorList{F::interpolate(in[0], {.size = {3, 4}, .mode = mode, .antialias = true})};
        },
        {leaf({1, 2, 7, 5}, 11)});
  }
}

TEST(InterpolateAntialias, Errors) {
  Tensor x = gradtest::uniform64({1, 1, 4, 4}, 1);
  expect_error([&] { F::interpolate(x, {.size = {2, 2}, .antialias = true}); },
               "interpolate: antialias is only supported for the bilinear and bicubic modes, not nearest");
  expect_error(
      [&] {
        F::interpolate(x.flatten(2), {.size = {2}, .mode = F::InterpolateMode::Linear, .antialias = true});
      },
      "antialias is only supported for the bilinear and bicubic modes, not linear");
}

}  // namespace
}  // namespace kiln::nn
