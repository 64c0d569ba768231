// Adam and AdamW, as torch.optim.Adam and torch.optim.AdamW.
//
//   Adam opt(model.parameters(), AdamOptions(3e-4));
//   AdamW opt(model.parameters(), AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(0.1));
//   AdamW opt(weight_decay_groups(model.parameters(), 0.1), AdamWOptions(3e-4));  // as nanoGPT
//
// They are one optimizer with one update: AdamW is Adam with
// decoupled_weight_decay on (as torch 2.6's Adam flag of that name) and
// PyTorch's AdamW default weight decay, named "AdamW" in errors. The flag
// chooses the algorithm rather than tuning it, so it is not one of the
// hyperparameters a group overrides or a state dict records (Note
// [Hyperparameters by name]); an AdamW's state dict is an Adam's.
//
// Per parameter p with gradient g, in p's dtype and in this order (t counts
// this parameter's steps from 1):
//   g = -g                                       if maximize
//   Adam:  g = g + weight_decay * p              if weight_decay != 0 (L2 penalty)
//   AdamW: p = p * (1 - lr * weight_decay)       (decoupled decay)
//   exp_avg    = beta1 * exp_avg    + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq)     if amsgrad
//   step_size = lr / (1 - beta1^t)                        (in float64)
//   denom = sqrt(exp_avg_sq or max_exp_avg_sq) / sqrt(1 - beta2^t) + eps
//   p = p + (-step_size * exp_avg) / denom
// State: "step" (a float64 count), "exp_avg", "exp_avg_sq", and
// "max_exp_avg_sq" with amsgrad.
#pragma once

#include <string_view>
#include <tuple>
#include <vector>

#include "optim/optimizer.h"
#include "tensor/arg.h"

namespace kiln::optim {

// lr defaults to 1e-3, as LibTorch's AdamOptions(lr = 1e-3); the rest are
// chained setters with PyTorch's defaults (Note [Option builders] in
// tensor/arg.h).
class AdamOptions {
 public:
  static constexpr const char* kOptimizerName = "Adam";

  AdamOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit, as LibTorch's

  static std::vector<OptionField<AdamOptions>> fields();
  // Throws naming `op` for a negative lr, eps or weight decay, or a beta
  // outside [0, 1).
  void validate(std::string_view op) const;

  // LibTorch's spelling of beta1 and beta2 together: .betas({0.9, 0.95}).
  AdamOptions& betas(const std::tuple<double, double>& betas) {
    std::tie(beta1_, beta2_) = betas;
    return *this;
  }
  std::tuple<double, double> betas() const { return {beta1_, beta2_}; }

  KILN_ARG(double, lr);
  KILN_ARG(double, beta1) = 0.9;
  KILN_ARG(double, beta2) = 0.999;
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 0.0;
  KILN_ARG(bool, amsgrad) = false;
  KILN_ARG(bool, maximize) = false;
  // AdamW's update: decay the parameter, not the gradient.
  KILN_ARG(bool, decoupled_weight_decay) = false;
  // Update all of a group's parameters with one fused step
  // (ops::adam_step_, Note [Fused optimizer steps] in tensor/fused_optim.h)
  // where their tensors allow it; the results are bitwise those of the
  // unfused ops. Not part of state dicts.
  KILN_ARG(bool, fused) = true;
};

// AdamW's options differ from Adam's only in the default weight decay (and
// decoupled_weight_decay, which is always on).
class AdamWOptions {
 public:
  static constexpr const char* kOptimizerName = "AdamW";

  AdamWOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit, as LibTorch's

  void validate(std::string_view op) const;

  AdamWOptions& betas(const std::tuple<double, double>& betas) {  // as AdamOptions::betas
    std::tie(beta1_, beta2_) = betas;
    return *this;
  }
  std::tuple<double, double> betas() const { return {beta1_, beta2_}; }

  KILN_ARG(double, lr);
  KILN_ARG(double, beta1) = 0.9;
  KILN_ARG(double, beta2) = 0.999;
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 1e-2;
  KILN_ARG(bool, amsgrad) = false;
  KILN_ARG(bool, maximize) = false;
  KILN_ARG(bool, fused) = true;  // as AdamOptions::fused
};

class Adam : public OptimizerWithOptions<AdamOptions> {
 public:
  Adam(const std::vector<Tensor>& params, AdamOptions defaults);
  Adam(const std::vector<ParamGroup>& groups, AdamOptions defaults);

  // "Adam", or "AdamW" for an AdamW.
  std::string name() const override { return name_; }
  void step() override;

 protected:
  Adam(const std::vector<ParamGroup>& groups, AdamOptions defaults, std::string name);
  std::vector<StateEntry> state_entries(size_t group) const override;

 private:
  std::string name_;
};

// Adam with decoupled weight decay; options(g) and defaults() are
// AdamOptions with decoupled_weight_decay set.
class AdamW : public Adam {
 public:
  AdamW(const std::vector<Tensor>& params, AdamWOptions defaults);
  AdamW(const std::vector<ParamGroup>& groups, AdamWOptions defaults);
};

}  // namespace kiln::optim
