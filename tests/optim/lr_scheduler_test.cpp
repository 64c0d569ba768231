// The schedulers against their closed formulas, their state dicts, and
// their refusals. torch_oracle_test.cpp compares them with PyTorch itself.
#include "optim/lr_scheduler.h"

#include <numbers>

#include "optim/one_cycle_lr.h"
#include "optim_test_util.h"

namespace kiln {

using namespace kiln::optim;
namespace {

constexpr double kPi = std::numbers::pi;

// An optimizer with nothing but an lr (no momentum, no beta1), written with
// the same extension points as SGD: a test of those too.
struct PlainOptions {
  static constexpr const char* kOptimizerName = "PlainDescent";
  double lr = 0.1;
  static std::vector<OptionField<PlainOptions>> fields() { return {{"lr", &PlainOptions::lr}}; }
  void validate(std::string_view op) const { KILN_CHECK(lr >= 0.0, op, ": invalid learning rate ", lr); }
};

class PlainDescent : public OptimizerWithOptions<PlainOptions> {
 public:
  PlainDescent(const std::vector<Tensor>& params, PlainOptions options) : OptimizerWithOptions(options) {
    add_initial_groups({{params, {}}});
  }
  void step() override {}

 protected:
  std::vector<StateEntry> state_entries(size_t) const override { return {}; }
};

// lrs[e][g]: the lrs right after construction (e = 0) and after each of `steps` steps.
std::vector<std::vector<double>> run(LRScheduler& s, int steps) {
  std::vector<std::vector<double>> lrs = {s.get_last_lr()};
  for (int e = 0; e < steps; ++e) {
    s.optimizer().step();
    s.step();
    lrs.push_back(s.get_last_lr());
  }
  return lrs;
}

// Checks lrs[e][g] against formula(e, g).
template <class Formula>
void expect_schedule(const std::vector<std::vector<double>>& lrs, Formula formula, double rtol) {
  for (size_t e = 0; e < lrs.size(); ++e)
    for (size_t g = 0; g < lrs[e].size(); ++g)
      EXPECT_NEAR(lrs[e][g], formula(static_cast<int64_t>(e), g), rtol * std::abs(formula(e, g)))
          << "epoch " << e << " group " << g;
}

struct TwoGroups {
  std::vector<Tensor> params = {make_param({1.0}, {1}), make_param({2.0}, {1})};
  SGD opt{{ParamGroup{{params[0]}}, ParamGroup{{params[1]}, {{"lr", 0.5}}}}, SGDOptions(0.1).momentum(0.9)};
  double base(size_t g) const { return g == 0 ? 0.1 : 0.5; }
};

TEST(StepLR, DecaysEveryStepSizeEpochs) {
  TwoGroups t;
  StepLR s(t.opt, /*step_size=*/3, /*gamma=*/0.1);
  EXPECT_EQ(t.opt.initial_lr(0), 0.1);
  expect_schedule(
      run(s, 10), [&](int64_t e, size_t g) { return t.base(g) * std::pow(0.1, e / 3); }, 1e-15);
  EXPECT_EQ(t.opt.lr(1), s.get_last_lr()[1]);
  EXPECT_EQ(s.last_epoch(), 10);
}

TEST(StepLR, IsChainableAndFollowsOutsideChanges) {
  TwoGroups t;
  StepLR s(t.opt, 2, 0.5);
  s.step();
  t.opt.set_lr(0, 0.04);  // as a user (or another scheduler) might
  s.step();               // epoch 2: halves whatever the lr is now
  EXPECT_EQ(s.get_last_lr()[0], 0.02);
  EXPECT_EQ(s.get_last_lr()[1], 0.25);
}

TEST(MultiStepLR, DecaysAtMilestonesTwiceAtARepeatedOne) {
  TwoGroups t;
  MultiStepLR s(t.opt, {6, 2, 6}, 0.5);
  expect_schedule(
      run(s, 8), [&](int64_t e, size_t g) { return t.base(g) * (e < 2   ? 1.0
                                                                : e < 6 ? 0.5
                                                                        : 0.125); }, 1e-15);
}

TEST(LinearLR, WarmsUpLinearlyThenHolds) {
  TwoGroups t;
  LinearLR s(t.opt, /*start_factor=*/0.25, /*end_factor=*/1.0, /*total_iters=*/4);
  expect_schedule(
      run(s, 7), [&](int64_t e, size_t g) { return t.base(g) * (0.25 + 0.75 * std::min<int64_t>(e, 4) / 4.0); }, 1e-15);
  // Warm, the lr is the base lr up to the rounding the recurrence gathered.
  EXPECT_NEAR(t.opt.lr(0), 0.1, 1e-16);
}

TEST(CosineAnnealingLR, FollowsTheCosineThroughAndPastTMax) {
  TwoGroups t;
  CosineAnnealingLR s(t.opt, /*T_max=*/5, /*eta_min=*/0.01);
  // Past T_max the cosine rises again; epoch T_max + 1 takes the branch that
  // avoids dividing by 1 + cos(pi) = 0.
  expect_schedule(
      run(s, 14), [&](int64_t e, size_t g) { return 0.01 + (t.base(g) - 0.01) * (1 + std::cos(kPi * e / 5.0)) / 2; },
      1e-12);
}

TEST(CosineAnnealingLR, RecurrenceNotClosedForm) {
  // Lowering the lr by hand scales the rest of the cosine, as in PyTorch:
  // each step multiplies (lr - eta_min) by a ratio of cosines.
  TwoGroups t;
  CosineAnnealingLR s(t.opt, 10);
  s.step();
  double lr1 = t.opt.lr(0);
  t.opt.set_lr(0, lr1 / 2);
  s.step();
  double ratio = (1 + std::cos(kPi * 2 / 10)) / (1 + std::cos(kPi * 1 / 10));
  EXPECT_NEAR(t.opt.lr(0), lr1 / 2 * ratio, 1e-16);
}

TEST(OneCycleLR, CyclesLrAndMomentum) {
  TwoGroups t;
  OneCycleLR s(t.opt, std::vector<double>{1.0, 2.0}, /*total_steps=*/10);
  // Warm-up over epochs 0..2 (pct_start 0.3 of 10 steps ends at step 2),
  // then anneal to max / 25 / 1e4 at step 9; momentum moves the other way.
  auto cos_anneal = [](double start, double end, double pct) {
    return end + (start - end) / 2 * (std::cos(kPi * pct) + 1);
  };
  std::vector<double> max_lr = {1.0, 2.0};
  auto lr = [&](int64_t e, size_t g) {
    double initial = max_lr[g] / 25, min = initial / 1e4;
    return e <= 2 ? cos_anneal(initial, max_lr[g], e / 2.0) : cos_anneal(max_lr[g], min, (e - 2) / 7.0);
  };
  auto momentum = [&](int64_t e) {
    return e <= 2 ? cos_anneal(0.95, 0.85, e / 2.0) : cos_anneal(0.85, 0.95, (e - 2) / 7.0);
  };
  EXPECT_EQ(t.opt.initial_lr(1), 2.0 / 25);
  EXPECT_NEAR(t.opt.hyperparameter(0, "momentum"), momentum(0), 1e-15);
  std::vector<std::vector<double>> lrs = {s.get_last_lr()};
  for (int e = 1; e <= 10; ++e) {
    s.step();
    lrs.push_back(s.get_last_lr());
    EXPECT_NEAR(t.opt.hyperparameter(1, "momentum"), momentum(e), 1e-15) << "epoch " << e;
  }
  expect_schedule(lrs, lr, 1e-14);
  // Step 10 is the last allowed (PyTorch allows total_steps steps after construction).
  expect_error([&] { s.step(); }, "OneCycleLR: tried to step 12 times; total_steps is 10");
}

TEST(OneCycleLR, CyclesBeta1OfAdamAndHasThreePhaseAndLinearForms) {
  std::vector<Tensor> params = {make_param({1.0}, {1})};
  Adam opt(params, AdamOptions());
  OneCycleLROptions o;
  o.three_phase = true;
  o.anneal_strategy = OneCycleLROptions::AnnealStrategy::Linear;
  o.pct_start = 0.25;
  OneCycleLR s(opt, 0.4, 20, o);
  // Phases end at steps 4, 8 and 19: up to 0.4, back to 0.016, down to 1.6e-6.
  auto linear = [](double start, double end, double pct) { return (end - start) * pct + start; };
  auto lr = [&](int64_t e, size_t) {
    return e <= 4   ? linear(0.016, 0.4, e / 4.0)
           : e <= 8 ? linear(0.4, 0.016, (e - 4) / 4.0)
                    : linear(0.016, 1.6e-6, (e - 8) / 11.0);
  };
  auto beta1 = [&](int64_t e) {
    return e <= 4 ? linear(0.95, 0.85, e / 4.0) : e <= 8 ? linear(0.85, 0.95, (e - 4) / 4.0) : 0.95;
  };
  std::vector<std::vector<double>> lrs = {s.get_last_lr()};
  for (int e = 1; e <= 19; ++e) {
    s.step();
    lrs.push_back(s.get_last_lr());
    EXPECT_NEAR(opt.options(0).beta1(), beta1(e), 1e-15) << "epoch " << e;
  }
  expect_schedule(lrs, lr, 1e-13);
}

TEST(OneCycleLR, Refusals) {
  TwoGroups t;
  expect_error([&] { OneCycleLR(t.opt, 1.0, 0); }, "OneCycleLR: total_steps must be positive, got 0");
  OneCycleLROptions bad_pct;
  bad_pct.pct_start = 1.5;
  expect_error([&] { OneCycleLR(t.opt, 1.0, 10, bad_pct); }, "OneCycleLR: pct_start must be in [0, 1], got 1.5");
  expect_error([&] { OneCycleLR(t.opt, std::vector<double>{1.0}, 10); },
               "OneCycleLR: expected 2 values for max_lr (one per param group), got 1");
  OneCycleLROptions short_warmup;
  short_warmup.pct_start = 0.1;  // warm-up ends at step 0.1 * 10 - 1 = 0, where it starts
  expect_error([&] { OneCycleLR(t.opt, 1.0, 10, short_warmup); }, "OneCycleLR: phase 0 has no steps");
  PlainDescent plain({make_param({1.0}, {1})}, PlainOptions{});
  expect_error([&] { OneCycleLR(plain, 1.0, 10); },
               "OneCycleLR: PlainDescent has neither momentum nor beta1 to cycle; pass cycle_momentum = false");
  OneCycleLROptions no_momentum;
  no_momentum.cycle_momentum = false;
  OneCycleLR s(plain, 1.0, 10, no_momentum);
  EXPECT_NEAR(plain.lr(0), 1.0 / 25, 1e-16);
}

TEST(SequentialLR, WarmupThenCosine) {
  TwoGroups t;
  auto warmup = std::make_shared<LinearLR>(t.opt, 0.1, 1.0, 4);
  auto cosine = std::make_shared<CosineAnnealingLR>(t.opt, 6, 0.001);
  SequentialLR s(t.opt, {warmup, cosine}, {4});
  // The cosine's construction changed nothing that lasts: epoch 0 is the warm-up's.
  EXPECT_EQ(t.opt.lr(0), 0.1 * 0.1);
  expect_schedule(
      run(s, 12),
      [&](int64_t e, size_t g) {
        if (e < 4) return t.base(g) * (0.1 + 0.9 * e / 4.0);
        return 0.001 + (t.base(g) - 0.001) * (1 + std::cos(kPi * (e - 4) / 6.0)) / 2;
      },
      1e-12);
}

TEST(SequentialLR, Refusals) {
  TwoGroups t;
  TwoGroups other;
  auto a = std::make_shared<StepLR>(t.opt, 2);
  auto b = std::make_shared<StepLR>(other.opt, 2);
  expect_error(
      [&] {
        SequentialLR(t.opt, {a, b}, {3});
      },
      "SequentialLR: scheduler 1 (StepLR) drives another optimizer than the one given");
  expect_error(
      [&] {
        SequentialLR(t.opt, {a, a}, {});
      },
      "SequentialLR: expects one milestone fewer than schedulers, got 2 schedulers and 0 milestones");
  expect_error(
      [&] {
        SequentialLR(t.opt, {a, a, a}, {5, 3});
      },
      "SequentialLR: milestones must be positive and increasing, got [5, 3]");
  expect_error([&] { SequentialLR(t.opt, {}, {}); }, "SequentialLR: needs at least one scheduler");
}

TEST(LRScheduler, ConstructorRefusals) {
  TwoGroups t;
  expect_error([&] { StepLR(t.opt, 0); }, "StepLR: step_size must be positive, got 0");
  expect_error([&] { LinearLR(t.opt, 0.0); }, "LinearLR: start_factor must be in (0, 1], got 0");
  expect_error([&] { LinearLR(t.opt, 0.5, 1.5); }, "LinearLR: end_factor must be in [0, 1], got 1.5");
  expect_error([&] { LinearLR(t.opt, 0.5, 1.0, 0); }, "LinearLR: total_iters must be positive, got 0");
  expect_error([&] { CosineAnnealingLR(t.opt, 0); }, "CosineAnnealingLR: T_max must be positive, got 0");
  CosineAnnealingLR s(t.opt, 10);
  t.opt.add_param_group({{make_param({1.0}, {1})}});
  expect_error([&] { s.step(); },
               "CosineAnnealingLR: the optimizer has 3 param groups but the scheduler was made for 2 (make the "
               "scheduler after adding the groups)");
}

// Runs `make`'s scheduler 7 steps, saves optimizer and scheduler, and checks
// that a fresh pair loading both continues with the same lrs, bit for bit.
template <class Make>
void check_resume(Make make, int more_steps) {
  TwoGroups a;
  std::unique_ptr<LRScheduler> sa = make(a.opt);
  for (int e = 0; e < 7; ++e) sa->step();
  TensorDict opt_state = a.opt.state_dict();
  TensorDict sched_state = sa->state_dict();

  TwoGroups b;
  std::unique_ptr<LRScheduler> sb = make(b.opt);
  b.opt.load_state_dict(opt_state);
  sb->load_state_dict(sched_state);
  EXPECT_EQ(sb->last_epoch(), sa->last_epoch());
  EXPECT_EQ(sb->get_last_lr(), sa->get_last_lr());
  for (int e = 0; e < more_steps; ++e) {
    sa->step();
    sb->step();
    EXPECT_EQ(sb->get_last_lr(), sa->get_last_lr()) << sa->name() << " step " << e;
    EXPECT_EQ(b.opt.hyperparameter(0, "momentum"), a.opt.hyperparameter(0, "momentum"));
  }
}

TEST(LRScheduler, StateDictResumesExactly) {
  check_resume([](Optimizer& o) { return std::make_unique<StepLR>(o, 3, 0.3); }, 6);
  check_resume([](Optimizer& o) { return std::make_unique<MultiStepLR>(o, std::vector<int64_t>{3, 9}, 0.3); }, 6);
  check_resume([](Optimizer& o) { return std::make_unique<LinearLR>(o, 0.1, 0.9, 10); }, 6);
  check_resume([](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, 9, 1e-4); }, 12);
  check_resume([](Optimizer& o) { return std::make_unique<OneCycleLR>(o, 1.0, 15); }, 8);
  check_resume(
      [](Optimizer& o) {
        auto warmup = std::make_shared<LinearLR>(o, 0.01, 1.0, 5);
        auto cosine = std::make_shared<CosineAnnealingLR>(o, 10);
        return std::make_unique<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{warmup, cosine},
                                              std::vector<int64_t>{5});
      },
      9);
}

