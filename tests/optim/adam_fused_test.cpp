// The fused Adam/AdamW step (ops::adam_step_, Note [Fused optimizer steps])
// against the same step written as tensor ops (optim/adam.cpp): bitwise
// equal for every option, in float32 and float64; and the cases that fall
// back to the ops.
#include "optim/adam.h"
#include "optim_test_util.h"
#include "tensor/fused_optim.h"

namespace kiln {

using namespace kiln::optim;
namespace {

// Two copies of three parameters, one optimizer fused and one not, the same
// gradients for `steps` steps: every parameter and state tensor must stay
// equal. Opt is Adam or AdamW, Options its options.
template <class Opt, class Options>
void check_fused_equals_unfused(Options options, DType dtype, int steps = 4) {
  FusedAndUnfused<Opt> pair(options, dtype);
  for (int s = 0; s < steps; ++s) {
    pair.step(s);
    for (size_t i = 0; i < pair.shapes.size(); ++i) {
      const std::string what =
          detail::str(Options::kOptimizerName, " step ", s, " param ", i, " ", dtype, " weight_decay ",
                      options.weight_decay(), " amsgrad ", options.amsgrad(), " maximize ", options.maximize());
      ASSERT_TRUE(same_values(pair.fused_params[i], pair.plain_params[i])) << what;
      const TensorDict& fused_state = pair.fused->state(pair.fused_params[i]);
      const TensorDict& plain_state = pair.plain->state(pair.plain_params[i]);
      std::vector<std::string> names = {"step", "exp_avg", "exp_avg_sq"};
      if (options.amsgrad()) names.push_back("max_exp_avg_sq");
      ASSERT_EQ(fused_state.size(), plain_state.size()) << what;
      for (const std::string& name : names) {
        ASSERT_TRUE(same_values(fused_state.at(name), plain_state.at(name))) << what << " " << name;
      }
    }
  }
  // The fused optimizer's tensors did take the fused kernel, and it really
  // changed the parameters: otherwise the comparison above proves nothing.
  std::vector<Tensor> grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  for (const Tensor& p : pair.fused_params) {
    grads.push_back(p.grad());
    exp_avgs.push_back(pair.fused->state(p).at("exp_avg"));
    exp_avg_sqs.push_back(pair.fused->state(p).at("exp_avg_sq"));
    if (options.amsgrad()) max_exp_avg_sqs.push_back(pair.fused->state(p).at("max_exp_avg_sq"));
  }
  EXPECT_TRUE(ops::adam_step_fusable(pair.fused_params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs));
  EXPECT_TRUE(pair.fused_changed(dtype));
}

template <class Opt, class Options>
void check_every_option(double default_weight_decay) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (double weight_decay : {0.0, default_weight_decay}) {
      for (bool amsgrad : {false, true}) {
        for (bool maximize : {false, true}) {
          const Options options = Options(0.01)
                                      .beta1(0.8)
                                      .beta2(0.95)
                                      .eps(1e-6)
                                      .weight_decay(weight_decay)
                                      .amsgrad(amsgrad)
                                      .maximize(maximize);
          check_fused_equals_unfused<Opt>(options, dtype);
        }
      }
    }
  }
}

TEST(AdamFused, BitwiseEqualToTheUnfusedOpsForEveryOption) { check_every_option<Adam, AdamOptions>(5e-3); }

TEST(AdamFused, AdamWBitwiseEqualToTheUnfusedOpsForEveryOption) { check_every_option<AdamW, AdamWOptions>(0.1); }

TEST(AdamFused, MatchesAHandComputedFirstStep) {
  // t = 1: m = (1 - b1) g, v = (1 - b2) g^2, and the update is
  // -lr * m / (1 - b1) / (sqrt(v) / sqrt(1 - b2) + eps) = -lr * g / (|g| + eps).
  Tensor p = make_param({1.0, -2.0}, {2}, DType::Float64);
  Tensor m = zeros_like(p), v = zeros_like(p);
  Tensor g = make_param({0.5, -4.0}, {2}, DType::Float64);
  ops::adam_step_({p}, {g}, {m}, {v}, {}, {1.0}, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
  std::vector<double> got = values_of(p);
  EXPECT_NEAR(got[0], 1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-12);
  EXPECT_NEAR(got[1], -2.0 + 0.1 * 4.0 / (4.0 + 1e-8), 1e-12);
  EXPECT_NEAR(values_of(m)[1], 0.1 * -4.0, 1e-15);
  EXPECT_NEAR(values_of(v)[1], 0.001 * 16.0, 1e-15);
}

TEST(AdamFused, OtherDtypesAndLayoutsFallBackToTheOps) {
  Tensor half = make_param({1.0, 2.0}, {2}, DType::Float16);
  half.set_grad(full({2}, 0.5, DType::Float16));
  Tensor strided = make_param({1.0, 2.0, 3.0, 4.0}, {2, 2});
  strided.set_grad(full({2, 2}, 1.0).t());
  Tensor half_state = zeros({2}, DType::Float16);
  EXPECT_FALSE(ops::adam_step_fusable({half}, {half.grad()}, {half_state}, {half_state}, {}));
  Adam opt({half, strided}, AdamOptions(0.5));
  opt.step();
  // The first Adam step moves every element by lr * sign(g) (up to eps).
  expect_near_all(values_of(half), {0.5, 1.5}, 2e-3, 0, "float16");
  expect_near_all(values_of(strided), {0.5, 1.5, 2.5, 3.5}, 1e-6, 1e-6, "strided");
  EXPECT_EQ(opt.state(strided).at("step").item<double>(), 1.0);
}

TEST(AdamFused, ErrorsNameTheOpAndTheParameter) {
  Tensor p = make_param({1.0, 2.0}, {2});
  Tensor m = zeros({2}), v = zeros({2});
  try {
    ops::adam_step_({p}, {zeros({3})}, {m}, {v}, {}, {1.0}, {.lr = 0.1});
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("adam_step_: cannot fuse parameter 0: a gradient or buffer is float32 [3]"),
              std::string::npos)
        << e.message();
  }
  try {
    ops::adam_step_({p}, {zeros({2})}, {m}, {v}, {}, {1.0}, {.lr = 0.1, .amsgrad = true});
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("adam_step_: 1 parameters, 1 gradients, 1 exp_avgs, 1 exp_avg_sqs, 0 max_exp_avg_sqs"),
              std::string::npos)
        << e.message();
  }
  try {
    ops::adam_step_({p}, {zeros({2})}, {m}, {v}, {}, {0.0}, {.lr = 0.1});
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("adam_step_: parameter 0 has step count 0"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace kiln
