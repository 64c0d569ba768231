// PixelShuffle, PixelUnshuffle and their functional forms: against PyTorch,
// against the defining formula by hand, as inverses, gradcheck, errors.
#include "nn/functional_composite.h"
#include "nn/nn_test_util.h"
#include "nn/pixel_shuffle.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::expect_gradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::OracleCase;

// out[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w], by loops.
TEST(PixelShuffleLayer, FollowsTheDefinition) {
  const int64_t n = 2, c = 3, r = 2, h = 3, w = 4;
  Tensor x = uniform64({n, c * r * r, h, w}, 1);
  std::vector<double> xv = testing::values_of(x), want(xv.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < r; ++j)
          for (int64_t y = 0; y < h; ++y)
            for (int64_t z = 0; z < w; ++z)
              want[((b * c + ch) * h * r + y * r + i) * w * r + z * r + j] =
                  xv[((b * c * r * r + ch * r * r + i * r + j) * h + y) * w + z];
  PixelShuffle shuffle(r);
  Tensor y = shuffle(x);
  EXPECT_EQ(y.shape(), (Shape{n, c, h * r, w * r}));
  EXPECT_EQ(testing::values_of(y), want);
  PixelUnshuffle unshuffle(r);
  EXPECT_EQ(testing::values_of(unshuffle(y)), xv);
  EXPECT_EQ(shuffle.extra_repr(), "upscale_factor=2");
  EXPECT_EQ(unshuffle.extra_repr(), "downscale_factor=2");
  EXPECT_TRUE(shuffle.state_dict().empty());
}

TEST(PixelShuffleLayer, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  cases.push_back({.name = "PixelShuffle(3)",
                   .module = std::make_shared<PixelShuffle>(3),
                   .torch_module = "nn.PixelShuffle(3)",
                   .inputs = {leaf({2, 18, 2, 3}, 1)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "PixelUnshuffle(2)",
                   .module = std::make_shared<PixelUnshuffle>(2),
                   .torch_module = "nn.PixelUnshuffle(2)",
                   .inputs = {leaf({2, 3, 4, 6}, 2)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "F::pixel_shuffle, two leading dims",
                   .inputs = {leaf({2, 3, 8, 2, 3}, 3)},
                   .python = "outs = [F.pixel_shuffle(in0, 2)]",
                   .kiln = [](const TensorList& in) { return TensorList{F::pixel_shuffle(in[0], 2)}; }});
  cases.push_back({.name = "F::pixel_unshuffle, unbatched",
                   .inputs = {leaf({2, 6, 9}, 4)},
                   .python = "outs = [F.pixel_unshuffle(in0, 3)]",
                   .kiln = [](const TensorList& in) { return TensorList{F::pixel_unshuffle(in[0], 3)}; }});
  expect_matches_torch(cases);
}

TEST(PixelShuffleLayer, Gradcheck) {
  expect_gradcheck([](const TensorList& in) { return TensorList{F::pixel_shuffle(in[0], 2)}; },
                   {leaf({1, 8, 2, 3}, 5)});
  expect_gradcheck([](const TensorList& in) { return TensorList{F::pixel_unshuffle(in[0], 2)}; },
                   {leaf({2, 1, 4, 2}, 6)});
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) { return TensorList{kiln::mul(F::pixel_shuffle(in[0], 2), F::pixel_shuffle(in[0], 2))}; },
      {leaf({1, 4, 2, 2}, 7)});
}

TEST(PixelShuffleLayer, Errors) {
  expect_error([] { PixelShuffle(0); }, "PixelShuffle: upscale_factor must be positive, got 0");
  expect_error([] { PixelUnshuffle(-1); }, "PixelUnshuffle: downscale_factor must be positive, got -1");
  PixelShuffle shuffle(2);
  expect_error([&] { shuffle(uniform64({2, 6, 3, 3}, 1)); },
               "PixelShuffle: expected input of shape (*, C*4, H, W) for upscale_factor 2, got shape [2, 6, 3, 3]");
  expect_error([&] { shuffle(uniform64({8, 3}, 1)); }, "PixelShuffle: expected input of shape (*, C*4, H, W)");
  PixelUnshuffle unshuffle(2);
  expect_error([&] { unshuffle(uniform64({2, 6, 3, 4}, 1)); },
               "PixelUnshuffle: expected input of shape (*, C, H*2, W*2) for downscale_factor 2, got shape [2, 6, 3, 4]");
  expect_error([] { F::pixel_shuffle(uniform64({2, 6, 3, 3}, 1), 2); },
               "pixel_shuffle: the 6 channels (dim -3) of input of shape [2, 6, 3, 3] are not divisible by upscale_factor^2 = 4");
  expect_error([] { F::pixel_unshuffle(uniform64({6, 3}, 1), 2); }, "pixel_unshuffle: expected input of shape");
  expect_error([] { F::pixel_unshuffle(uniform64({1, 6, 3}, 1), 2); },
               "pixel_unshuffle: the height 6 and width 3 of input of shape [1, 6, 3] must be divisible by downscale_factor 2");
}

}  // namespace
}  // namespace kiln::nn
