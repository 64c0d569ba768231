// GroupNorm, InstanceNorm1d/2d/3d and their functional forms: against PyTorch
// on the same weights and inputs (outputs, gradients, running statistics,
// state-dict keys), gradcheck, and the errors.
#include "nn/group_norm.h"

#include <sstream>

#include "nn/functional_composite.h"
#include "nn/instance_norm.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::expect_gradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::keys_and_shapes;
using testing::OracleCase;

// Gives every parameter of `m` values uniform in [-1.5, 1.5), and every
// floating buffer values in [0.5, 2) (a valid running variance), so that a
// test does not pass on the ones and zeros of the default initialisation.
void randomize(Module& m, uint64_t seed) {
  NoGradGuard no_grad;
  for (Tensor p : m.parameters()) p.copy_(uniform64(p.shape(), seed++, -1.5, 1.5));
  for (Tensor b : m.buffers())
    if (b.is_floating_point()) b.copy_(uniform64(b.shape(), seed++, 0.5, 2.0));
}

template <class M, class... Args>
std::shared_ptr<M> make64(uint64_t seed, Args... args) {
  auto m = std::make_shared<M>(args...);
  m->to(DType::Float64);
  randomize(*m, seed);
  return m;
}

TEST(GroupNormLayer, DefaultsAndPrinting) {
  GroupNorm gn(3, 6);
  EXPECT_EQ(testing::values_of(gn.weight), std::vector<double>(6, 1.0));
  EXPECT_EQ(testing::values_of(gn.bias), std::vector<double>(6, 0.0));
  EXPECT_EQ(gn.extra_repr(), "3, 6, eps=1e-05, affine=True");
  GroupNorm plain(2, 4, 1e-3, /*affine=*/false);
  EXPECT_TRUE(plain.state_dict().empty());
  EXPECT_EQ(plain.extra_repr(), "2, 4, eps=0.001, affine=False");
}

