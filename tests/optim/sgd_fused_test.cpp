// The fused SGD step (Note [Fused optimizer steps]) against the same step
// written as tensor ops: bitwise equal for every option, in float32 and
// float64; and the cases that fall back to the ops.
#include "../tensor/test_util.h"
#include "optim/sgd.h"
#include "optim_test_util.h"
#include "tensor/fused_optim.h"

namespace kiln {

using namespace kiln::optim;
namespace {

// Two copies of three parameters, one optimizer fused and one not, the same
// gradients for `steps` steps: every parameter and buffer must stay equal.
void check_fused_equals_unfused(SGDOptions options, DType dtype, int steps = 4) {
  FusedAndUnfused<SGD> pair(options, dtype);
  for (int s = 0; s < steps; ++s) {
    pair.step(s);
    for (size_t i = 0; i < pair.shapes.size(); ++i) {
      const std::string what = detail::str("step ", s, " param ", i, " ", dtype, " momentum ", options.momentum(),
                                           " dampening ", options.dampening(), " weight_decay ", options.weight_decay(),
                                           " nesterov ", options.nesterov(), " maximize ", options.maximize());
      ASSERT_TRUE(same_values(pair.fused_params[i], pair.plain_params[i])) << what;
      if (options.momentum() != 0.0) {
        ASSERT_TRUE(same_values(pair.fused->state(pair.fused_params[i]).at("momentum_buffer"),
                                pair.plain->state(pair.plain_params[i]).at("momentum_buffer")))
            << what;
      }
    }
  }
  EXPECT_TRUE(pair.fused_changed(dtype));
}

TEST(SGDFused, BitwiseEqualToTheUnfusedOpsForEveryOption) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (double momentum : {0.0, 0.9}) {
      for (double dampening : {0.0, 0.25}) {
        for (double weight_decay : {0.0, 5e-4}) {
          for (bool nesterov : {false, true}) {
            if (nesterov && (momentum == 0.0 || dampening != 0.0)) continue;
            for (bool maximize : {false, true}) {
              check_fused_equals_unfused(SGDOptions(0.05)
                                             .momentum(momentum)
                                             .dampening(dampening)
                                             .weight_decay(weight_decay)
                                             .nesterov(nesterov)
                                             .maximize(maximize),
                                         dtype);
            }
          }
        }
      }
    }
  }
}

TEST(SGDFused, OtherDtypesAndLayoutsFallBackToTheOps) {
  // float16 parameters, and a gradient that is not contiguous, take the
  // unfused path: the step still happens.
  Tensor half = make_param({1.0, 2.0}, {2}, DType::Float16);
  half.set_grad(full({2}, 0.5, DType::Float16));
  Tensor strided = make_param({1.0, 2.0, 3.0, 4.0}, {2, 2});
  strided.set_grad(full({2, 2}, 1.0).t());
  EXPECT_FALSE(ops::sgd_step_fusable({half}, {half.grad()}, {}));
  SGD opt({half, strided}, SGDOptions(0.5).momentum(0.9));
  opt.step();
  EXPECT_EQ(values_of(half), (std::vector<double>{0.75, 1.75}));
  EXPECT_EQ(values_of(strided), (std::vector<double>{0.5, 1.5, 2.5, 3.5}));
}

TEST(SGDFused, ErrorsNameTheOpAndTheParameter) {
  Tensor p = make_param({1.0, 2.0}, {2});
  Tensor wrong = zeros({3});
  try {
    ops::sgd_step_({p}, {wrong}, {}, {}, {.lr = 0.1});
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("sgd_step_: cannot fuse parameter 0: a gradient or buffer is float32 [3]"),
              std::string::npos)
        << e.message();
  }
  try {
    ops::sgd_step_({p}, {zeros({2})}, {}, {}, {.lr = 0.1, .momentum = 0.9});
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("sgd_step_: 1 parameters, 0 momentum buffers"), std::string::npos) << e.message();
  }
}

// One launch serves one device: a list spanning two is not fusable (the
// optimizers then take the ops, per parameter), and sgd_step_ and
// adam_step_ refuse it before any kernel runs (so no GPU is needed here).
TEST(SGDFused, ParametersOnTwoDevicesShareNoLaunch) {
  Tensor on_cpu = zeros({4});
  Tensor on_cuda = tensor_claiming_device(cuda_device(0), 4), grad_on_cuda = tensor_claiming_device(cuda_device(0), 4);
  EXPECT_FALSE(ops::sgd_step_fusable({on_cpu, on_cuda}, {zeros({4}), grad_on_cuda}, {}));
  EXPECT_FALSE(ops::adam_step_fusable({on_cpu, on_cuda}, {zeros({4}), grad_on_cuda}, {zeros({4}), grad_on_cuda},
                                      {zeros({4}), grad_on_cuda}, {}));
  expect_error([&] { ops::sgd_step_({on_cpu, on_cuda}, {zeros({4}), grad_on_cuda}, {}, {}, {.lr = 0.1}); },
               "sgd_step_: cannot fuse parameter 1: it is on cuda:0, parameter 0 on cpu");
  expect_error(
      [&] {
        ops::adam_step_({on_cpu, on_cuda}, {zeros({4}), grad_on_cuda}, {zeros({4}), grad_on_cuda},
                        {zeros({4}), grad_on_cuda}, {}, {1.0, 1.0}, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999});
      },
      "adam_step_: cannot fuse parameter 1: it is on cuda:0, parameter 0 on cpu");
}

}  // namespace
}  // namespace kiln
