// OneCycleLR, operation for operation as PyTorch's get_lr so that the lrs
// and momenta agree to the last bit.
#include "optim/one_cycle_lr.h"

#include <cmath>
#include <numbers>

namespace kiln::optim {

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleLROptions options)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.num_param_groups(), max_lr), total_steps, options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
                       OneCycleLROptions options)
    : LRScheduler(optimizer), total_steps_(total_steps), options_(options), max_lrs_(std::move(max_lrs)) {
  KILN_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got ", total_steps);
  KILN_CHECK(options.pct_start >= 0.0 && options.pct_start <= 1.0, "OneCycleLR: pct_start must be in [0, 1], got ",
             options.pct_start);
  KILN_CHECK(max_lrs_.size() == optimizer.num_param_groups(), "OneCycleLR: expected ", optimizer.num_param_groups(),
             " values for max_lr (one per param group), got ", max_lrs_.size());

  const double total = static_cast<double>(total_steps);
  const double warm_end = options.pct_start * total - 1.0;
  if (options.three_phase) {
    phases_ = {{warm_end, Level::Initial, Level::Max, Momentum::Max, Momentum::Base},
               {2.0 * options.pct_start * total - 2.0, Level::Max, Level::Initial, Momentum::Base, Momentum::Max},
               {total - 1.0, Level::Initial, Level::Min, Momentum::Max, Momentum::Max}};
  } else {
    phases_ = {{warm_end, Level::Initial, Level::Max, Momentum::Max, Momentum::Base},
               {total - 1.0, Level::Max, Level::Min, Momentum::Base, Momentum::Max}};
  }

  // Unlike the other schedulers, OneCycleLR decides the initial lr itself.
  for (size_t g = 0; g < max_lrs_.size(); ++g) {
    const double initial = max_lrs_[g] / options.div_factor;
    optimizer_.set_initial_lr(g, initial);
    base_lrs_[g] = initial;
    min_lrs_.push_back(initial / options.final_div_factor);
  }

  if (options.cycle_momentum) {
    KILN_CHECK(optimizer.has_hyperparameter("beta1") || optimizer.has_hyperparameter("momentum"),
               "OneCycleLR: ", optimizer.name(),
               " has neither momentum nor beta1 to cycle; pass cycle_momentum = false");
    momentum_name_ = optimizer.has_hyperparameter("beta1") ? "beta1" : "momentum";
    for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
      optimizer_.set_hyperparameter(g, momentum_name_, options.max_momentum);
  }
  initial_step();
}

double OneCycleLR::lr_at(Level level, size_t group) const {
  switch (level) {
    case Level::Initial: return base_lrs_[group];
    case Level::Max: return max_lrs_[group];
    case Level::Min: return min_lrs_[group];
  }
  return 0.0;
}

double OneCycleLR::momentum_at(Momentum level) const {
  return level == Momentum::Max ? options_.max_momentum : options_.base_momentum;
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == OneCycleLROptions::AnnealStrategy::Linear) return (end - start) * pct + start;
  const double cos_out = std::cos(std::numbers::pi * pct) + 1.0;
  return end + (start - end) / 2.0 * cos_out;
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step_num = last_epoch_;
  KILN_CHECK(step_num <= total_steps_, "OneCycleLR: tried to step ", step_num + 1, " times; total_steps is ",
             total_steps_);
  const double step = static_cast<double>(step_num);
  std::vector<double> lrs;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    double start_step = 0.0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (step <= phase.end_step || i + 1 == phases_.size()) {
        KILN_CHECK(phase.end_step != start_step, "OneCycleLR: phase ", i, " has no steps (it would end at step ",
                   phase.end_step, " where it starts; pct_start ", options_.pct_start, " of ", total_steps_,
                   " total steps is too short)");
        const double pct = (step - start_step) / (phase.end_step - start_step);
        lrs.push_back(anneal(lr_at(phase.start_lr, g), lr_at(phase.end_lr, g), pct));
        if (!momentum_name_.empty())
          optimizer_.set_hyperparameter(
              g, momentum_name_, anneal(momentum_at(phase.start_momentum), momentum_at(phase.end_momentum), pct));
        break;
      }
      start_step = phase.end_step;
    }
  }
  return lrs;
}

}  // namespace kiln::optim