TEST(LRScheduler, StateDictLayoutAndRefusals) {
  TwoGroups t;
  StepLR s(t.opt, 2);
  s.step();
  TensorDict d = s.state_dict();
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"last_epoch", "base_lrs", "last_lr"}));
  EXPECT_EQ(d.at("last_epoch").item<int64_t>(), 1);
  EXPECT_EQ(values_of(d.at("base_lrs")), (std::vector<double>{0.1, 0.5}));

  TensorDict missing;
  missing.insert("last_epoch", d.at("last_epoch"));
  missing.insert("last_lr", d.at("last_lr"));
  expect_error([&] { s.load_state_dict(missing); }, "StepLR::load_state_dict: missing key 'base_lrs'");
  TensorDict wrong_groups = missing;
  wrong_groups.insert("base_lrs", from_vector<double>({0.1, 0.2, 0.3}));
  expect_error([&] { s.load_state_dict(wrong_groups); },
               "StepLR::load_state_dict: 'base_lrs' has shape [3] but the optimizer has 2 param groups");
  TensorDict extra = wrong_groups;
  extra.insert("gamma", scalar_tensor(0.5, DType::Float64));
  expect_error([&] { s.load_state_dict(extra); }, "StepLR::load_state_dict: unexpected key 'gamma'");
  EXPECT_EQ(s.last_epoch(), 1);

  auto warmup = std::make_shared<LinearLR>(t.opt, 0.5, 1.0, 2);
  auto step = std::make_shared<StepLR>(t.opt, 2);
  SequentialLR seq(t.opt, {warmup, step}, {2});
  seq.step();
  TensorDict sd = seq.state_dict();
  EXPECT_TRUE(sd.contains("schedulers.1.base_lrs"));
  TensorDict bad_child;
  for (const auto& [k, v] : sd)
    if (k != "schedulers.1.last_lr") bad_child.insert(k, v);
  bad_child.insert("schedulers.1.last_epoch_typo", scalar_tensor(int64_t{3}, DType::Int64));
  expect_error([&] { seq.load_state_dict(bad_child); },
               "SequentialLR::load_state_dict: in 'schedulers.1.*': StepLR::load_state_dict: unexpected key "
               "'last_epoch_typo'");
  TensorDict bad_index = sd;
  bad_index.insert("schedulers.2.last_epoch", scalar_tensor(int64_t{3}, DType::Int64));
  expect_error([&] { seq.load_state_dict(bad_index); },
               "SequentialLR::load_state_dict: unexpected key 'schedulers.2.last_epoch' (there are 2 schedulers)");
  EXPECT_EQ(seq.last_epoch(), 1);
  EXPECT_EQ(warmup->last_epoch(), 1);
}

}  // namespace
}  // namespace kiln
