// Learning-rate schedulers, as torch.optim.lr_scheduler: each step() sets
// the lr of every param group of one optimizer.
//
//   SGD opt(params, SGDOptions(0.1).momentum(0.9));
//   auto warmup = std::make_shared<LinearLR>(opt, /*start_factor=*/0.01, /*end_factor=*/1.0, /*total_iters=*/500);
//   auto cosine = std::make_shared<CosineAnnealingLR>(opt, /*T_max=*/9500);
//   SequentialLR schedule(opt, {warmup, cosine}, /*milestones=*/{500});
//   for (...) { ...; opt.step(); schedule.step(); }
//
// Note [Chainable schedulers]
// As in PyTorch, constructing a scheduler already sets the lrs of epoch 0,
// and each step() computes the next lrs from the optimizer's current ones
// (StepLR multiplies by gamma, CosineAnnealingLR applies the ratio of two
// cosines), not from a closed formula. So a scheduler follows lr changes
// made by others, and its values match PyTorch's bit for bit, including the
// rounding its recurrences accumulate. The first lr of each group is kept
// in the optimizer (Optimizer::initial_lr), where the first scheduler
// attached to it puts it, so that all schedulers of one optimizer agree on
// it. SequentialLR restarts each scheduler at its milestone from the closed
// form at epoch 0, as PyTorch's step(0) does.
//
// Resuming: construct the optimizer and the scheduler as before, then load
// both state dicts (the optimizer's restores the lrs, the scheduler's its
// epoch). A scheduler holds a reference to its optimizer, which must
// outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "tensor/tensor_dict.h"

namespace kiln::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // "StepLR", ...: names the scheduler in error messages.
  virtual std::string name() const = 0;

  // Moves to the next epoch (or iteration) and sets the optimizer's lrs.
  virtual void step();
  // The lrs the last step set, one per param group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  // Steps taken since construction; 0 right after it.
  int64_t last_epoch() const { return last_epoch_; }
  Optimizer& optimizer() const { return optimizer_; }

  // "last_epoch" (int64 0-dim), "base_lrs" and "last_lr" (float64, one per
  // param group); SequentialLR adds its schedulers' under "schedulers.<i>.".
  virtual TensorDict state_dict() const;
  // Throws naming the key on a missing or unexpected key or a different
  // number of param groups; changes nothing then.
  virtual void load_state_dict(const TensorDict& dict);

 protected:
  // Records each group's initial lr (if no scheduler did before) as the base
  // lr. Derived constructors finish with initial_step().
  explicit LRScheduler(Optimizer& optimizer);

  // The lrs of epoch last_epoch_, computed from the optimizer's current lrs
  // (Note [Chainable schedulers]).
  virtual std::vector<double> get_lr() = 0;
  // The lrs of epoch last_epoch_ from base_lrs_ alone, where a formula exists.
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }

  // Sets the lrs of epoch 0.
  void initial_step() { step(); }
  // Jumps to `epoch` and sets its lrs, from the closed form where there is
  // one (PyTorch's deprecated step(epoch), which SequentialLR still uses).
  void step_to(int64_t epoch);
  // The optimizer's lr of every group now.
  std::vector<double> current_lrs() const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  std::vector<double> last_lr_;

 private:
  // Throws if param groups were added since the scheduler was made.
  void check_groups() const;
  void apply(const std::vector<double>& lrs);

  friend class SequentialLR;
};

// lr * gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr * gamma at each milestone (twice at a milestone listed twice).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted, repeats kept
  double gamma_;
};

// base_lr times a factor going linearly from start_factor (epoch 0) to
// end_factor (epoch total_iters), then constant: the usual warm-up.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  std::string name() const override { return "LinearLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, reached
// through PyTorch's recurrence; past T_max the cosine rises again.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// Runs schedulers[0] until milestones[0], then schedulers[1] (restarted at
// its epoch 0) until milestones[1], and so on. All must drive `optimizer`.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  std::string name() const override { return "SequentialLR"; }

  void step() override;
  TensorDict state_dict() const override;
  void load_state_dict(const TensorDict& dict) override;

 protected:
  // The lrs as they are: the schedulers it runs compute them.
  std::vector<double> get_lr() override { return current_lrs(); }

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace kiln::optim
