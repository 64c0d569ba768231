// conv_transpose2d and ConvTranspose2d: against the defining scatter by
// loops, against PyTorch (module and functional, with groups, dilation,
// output_padding, unbatched), gradcheck and gradgradcheck, its adjointness
// to conv2d, and the errors.
#include "nn/conv_transpose.h"
#include "nn/functional.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::expect_gradcheck;
using gradtest::expect_gradgradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::OracleCase;

// out[n, g*ocg + o, i*s - p + ki*d, j*s - p + kj*d] += x[n, g*icg + c, i, j] * w[g*icg + c, o, ki, kj].
TEST(ConvTranspose2d, FollowsTheDefinition) {
  const int64_t n = 2, cin = 4, cout = 6, groups = 2, h = 3, w = 4, k = 3, s = 2, p = 1, d = 1, op = 1;
  const int64_t icg = cin / groups, ocg = cout / groups;
  Tensor x = uniform64({n, cin, h, w}, 1), wt = uniform64({cin, ocg, k, k}, 2), b = uniform64({cout}, 3);
  const int64_t oh = (h - 1) * s - 2 * p + d * (k - 1) + op + 1, ow = (w - 1) * s - 2 * p + d * (k - 1) + op + 1;
  std::vector<double> xv = testing::values_of(x), wv = testing::values_of(wt), bv = testing::values_of(b);
  std::vector<double> want(n * cout * oh * ow);
  for (int64_t bn = 0; bn < n; ++bn)
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t i = 0; i < oh * ow; ++i) want[(bn * cout + o) * oh * ow + i] = bv[o];
  for (int64_t bn = 0; bn < n; ++bn)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t c = 0; c < icg; ++c)
        for (int64_t o = 0; o < ocg; ++o)
          for (int64_t i = 0; i < h; ++i)
            for (int64_t j = 0; j < w; ++j)
              for (int64_t ki = 0; ki < k; ++ki)
                for (int64_t kj = 0; kj < k; ++kj) {
                  const int64_t y = i * s - p + ki * d, z = j * s - p + kj * d;
                  if (y < 0 || y >= oh || z < 0 || z >= ow) continue;
                  const int64_t ci = g * icg + c, oc = g * ocg + o;
                  want[((bn * cout + oc) * oh + y) * ow + z] +=
                      xv[((bn * cin + ci) * h + i) * w + j] * wv[((ci * ocg + o) * k + ki) * k + kj];
                }
  Tensor got = F::conv_transpose2d(x, wt, b, s, p, op, groups, d);
  ASSERT_EQ(got.shape(), (Shape{n, cout, oh, ow}));
  std::vector<double> gv = testing::values_of(got);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(gv[i], want[i], 1e-12) << i;
}

// <conv_transpose2d(x, w), y> == <x, conv2d(y, w)>: the two are adjoint.
TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  Tensor x = uniform64({2, 4, 5, 5}, 4), w = uniform64({4, 3, 3, 3}, 5);
  Tensor up = F::conv_transpose2d(x, w, Tensor(), 2, 1);
  Tensor y = uniform64(up.shape(), 6);
  const double lhs = sum(mul(up, y)).item<double>();
  const double rhs = sum(mul(x, F::conv2d(y, w, Tensor(), 2, 1))).item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * std::abs(lhs));
}

// A ConvTranspose2d in float64, as the oracle compares.
std::shared_ptr<ConvTranspose2d> float64_layer(std::shared_ptr<ConvTranspose2d> m) {
  m->to(DType::Float64);
  return m;
}

