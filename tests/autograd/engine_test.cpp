// The backward engine, autograd metadata and hooks: hand-computed gradients
// of small graphs, the error paths, and the order in which leaves finish.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

using autograd::TensorList;

Tensor leaf(std::vector<double> values, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  return from_vector<double>(values, shape).requires_grad_();
}

std::vector<double> values_of(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

TEST(Engine, ProductRuleThroughSharedInput) {
  // y = sum(x * x + 3 * x): dy/dx = 2x + 3.
  Tensor x = leaf({1, -2, 0.5});
  Tensor y = sum(x * x + x * 3.0);
  EXPECT_EQ(y.grad_fn_name(), "SumBackward");
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(x.is_leaf());
  y.backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{5, -1, 4}));
}

TEST(Engine, BroadcastGradientsAreSummedToTheInputShape) {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  sum(a * b).backward();
  EXPECT_EQ(values_of(a.grad()), (std::vector<double>{10, 20, 30, 10, 20, 30}));
  EXPECT_EQ(values_of(b.grad()), (std::vector<double>{5, 7, 9}));
}

TEST(Engine, GradientsAccumulateAcrossCallsUntilCleared) {
  Tensor x = leaf({1, 2});
  sum(x * 2.0).backward();
  sum(x * 3.0).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{5, 5}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  sum(x * 4.0).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{4, 4}));
}

TEST(Engine, TwoLeavesFedTheSameGradientDoNotShareIt) {
  // add's backward hands one tensor to both inputs; accumulating into one
  // leaf's grad must not change the other's.
  Tensor a = leaf({1, 1}), b = leaf({1, 1});
  sum(a + b).backward();
  sum(a * 5.0).backward();
  EXPECT_EQ(values_of(a.grad()), (std::vector<double>{6, 6}));
  EXPECT_EQ(values_of(b.grad()), (std::vector<double>{1, 1}));
}

TEST(Engine, GraphIsFreedUnlessRetained) {
  Tensor x = leaf({2});
  Tensor y = x * x;
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{8}));
  expect_error([&] { y.backward(); }, "MulBackward: trying to backward through the graph a second time");
}

TEST(Engine, NonScalarRootNeedsAnExplicitGradient) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  expect_error([&] { y.backward(); }, "backward: a gradient can be implicitly created only for one-element outputs");
  y.backward(from_vector<double>({1, 0, -1}));
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{2, 0, -2}));
  expect_error([&] { (x * 2.0).backward(from_vector<double>({1, 2})); }, "backward: gradient of shape [2]");
}

TEST(Engine, ErrorsForTensorsOutsideAutograd) {
  Tensor plain = from_vector<double>({1, 2});
  expect_error([&] { sum(plain).backward(); }, "backward: tensor 0 does not require grad and has no grad_fn");
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  expect_error([&] { y.requires_grad_(false); }, "requires_grad_: only leaf tensors can change requires_grad");
  Tensor ints = arange(3);
  expect_error([&] { ints.requires_grad_(); }, "only floating point tensors can require gradients, got int64");
}

TEST(Engine, NoGradAndDetachRecordNothing) {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard no_grad;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    {
      EnableGradGuard enable;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
  }
  {
    InferenceMode inference;
    EXPECT_TRUE(InferenceMode::is_enabled());
    EXPECT_FALSE((x * 2.0).requires_grad());
  }
  EXPECT_FALSE(InferenceMode::is_enabled());
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.data_ptr(), x.data_ptr());
  // x * d: only the x path carries gradient.
  sum(x * d).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{1, 2}));
}

TEST(Engine, InPlaceChangeOfASavedTensorIsDetected) {
  Tensor w = leaf({1, 2});
  Tensor x = from_vector<double>({3, 4});
  Tensor y = sum(w * x);  // mul saves x for w's gradient
  add_(x, 1.0);
  expect_error([&] { y.backward(); },
               "MulBackward: a tensor saved for backward was modified by an in-place operation (it is at version 1, "
               "it was saved at version 0)");
}

