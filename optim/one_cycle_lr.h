// OneCycleLR: the 1cycle policy (Smith & Topin, "Super-Convergence"), as
// torch.optim.lr_scheduler.OneCycleLR. The lr rises from max_lr / div_factor
// to max_lr over the first pct_start of total_steps, then anneals to
// max_lr / (div_factor * final_div_factor); with cycle_momentum the
// optimizer's momentum (SGD) or beta1 (Adam, AdamW) moves the opposite way,
// between max_momentum and base_momentum. Stepped once per batch.
//
//   OneCycleLR schedule(opt, /*max_lr=*/0.1, /*total_steps=*/epochs * batches_per_epoch);
//
// three_phase adds a third phase (lr back down to the initial lr, then on
// to the minimum), as fastai's schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/lr_scheduler.h"

namespace kiln::optim {

struct OneCycleLROptions {
  enum class AnnealStrategy { Cos, Linear };

  double pct_start = 0.3;
  AnnealStrategy anneal_strategy = AnnealStrategy::Cos;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
};

class OneCycleLR : public LRScheduler {
 public:
  // One max_lr for every param group, or one per group. Sets each group's
  // initial lr to max_lr / div_factor, and with cycle_momentum its momentum
  // or beta1 to max_momentum; throws if the optimizer has neither.
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleLROptions options = {});
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps, OneCycleLROptions options = {});
  std::string name() const override { return "OneCycleLR"; }

 protected:
  // Throws once stepped past total_steps.
  std::vector<double> get_lr() override;

 private:
  enum class Level { Initial, Max, Min };  // lr levels
  enum class Momentum { Max, Base };
  struct Phase {
    double end_step;
    Level start_lr, end_lr;
    Momentum start_momentum, end_momentum;
  };

  double lr_at(Level level, size_t group) const;
  double momentum_at(Momentum level) const;
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
  std::vector<double> max_lrs_, min_lrs_;  // one per group; initial lrs are base_lrs_
  std::string momentum_name_;              // "momentum" or "beta1"; empty without cycle_momentum
};

}  // namespace kiln::optim