TEST(ConvTranspose2d, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  cases.push_back({.name = "ConvTranspose2d(4, 6, 3, stride 2, padding 1, output_padding 1, groups 2)",
                   .module = float64_layer(std::make_shared<ConvTranspose2d>(4, 6, 3, 2, 1, 1, 2)),
                   .torch_module = "nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)",
                   .inputs = {leaf({2, 4, 3, 5}, 7)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "ConvTranspose2d DCGAN block, no bias",
                   .module = float64_layer(std::make_shared<ConvTranspose2d>(8, 4, 4, 2, 1, 0, 1, false)),
                   .torch_module = "nn.ConvTranspose2d(8, 4, 4, 2, 1, bias=False)",
                   .inputs = {leaf({2, 8, 4, 4}, 8)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "ConvTranspose2d unbatched, rectangular kernel and stride",
                   .module = float64_layer(std::make_shared<ConvTranspose2d>(3, 2, Size2d(2, 3), Size2d(1, 2))),
                   .torch_module = "nn.ConvTranspose2d(3, 2, (2, 3), stride=(1, 2))",
                   .inputs = {leaf({3, 4, 3}, 9)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "F::conv_transpose2d with dilation",
                   .inputs = {leaf({1, 2, 4, 4}, 10), leaf({2, 3, 3, 3}, 11), leaf({3}, 12)},
                   .python = "outs = [F.conv_transpose2d(in0, in1, in2, stride=2, padding=2, dilation=2)]",
                   .kiln = [](const autograd::TensorList& in) {
                     return autograd::TensorList{F::conv_transpose2d(in[0], in[1], in[2], 2, 2, 0, 1, 2)};
                   }});
  expect_matches_torch(cases);
}

// torch initialises a transposed convolution from its weight's dim 1.
TEST(ConvTranspose2d, InitialisesAsTorch) {
  ConvTranspose2d up(16, 8, 4, 2, 1);
  EXPECT_EQ(up.weight.shape(), (Shape{16, 8, 4, 4}));
  const double bound = 1.0 / std::sqrt(8.0 * 16);  // fan_in = out_channels * kh * kw
  for (double v : testing::values_of(up.bias)) EXPECT_LE(std::abs(v), bound);
  for (double v : testing::values_of(up.weight)) EXPECT_LE(std::abs(v), bound);  // kaiming(a=sqrt 5) gives the same bound
  EXPECT_EQ(up.extra_repr(), "16, 8, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1)");
  ConvTranspose2d odd(4, 6, 3, 2, 0, 1, 2, false, 2);
  EXPECT_EQ(odd.extra_repr(),
            "4, 6, kernel_size=(3, 3), stride=(2, 2), dilation=(2, 2), output_padding=(1, 1), groups=2, bias=False");
}

TEST(ConvTranspose2d, Gradcheck) {
  autograd::GradcheckFn fn = [](const autograd::TensorList& in) {
    return autograd::TensorList{F::conv_transpose2d(in[0], in[1], in[2], 2, 1, 1, 2)};
  };
  expect_gradcheck(fn, {leaf({2, 4, 3, 3}, 13), leaf({4, 2, 3, 3}, 14), leaf({4}, 15)});
  expect_gradgradcheck(fn, {leaf({1, 4, 2, 3}, 16), leaf({4, 2, 3, 3}, 17), leaf({4}, 18)});
  autograd::GradcheckFn unbatched = [](const autograd::TensorList& in) {
    return autograd::TensorList{F::conv_transpose2d(in[0], in[1])};
  };
  expect_gradcheck(unbatched, {leaf({2, 3, 3}, 19), leaf({2, 3, 2, 2}, 20)});
}

TEST(ConvTranspose2d, Errors) {
  Tensor x = uniform64({1, 4, 3, 3}, 21), w = uniform64({4, 2, 3, 3}, 22);
  expect_error([&] { F::conv_transpose2d(uniform64({1, 3, 3, 3}, 1), w); },
               "conv_transpose2d: input of shape [1, 3, 3, 3] has 3 channels, but weight of shape [4, 2, 3, 3] expects 4");
  expect_error([&] { F::conv_transpose2d(x, w, Tensor(), 1, 0, 1); }, "conv_transpose2d: output_padding (1, 1) must be smaller");
  expect_error([&] { F::conv_transpose2d(x, w, uniform64({3}, 1)); }, "conv_transpose2d: bias must have shape [2]");
  expect_error([&] { F::conv_transpose2d(x, w.to(DType::Float32)); }, "conv_transpose2d: expected x and weight of one dtype");
  expect_error([&] { F::conv_transpose2d(x, w, Tensor(), 1, 3); }, "which is empty");
  expect_error([&] { F::conv_transpose2d(x.view({4, 9}), w); }, "conv_transpose2d: expected x of shape");
  expect_error([] { ConvTranspose2d(4, 6, 3, 1, 0, 0, 4); }, "ConvTranspose2d: out_channels (6) must be divisible by groups (4)");
  expect_error([] { ConvTranspose2d(4, 6, 3, 2, 0, 2); }, "ConvTranspose2d: output_padding (2, 2) must be smaller");
}

}  // namespace
}  // namespace kiln::nn