TEST(Engine, InPlaceOnATensorThatRequiresGradIsRefusedUnderGradMode) {
  Tensor w = leaf({1, 2});
  expect_error([&] { add_(w, 1.0); }, "add_: in-place operation on a tensor that requires grad");
  expect_error([&] { w *= 2.0; }, "mul_: in-place operation on a tensor that requires grad");
  expect_error(
      [&] {
        w.copy_(from_vector<double>({0, 0}));
      },
      "copy_: in-place operation on a tensor that requires grad");
  Tensor buffer = zeros({2}, DType::Float64);
  expect_error([&] { buffer.copy_(w * 2.0); }, "copy_: in-place write from a tensor that requires grad");
  {
    NoGradGuard no_grad;
    add_(w, 1.0);
  }
  EXPECT_EQ(values_of(w), (std::vector<double>{2, 3}));
}

TEST(Engine, ViewsAreDifferentiable) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  // transpose, narrow, select and a broadcast view each route gradient to
  // the elements they show.
  Tensor y = sum(x.t() * from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}));
  y.backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{1, 3, 5, 2, 4, 6}));
  x.set_grad(Tensor());
  sum(x.narrow(1, 1, 2)).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{0, 1, 1, 0, 1, 1}));
  x.set_grad(Tensor());
  sum(x.select(0, 1) * 2.0).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{0, 0, 0, 2, 2, 2}));
  x.set_grad(Tensor());
  sum(x.unsqueeze(0).expand({4, 2, 3})).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>(6, 4)));
  x.set_grad(Tensor());
  sum(x.reshape({3, 2}).contiguous().to(DType::Float32)).backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float64);
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>(6, 1)));
}

TEST(Engine, TensorHooksSeeAndReplaceGradients) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3.0;
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = values_of(g);
    return g * 10.0;
  });
  int64_t handle = x.register_hook([](const Tensor& g) { return g + 1.0; });
  sum(y).backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{31, 31}));
  x.remove_hook(handle);
  x.set_grad(Tensor());
  sum(x * 1.0).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{1, 1}));
}

TEST(Engine, RetainGradKeepsANonLeafGradient) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  y.retain_grad();
  sum(y * y).backward();
  EXPECT_EQ(values_of(y.grad()), (std::vector<double>{4, 8}));
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{8, 16}));
}

TEST(Engine, PostAccumulateHooksFireAsEachLeafFinishes) {
  // A three-layer chain: h1 = x * w1, h2 = h1 * w2, out = sum(h2 * w3).
  // Backward reaches w3 first and w1 last; each hook must fire before the
  // engine moves on to the earlier layers (distributed data parallel starts
  // communication from these hooks), which the custom function's backward
  // between layers 1 and 2 observes.
  struct Marker : autograd::Function<Marker> {
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, std::vector<std::string>* log) {
      ctx->saved_data["log"] = log;
      return x.clone();
    }
    static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
      std::any_cast<std::vector<std::string>*>(ctx->saved_data["log"])->push_back("between layers 1 and 2");
      return {g[0], Tensor()};
    }
  };
  std::vector<std::string> log;
  Tensor x = from_vector<double>({1, 2});
  Tensor w1 = leaf({1, 1}), w2 = leaf({2, 2}), w3 = leaf({3, 3});
  for (auto [w, name] : {std::pair{w1, "w1"}, {w2, "w2"}, {w3, "w3"}}) {
    w.register_post_accumulate_grad_hook([&log, name = std::string(name)](const Tensor& p) {
      EXPECT_TRUE(p.grad().defined());
      log.push_back(name);
    });
  }
  Tensor h1 = Marker::apply(x * w1, &log);
  Tensor out = sum(h1 * w2 * w3);
  out.backward();
  EXPECT_EQ(log, (std::vector<std::string>{"w3", "w2", "between layers 1 and 2", "w1"}));
  Tensor y = x * 2.0;
  expect_error([&] { y.register_post_accumulate_grad_hook([](const Tensor&) {}); },
               "register_post_accumulate_grad_hook: only leaf tensors that require grad");
}

TEST(Engine, QueuedCallbacksRunOnceBackwardHasFinished) {
  // DDP waits for its gradient buckets in such a callback: it must run after
  // every leaf has its gradient, before backward() returns, and only once.
  std::vector<std::string> log;
  Tensor x = from_vector<double>({1, 2});
  Tensor w1 = leaf({1, 1}), w2 = leaf({2, 2});
  w2.register_post_accumulate_grad_hook([&](const Tensor&) {
    log.push_back("w2");
    autograd::queue_callback([&] {
      log.push_back(w1.grad().defined() ? "callback after w1" : "callback before w1");
      autograd::queue_callback([&] { log.push_back("queued by a callback"); });
    });
  });
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("w1"); });
  sum(x * w1 * w2).backward();
  EXPECT_EQ(log, (std::vector<std::string>{"w2", "w1", "callback after w1", "queued by a callback"}));
  log.clear();
  sum(x * w1).backward();  // w2's hook does not run: no callback is left over
  EXPECT_EQ(log, (std::vector<std::string>{"w1"}));
  expect_error([] { autograd::queue_callback([] {}); }, "queue_callback: no backward is running on this thread");
}

