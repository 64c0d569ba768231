// Shared by nll_loss and cross_entropy (nn/functional/loss.cpp,
// cross_entropy.cpp): the validation and flattening of class-index targets
// that both need (Note [Class-index losses] in nn/functional.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "nn/functional.h"

namespace kiln::nn::functional::detail {

// A class-index loss's operands with the class dim last and everything else
// flattened into M = N * d1 * ... rows.
struct ClassTargets {
  Tensor input;          // (M, C): a differentiable view (or copy) of the input
  Tensor target;         // (M) Int64, ignored entries replaced by class 0 so that they index safely
  Tensor valid;          // (M) input's dtype: 1 where the target is not ignore_index, else 0
  Tensor target_weight;  // (M) input's dtype: weight[target] * valid (valid when unweighted)
  Tensor weight;         // (C) input's dtype, or undefined when unweighted
  int64_t classes;       // C
  Shape target_shape;    // for reduction none
};

// Checks shapes, dtypes, devices and target bounds, naming `op` in errors:
// flatten_class_operands, then mask_ignored_targets.
ClassTargets flatten_class_targets(std::string_view op, const Tensor& input, const Tensor& target, const Tensor& weight,
                                   int64_t ignore_index);

// The checks and the flattening alone: input, weight, classes and
// target_shape as above, but target the flattened target as it is (ignored
// entries included), and valid and target_weight undefined.
ClassTargets flatten_class_operands(std::string_view op, const Tensor& input, const Tensor& target,
                                    const Tensor& weight);

// Completes flatten_class_operands' result: replaces ignored targets by
// class 0, fills valid and target_weight, and checks the targets' range.
void mask_ignored_targets(ClassTargets& t, std::string_view op, int64_t ignore_index);

// The error for a target v outside [0, classes) that is not ignore_index.
std::string target_out_of_range(std::string_view op, int64_t v, int64_t classes, int64_t ignore_index);

// Combines per-element losses as `reduction` asks (the mean of none is NaN).
Tensor reduce_loss(const Tensor& losses, Reduction reduction);

}  // namespace kiln::nn::functional::detail
