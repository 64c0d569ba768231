// The optimizers and schedulers against PyTorch itself: the same start
// values and grads go through torch.optim in /usr/bin/python3 and through
// Kiln, and every step's parameters (or lrs) are compared. Skipped where
// that python has no torch.
#include <functional>
#include <memory>

#include "optim/lr_scheduler.h"
#include "optim/one_cycle_lr.h"
#include "optim_test_util.h"

namespace kiln {

using namespace kiln::optim;
namespace {

#define SKIP_WITHOUT_TORCH() \
  if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch; the PyTorch comparison is skipped"

constexpr int kOptimizerSteps = 6;

// Start values and per-step grads of two parameters, (2, 3) and (4,),
// exactly representable in float32.
struct Trajectory {
  std::vector<std::vector<double>> start = {as_float32(pseudo_random(6, -1, 1, 31)),
                                            as_float32(pseudo_random(4, -1, 1, 32))};
  std::vector<std::vector<std::vector<double>>> grads;  // [step][param]
  Trajectory() {
    for (int s = 0; s < kOptimizerSteps; ++s)
      grads.push_back(
          {as_float32(pseudo_random(6, -1, 1, 40 + 2 * s)), as_float32(pseudo_random(4, -2, 2, 41 + 2 * s))});
  }
};

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(const std::vector<ParamGroup>&)>;

// One optimizer configuration: PyTorch's constructor (over `groups`) and Kiln's.
struct OptimizerCase {
  std::string torch_constructor;
  MakeOptimizer make;
};

template <class Optim, class Options>
OptimizerCase optimizer_case(const std::string& torch_constructor, Options options) {
  return {torch_constructor,
          [options](const std::vector<ParamGroup>& groups) { return std::make_unique<Optim>(groups, options); }};
}

// Runs every case in float32 and float64 through PyTorch (one python
// process for all) and Kiln, with the second group's lr set to 0.02, and
// compares every step's parameters. Kiln's add(a, b, alpha) rounds alpha * b
// before adding where PyTorch's CPU kernel fuses the two (an FMA), so the
// float32 results may differ by a few roundings: they must agree within
// `ulps` units in the last place of the largest parameter value.
void compare_optimizers(const std::vector<OptimizerCase>& cases, double ulps) {
  Trajectory t;
  const std::vector<DType> dtypes = {DType::Float32, DType::Float64};
  std::ostringstream py;
  py << "import torch\n"
     << "def run(dt, make):\n"
     << "    params = [torch.tensor(" << python_list(t.start[0]) << ", dtype=dt).reshape(2, 3), torch.tensor("
     << python_list(t.start[1]) << ", dtype=dt)]\n"
     << "    grads = [";
  for (const auto& step : t.grads) py << "[" << python_list(step[0]) << ", " << python_list(step[1]) << "], ";
  py << "]\n"
     << "    opt = make([{'params': [params[0]]}, {'params': [params[1]], 'lr': 0.02}])\n"
     << "    for step in grads:\n"
     << "        for p, g in zip(params, step):\n"
     << "            p.grad = torch.tensor(g, dtype=dt).reshape(p.shape)\n"
     << "        opt.step()\n"
     << "        print(' '.join(repr(x) for p in params for x in p.reshape(-1).tolist()))\n";
  for (DType dtype : dtypes)
    for (const auto& c : cases)
      py << "run(torch." << (dtype == DType::Float32 ? "float32" : "float64")
         << ", lambda groups: " << c.torch_constructor << ")\n";
  auto out = run_python(py.str());
  if (!out) return;
  const std::vector<std::vector<double>> lines = parse_lines(*out);
  ASSERT_EQ(lines.size(), dtypes.size() * cases.size() * kOptimizerSteps);

  size_t line = 0;
  for (DType dtype : dtypes) {
    const double eps = dtype == DType::Float32 ? 0x1p-23 : 0x1p-52;
    for (const auto& c : cases) {
      SCOPED_TRACE(c.torch_constructor + " in " + detail::str(dtype));
      std::vector<Tensor> params = {make_param(t.start[0], {2, 3}, dtype), make_param(t.start[1], {4}, dtype)};
      std::unique_ptr<Optimizer> opt = c.make({ParamGroup{{params[0]}}, ParamGroup{{params[1]}, {{"lr", 0.02}}}});
      for (int s = 0; s < kOptimizerSteps; ++s, ++line) {
        for (size_t i = 0; i < params.size(); ++i) set_grad_values(params[i], t.grads[s][i]);
        opt->step();
        std::vector<double> actual = values_of(params[0]);
        for (double v : values_of(params[1])) actual.push_back(v);
        double scale = 0;
        for (double v : lines[line]) scale = std::max(scale, std::abs(v));
        expect_near_all(actual, lines[line], 0, ulps * eps * scale, "step " + std::to_string(s));
      }
    }
  }
}

TEST(TorchOracle, SGD) {
  SKIP_WITHOUT_TORCH();
  compare_optimizers(
      {optimizer_case<SGD>("torch.optim.SGD(groups, lr=0.1)", SGDOptions(0.1)),
       optimizer_case<SGD>("torch.optim.SGD(groups, lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.05)",
                           SGDOptions(0.1).momentum(0.9).dampening(0.2).weight_decay(0.05)),
       optimizer_case<SGD>("torch.optim.SGD(groups, lr=0.1, momentum=0.8, weight_decay=0.01, nesterov=True)",
                           SGDOptions(0.1).momentum(0.8).weight_decay(0.01).nesterov(true)),
       optimizer_case<SGD>("torch.optim.SGD(groups, lr=0.1, momentum=0.5, maximize=True)",
                           SGDOptions(0.1).momentum(0.5).maximize(true))},
      2);
}

TEST(TorchOracle, AdamAndAdamW) {
  SKIP_WITHOUT_TORCH();
  compare_optimizers(
      {optimizer_case<Adam>("torch.optim.Adam(groups, lr=0.01)", AdamOptions(0.01)),
       optimizer_case<Adam>(
           "torch.optim.Adam(groups, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=True)",
           AdamOptions(0.01).beta1(0.8).beta2(0.95).eps(1e-6).weight_decay(0.1).amsgrad(true)),
       optimizer_case<Adam>("torch.optim.Adam(groups, lr=0.01, maximize=True)", AdamOptions(0.01).maximize(true)),
       optimizer_case<AdamW>("torch.optim.AdamW(groups, lr=0.01)", AdamWOptions(0.01)),
       optimizer_case<AdamW>("torch.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.99), weight_decay=0.3, amsgrad=True)",
                             AdamWOptions(0.01).beta2(0.99).weight_decay(0.3).amsgrad(true))},
      2);
}

// nanoGPT's configure_optimizers: weight decay for the matrix, none for the
// 1-d parameter (a bias or norm weight), through weight_decay_groups; the
// second group keeps the 0.02 lr compare_optimizers gives it.
TEST(TorchOracle, AdamWWithNanoGptWeightDecayGroups) {
  SKIP_WITHOUT_TORCH();
  MakeOptimizer make = [](const std::vector<ParamGroup>& groups) -> std::unique_ptr<Optimizer> {
    std::vector<ParamGroup> by_dim = weight_decay_groups({groups[1].params[0], groups[0].params[0]}, 0.1);
    EXPECT_TRUE(by_dim[0].params.size() == 1 && by_dim[0].params[0].is_same(groups[0].params[0]));
    by_dim[1].options["lr"] = 0.02;
    // Group order as PyTorch's below: the decayed matrix first.
    return std::make_unique<AdamW>(by_dim, AdamWOptions(0.01));
  };
  compare_optimizers({{"torch.optim.AdamW([{'params': groups[0]['params'], 'weight_decay': 0.1}, "
                       "{'params': groups[1]['params'], 'weight_decay': 0.0, 'lr': 0.02}], lr=0.01)",
                       make}},
                     2);
}

// ---- schedulers ------------------------------------------------------------------

// Two groups (lr 0.1 and 0.5) of an SGD with momentum 0.9, or an Adam.
struct SchedulerSetup {
  std::vector<Tensor> params = {make_param({0.0}, {1}), make_param({0.0}, {1})};
  std::vector<ParamGroup> groups = {ParamGroup{{params[0]}}, ParamGroup{{params[1]}, {{"lr", 0.5}}}};
  std::unique_ptr<Optimizer> opt;
  explicit SchedulerSetup(bool adam) {
    if (adam) {
      opt = std::make_unique<Adam>(groups, AdamOptions(0.1));
    } else {
      opt = std::make_unique<SGD>(groups, SGDOptions(0.1).momentum(0.9));
    }
  }
};

using MakeScheduler = std::function<std::unique_ptr<LRScheduler>(Optimizer&)>;

// One scheduler configuration, stepped `steps` times, over an SGD with
// momentum 0.9 or an Adam.
struct SchedulerCase {
  std::string torch_constructor;  // over `opt`, with lr_scheduler as S
  MakeScheduler make;
  int steps;
  bool adam = false;
};

// Compares the lrs and momenta (SGD) or beta1s (Adam) after construction
// and after each step with PyTorch's (one python process for all cases),
// to 1e-12 relative: the schedules are the same float64 operations.
void compare_schedulers(const std::vector<SchedulerCase>& cases) {
  std::ostringstream py;
  py << "import torch\n"
     << "from torch.optim import lr_scheduler as S\n"
     << "def run(make, steps, adam):\n"
     << "    p0 = torch.zeros(1, requires_grad=True)\n"
     << "    p1 = torch.zeros(1, requires_grad=True)\n"
     << "    groups = [{'params': [p0]}, {'params': [p1], 'lr': 0.5}]\n"
     << "    opt = torch.optim.Adam(groups, lr=0.1) if adam else torch.optim.SGD(groups, lr=0.1, momentum=0.9)\n"
     << "    sched = make(opt)\n"
     << "    def show():\n"
     << "        m = [g['betas'][0] if 'betas' in g else g['momentum'] for g in opt.param_groups]\n"
     << "        print(' '.join(repr(x) for x in sched.get_last_lr() + m))\n"
     << "    show()\n"
     << "    for _ in range(steps):\n"
     << "        opt.step()\n"
     << "        sched.step()\n"
     << "        show()\n";
  size_t total_lines = 0;
  for (const auto& c : cases) {
    py << "run(lambda opt: " << c.torch_constructor << ", " << c.steps << ", " << (c.adam ? "True" : "False") << ")\n";
    total_lines += c.steps + 1;
  }
  auto out = run_python(py.str());
  if (!out) return;
  const std::vector<std::vector<double>> lines = parse_lines(*out);
  ASSERT_EQ(lines.size(), total_lines);

  size_t line = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.torch_constructor);
    SchedulerSetup setup(c.adam);
    Optimizer& opt = *setup.opt;
    std::unique_ptr<LRScheduler> sched = c.make(opt);
    const std::string momentum = c.adam ? "beta1" : "momentum";
    for (int e = 0; e <= c.steps; ++e, ++line) {
      if (e > 0) {
        opt.step();
        sched->step();
      }
      std::vector<double> actual = sched->get_last_lr();
      for (size_t g = 0; g < opt.num_param_groups(); ++g) actual.push_back(opt.hyperparameter(g, momentum));
      expect_near_all(actual, lines[line], 1e-12, 0, "epoch " + std::to_string(e));
    }
  }
}