TEST(Engine, FunctionalGradAndSecondDerivatives) {
  // f = x^3: f' = 3x^2, f'' = 6x.
  Tensor x = leaf({2, -1});
  Tensor f = sum(x * x * x);
  TensorList g = autograd::grad({f}, {x}, {}, false, /*create_graph=*/true);
  EXPECT_EQ(values_of(g[0]), (std::vector<double>{12, 3}));
  EXPECT_FALSE(x.grad().defined()) << "autograd::grad must not accumulate into .grad()";
  TensorList gg = autograd::grad({sum(g[0])}, {x});
  EXPECT_EQ(values_of(gg[0]), (std::vector<double>{12, -6}));
  // backward(create_graph) keeps the graph of the gradient itself.
  Tensor z = leaf({3});
  sum(z * z * z).backward(Tensor(), false, /*create_graph=*/true);
  Tensor dz = z.grad();
  EXPECT_TRUE(dz.requires_grad());
  TensorList d2 = autograd::grad({sum(dz)}, {z});
  EXPECT_EQ(values_of(d2[0]), (std::vector<double>{18}));
  z.set_grad(Tensor());  // breaks the grad -> graph -> z cycle (Tensor::backward)

  Tensor unused = leaf({1});
  expect_error([&] { autograd::grad({sum(x * 2.0)}, {unused}); }, "grad: input 0 was not used to compute the outputs");
  TensorList none = autograd::grad({sum(x * 2.0)}, {unused}, {}, false, false, /*allow_unused=*/true);
  EXPECT_FALSE(none[0].defined());
}

TEST(Engine, CustomFunctionGradientsAndSavedTensorChecks) {
  struct Cube : autograd::Function<Cube> {
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
      ctx->save_for_backward({x});
      return ops::mul(ops::mul(x, x), x);
    }
    static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
      Tensor x = ctx->get_saved_variables()[0];
      return {g[0] * x * x * 3.0};
    }
  };
  Tensor x = leaf({1, 2, -3});
  Tensor y = Cube::apply(x);
  EXPECT_EQ(values_of(y), (std::vector<double>{1, 8, -27}));
  EXPECT_EQ(y.grad_fn_name(), "CubeBackward");
  sum(y).backward();
  EXPECT_EQ(values_of(x.grad()), (std::vector<double>{3, 12, 27}));
}

TEST(Engine, CheckpointGivesTheSameGradientsWithLessMemory) {
  // A deep elementwise chain: without checkpointing every intermediate
  // (1 MiB each) is kept for backward; with it, only the input.
  manual_seed(3);
  const int64_t n = 1 << 17;
  Tensor w = randn({n}, DType::Float64).requires_grad_();
  auto block = [&](const TensorList& in) {
    Tensor h = in[0];
    for (int i = 0; i < 16; ++i) h = h * w + 0.01;
    return TensorList{h};
  };
  auto run = [&](bool use_checkpoint) {
    w.set_grad(Tensor());
    Tensor x = ones({n}, DType::Float64).requires_grad_();
    cpu_reset_peak_allocated_bytes();
    size_t before = cpu_allocated_bytes();
    Tensor out = use_checkpoint ? autograd::checkpoint(block, {x})[0] : block({x})[0];
    Tensor loss = sum(out);
    size_t peak = cpu_peak_allocated_bytes() - before;
    loss.backward();
    return std::tuple{values_of(w.grad()), values_of(x.grad()), peak};
  };
  auto [w_plain, x_plain, peak_plain] = run(false);
  auto [w_ckpt, x_ckpt, peak_ckpt] = run(true);
  EXPECT_EQ(w_plain, w_ckpt);
  EXPECT_EQ(x_plain, x_ckpt);
  EXPECT_LT(peak_ckpt * 4, peak_plain) << "checkpoint peak " << peak_ckpt << " vs plain " << peak_plain;
}

}  // namespace
}  // namespace kiln