TEST(GroupNormLayer, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  cases.push_back({.name = "GroupNorm(3, 6) on (2, 6, 3, 4)",
                   .module = make64<GroupNorm>(1, 3, 6),
                   .torch_module = "nn.GroupNorm(3, 6)",
                   .inputs = {leaf({2, 6, 3, 4}, 2, -2, 3)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "GroupNorm(2, 4, eps=1e-3, affine=False) on (3, 4, 5)",
                   .module = make64<GroupNorm>(3, 2, 4, 1e-3, false),
                   .torch_module = "nn.GroupNorm(2, 4, eps=1e-3, affine=False)",
                   .inputs = {leaf({3, 4, 5}, 4)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "GroupNorm(1, 4) on (5, 4): one group, no spatial dims",
                   .module = make64<GroupNorm>(5, 1, 4),
                   .torch_module = "nn.GroupNorm(1, 4)",
                   .inputs = {leaf({5, 4}, 6)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "GroupNorm(6, 6) training=false: instance-norm-like, eval is the same",
                   .module = make64<GroupNorm>(7, 6, 6),
                   .torch_module = "nn.GroupNorm(6, 6)",
                   .training = false,
                   .inputs = {leaf({2, 6, 2, 3}, 8)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "F::group_norm with weight only",
                   .inputs = {leaf({2, 4, 3}, 9), leaf({4}, 10)},
                   .python = "outs = [F.group_norm(in0, 2, in1, eps=1e-4)]",
                   .kiln = [](const TensorList& in) {
                     return TensorList{F::group_norm(in[0], 2, in[1], Tensor(), 1e-4)};
                   }});
  expect_matches_torch(cases);
}

TEST(GroupNormLayer, Gradcheck) {
  expect_gradcheck(
      [](const TensorList& in) { return TensorList{F::group_norm(in[0], 2, in[1], in[2], 1e-3)}; },
      {leaf({2, 4, 3}, 11, -2, 2), leaf({4}, 12), leaf({4}, 13)});
  expect_gradcheck([](const TensorList& in) { return TensorList{F::group_norm(in[0], 3)}; },
                   {leaf({2, 6, 2, 2}, 14, -2, 2)});
  // Second derivatives come from layer_norm's differentiable backward.
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) { return TensorList{F::group_norm(in[0], 2, in[1], in[2])}; },
      {leaf({2, 4, 3}, 22, -2, 2), leaf({4}, 23), leaf({4}, 24)});
}

TEST(GroupNormLayer, Errors) {
  expect_error([] { GroupNorm(4, 6); }, "GroupNorm: num_channels (6) must be divisible by num_groups (4)");
  expect_error([] { GroupNorm(0, 6); }, "GroupNorm: num_groups and num_channels must be positive");
  GroupNorm gn(3, 6);
  expect_error([&] { gn(uniform64({2, 4, 3}, 1).to(DType::Float32)); },
               "GroupNorm: expected 6 channels (dim 1), got input of shape [2, 4, 3]");
  expect_error([&] { gn(uniform64({6}, 1).to(DType::Float32)); }, "GroupNorm: expected input of shape (N, C, *)");
  expect_error([] { F::group_norm(uniform64({2, 6, 3}, 1), 4); },
               "group_norm: the 6 channels of x of shape [2, 6, 3] are not divisible by num_groups (4)");
  expect_error([] { F::group_norm(uniform64({2, 6, 3}, 1), 3, uniform64({3}, 2)); },
               "group_norm: expected weight of shape [6]");
  expect_error([] { F::group_norm(uniform64({2, 6, 3}, 1), 0); }, "group_norm: num_groups must be positive");
}

TEST(InstanceNormLayer, DefaultsAndPrinting) {
  InstanceNorm2d plain(3);
  EXPECT_TRUE(plain.state_dict().empty());
  EXPECT_EQ(plain.extra_repr(), "3, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False");
  InstanceNorm1d full(4, 1e-3, 0.2, true, true);
  EXPECT_EQ(testing::values_of(full.weight), std::vector<double>(4, 1.0));
  EXPECT_EQ(testing::values_of(full.bias), std::vector<double>(4, 0.0));
  EXPECT_EQ(testing::values_of(full.running_mean), std::vector<double>(4, 0.0));
  EXPECT_EQ(testing::values_of(full.running_var), std::vector<double>(4, 1.0));
  EXPECT_EQ(full.num_batches_tracked.dtype(), DType::Int64);
  EXPECT_EQ(full.extra_repr(), "4, eps=0.001, momentum=0.2, affine=True, track_running_stats=True");
  InstanceNorm3d three(InstanceNorm3dOptions(5).eps(1e-3).momentum(std::nullopt).track_running_stats(true));
  EXPECT_EQ(three.extra_repr(), "5, eps=0.001, momentum=None, affine=False, track_running_stats=True");
  EXPECT_EQ(keys_and_shapes(three.state_dict()), "running_mean:[5] running_var:[5] num_batches_tracked:[]");
  std::ostringstream os;
  os << InstanceNorm3d(2);
  EXPECT_EQ(os.str(), "InstanceNorm3d(2, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)");
  // momentum None leaves the running statistics as they were.
  three(uniform64({2, 5, 2, 2, 3}, 3).to(DType::Float32));
  EXPECT_EQ(testing::values_of(three.running_mean), std::vector<double>(5, 0.0));
  EXPECT_EQ(testing::values_of(three.running_var), std::vector<double>(5, 1.0));
}

TEST(InstanceNormLayer, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  cases.push_back({.name = "InstanceNorm2d(3) on (2, 3, 4, 5)",
                   .module = make64<InstanceNorm2d>(1, 3),
                   .torch_module = "nn.InstanceNorm2d(3)",
                   .inputs = {leaf({2, 3, 4, 5}, 2, -2, 3)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "InstanceNorm2d affine, running stats, training: the stats are updated",
                   .module = make64<InstanceNorm2d>(3, 3, 1e-3, 0.3, true, true),
                   .torch_module = "nn.InstanceNorm2d(3, eps=1e-3, momentum=0.3, affine=True, track_running_stats=True)",
                   .inputs = {leaf({4, 3, 2, 3}, 4, -1, 2)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "InstanceNorm2d affine, running stats, eval: normalised with them",
                   .module = make64<InstanceNorm2d>(5, 3, 1e-5, 0.1, true, true),
                   .torch_module = "nn.InstanceNorm2d(3, affine=True, track_running_stats=True)",
                   .training = false,
                   .inputs = {leaf({2, 3, 2, 2}, 6)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "InstanceNorm2d without running stats, eval: input statistics",
                   .module = make64<InstanceNorm2d>(7, 2, 1e-5, 0.1, true, false),
                   .torch_module = "nn.InstanceNorm2d(2, affine=True)",
                   .training = false,
                   .inputs = {leaf({2, 2, 3, 2}, 8)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "InstanceNorm2d unbatched (3, 4, 5) with running stats",
                   .module = make64<InstanceNorm2d>(9, 3, 1e-5, 0.1, false, true),
                   .torch_module = "nn.InstanceNorm2d(3, track_running_stats=True)",
                   .inputs = {leaf({3, 4, 5}, 10)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "InstanceNorm1d(4, affine=True) on (3, 4, 7)",
                   .module = make64<InstanceNorm1d>(11, 4, 1e-5, 0.1, true),
                   .torch_module = "nn.InstanceNorm1d(4, affine=True)",
                   .inputs = {leaf({3, 4, 7}, 12)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "InstanceNorm3d(2) on (2, 2, 3, 4, 2)",
                   .module = make64<InstanceNorm3d>(15, 2),
                   .torch_module = "nn.InstanceNorm3d(2)",
                   .inputs = {leaf({2, 2, 3, 4, 2}, 16, -1, 3)},
                   .python = "outs = [m(in0)]"});
  cases.push_back(
      {.name = "InstanceNorm3d affine, running stats, training",
       .module = make64<InstanceNorm3d>(17, 3, 1e-4, 0.25, true, true),
       .torch_module = "nn.InstanceNorm3d(3, eps=1e-4, momentum=0.25, affine=True, track_running_stats=True)",
       .inputs = {leaf({2, 3, 2, 3, 2}, 18)},
       .python = "outs = [m(in0)]"});
  cases.push_back({.name = "InstanceNorm3d from options, eval with running stats, unbatched",
                   .module = make64<InstanceNorm3d>(
                       19, InstanceNorm3dOptions(2).affine(true).track_running_stats(true).momentum(0.5)),
                   .torch_module = "nn.InstanceNorm3d(2, affine=True, track_running_stats=True, momentum=0.5)",
                   .training = false,
                   .inputs = {leaf({2, 3, 2, 4}, 20)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "InstanceNorm1d unbatched (4, 7)",
                   .module = make64<InstanceNorm1d>(13, 4, 1e-5, 0.1, true),
                   .torch_module = "nn.InstanceNorm1d(4, affine=True)",
                   .inputs = {leaf({4, 7}, 14)},
                   .python = "outs = [m(in0)]"});
  expect_matches_torch(cases);
}

TEST(InstanceNormLayer, Gradcheck) {
  expect_gradcheck(
      [](const TensorList& in) {
        return TensorList{F::instance_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-3)};
      },
      {leaf({2, 3, 2, 3}, 15, -2, 2), leaf({3}, 16), leaf({3}, 17)});
  // Eval with running statistics: a per-channel affine map of x.
  Tensor rm = uniform64({3}, 18), rv = uniform64({3}, 19, 0.5, 2);
  expect_gradcheck(
      [rm, rv](const TensorList& in) {
        return TensorList{F::instance_norm(in[0], rm, rv, in[1], Tensor(), /*use_input_stats=*/false)};
      },
      {leaf({2, 3, 4}, 20), leaf({3}, 21)});
  // Second derivatives come from batch_norm's differentiable backward.
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) { return TensorList{F::instance_norm(in[0], Tensor(), Tensor(), in[1], in[2])}; },
      {leaf({2, 2, 5}, 25, -2, 2), leaf({2}, 26), leaf({2}, 27)});
}

TEST(InstanceNormLayer, Errors) {
  expect_error([] { InstanceNorm2d(0); }, "InstanceNorm: num_features must be positive");
  InstanceNorm2d in2(3);
  expect_error([&] { in2(uniform64({3, 4}, 1)); }, "InstanceNorm2d: expected 3D or 4D input, got 2D input");
  expect_error([&] { in2(uniform64({2, 5, 4, 4}, 1)); },
               "InstanceNorm2d: expected 3 channels (dim 1), got input of shape [2, 5, 4, 4]");
  InstanceNorm3d in3(3);
  expect_error([&] { in3(uniform64({3, 4, 4}, 1)); }, "InstanceNorm3d: expected 4D or 5D input, got 3D input");
  InstanceNorm1d in1(3);
  expect_error([&] { in1(uniform64({2, 3, 4, 4}, 1)); }, "InstanceNorm1d: expected 2D or 3D input, got 4D input");
  expect_error([] { F::instance_norm(uniform64({2, 3, 1, 1}, 1)); },
               "instance_norm: expected more than 1 spatial element");
  expect_error([] { F::instance_norm(uniform64({2, 3}, 1)); },
               "instance_norm: expected x of shape (N, C, *) with at least one spatial dim");
  expect_error([] { F::instance_norm(uniform64({2, 3, 4}, 1), Tensor(), Tensor(), Tensor(), Tensor(), false); },
               "instance_norm: running_mean and running_var are required when use_input_stats is false");
  expect_error([] { F::instance_norm(uniform64({2, 3, 4}, 1), uniform64({2}, 2), uniform64({3}, 3)); },
               "instance_norm: expected running_mean of shape [3]");
}

}  // namespace
}  // namespace kiln::nn