TEST(TorchOracle, Schedulers) {
  SKIP_WITHOUT_TORCH();
  OneCycleLROptions linear;
  linear.pct_start = 0.2;
  linear.anneal_strategy = OneCycleLROptions::AnnealStrategy::Linear;
  linear.three_phase = true;
  linear.div_factor = 10;
  linear.final_div_factor = 100;
  linear.base_momentum = 0.8;
  linear.max_momentum = 0.9;
  using Schedulers = std::vector<std::shared_ptr<LRScheduler>>;
  compare_schedulers({
      {"S.StepLR(opt, step_size=3, gamma=0.1)", [](Optimizer& o) { return std::make_unique<StepLR>(o, 3, 0.1); }, 12},
      {"S.MultiStepLR(opt, milestones=[2, 5, 5, 9], gamma=0.3)",
       [](Optimizer& o) {
         return std::make_unique<MultiStepLR>(o, std::vector<int64_t>{2, 5, 5, 9}, 0.3);
       },
       12},
      {"S.LinearLR(opt, start_factor=0.05, end_factor=0.9, total_iters=7)",
       [](Optimizer& o) { return std::make_unique<LinearLR>(o, 0.05, 0.9, 7); }, 12},
      {"S.CosineAnnealingLR(opt, T_max=7, eta_min=1e-3)",
       [](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, 7, 1e-3); }, 40},
      {"S.CosineAnnealingLR(opt, T_max=100)", [](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, 100); },
       100},
      {"S.OneCycleLR(opt, max_lr=[1.0, 2.0], total_steps=25)",
       [](Optimizer& o) {
         return std::make_unique<OneCycleLR>(o, std::vector<double>{1.0, 2.0}, 25);
       },
       25},
      // Stepped through total_steps, where the linear schedule ends below zero.
      {"S.OneCycleLR(opt, max_lr=0.3, total_steps=30, pct_start=0.2, anneal_strategy='linear', three_phase=True, "
       "div_factor=10, final_div_factor=100, base_momentum=0.8, max_momentum=0.9)",
       [linear](Optimizer& o) { return std::make_unique<OneCycleLR>(o, 0.3, 30, linear); }, 30},
      {"S.OneCycleLR(opt, max_lr=0.01, epochs=4, steps_per_epoch=5)",
       [](Optimizer& o) { return std::make_unique<OneCycleLR>(o, 0.01, 20); }, 20, /*adam=*/true},
      {"S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.01, total_iters=5), "
       "S.CosineAnnealingLR(opt, T_max=15, eta_min=1e-4)], milestones=[5])",
       [](Optimizer& o) {
         auto warmup = std::make_shared<LinearLR>(o, 0.01, 1.0, 5);
         auto cosine = std::make_shared<CosineAnnealingLR>(o, 15, 1e-4);
         return std::make_unique<SequentialLR>(o, Schedulers{warmup, cosine}, std::vector<int64_t>{5});
       },
       25},
      {"S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.5, total_iters=3), S.StepLR(opt, step_size=2, "
       "gamma=0.5), S.MultiStepLR(opt, milestones=[1, 3], gamma=0.1)], milestones=[3, 8])",
       [](Optimizer& o) {
         auto a = std::make_shared<LinearLR>(o, 0.5, 1.0, 3);
         auto b = std::make_shared<StepLR>(o, 2, 0.5);
         auto c = std::make_shared<MultiStepLR>(o, std::vector<int64_t>{1, 3}, 0.1);
         return std::make_unique<SequentialLR>(o, Schedulers{a, b, c}, std::vector<int64_t>{3, 8});
       },
       14},
  });
}

}  // namespace
}  // namespace kiln
