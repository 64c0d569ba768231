// Loss modules, as torch.nn.CrossEntropyLoss, NLLLoss, MSELoss, L1Loss and
// BCEWithLogitsLoss: the functions of nn/functional.h with their options
// held by the module. They take two tensors:
//
//   nn::CrossEntropyLoss criterion({.label_smoothing = 0.1});
//   Tensor loss = criterion(logits, labels);
//   loss.backward();
//   nn::CrossEntropyLoss same(nn::CrossEntropyLossOptions().label_smoothing(0.1));   // as LibTorch
//   nn::MSELoss total(nn::MSELossOptions().reduction(F::Reduction::Sum));
//
// The builders (nn/functional_options.h) convert to the functions' structs.
// Class weights (and BCEWithLogitsLoss's pos_weight) are registered as
// buffers named "weight" and "pos_weight", as torch, so they follow to() and
// appear in the state dict.
#pragma once

#include "nn/functional.h"
#include "nn/functional_options.h"
#include "nn/module.h"

namespace kiln::nn {

// The base of the losses: forward takes input and target. The one-tensor
// Module::forward is not a loss's and throws.
class Loss : public Module {
 public:
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  using Module::forward;
};

class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(functional::CrossEntropyOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;
  functional::CrossEntropyOptions options;
};

class NLLLoss : public Loss {
 public:
  explicit NLLLoss(functional::NLLLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;
  functional::NLLLossOptions options;
};

class MSELoss : public Loss {
 public:
  explicit MSELoss(functional::Reduction reduction = functional::Reduction::Mean) : reduction(reduction) {}
  explicit MSELoss(const MSELossOptions& options) : MSELoss(options.reduction()) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
  functional::Reduction reduction;
};

class L1Loss : public Loss {
 public:
  explicit L1Loss(functional::Reduction reduction = functional::Reduction::Mean) : reduction(reduction) {}
  explicit L1Loss(const L1LossOptions& options) : L1Loss(options.reduction()) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
  functional::Reduction reduction;
};

class BCEWithLogitsLoss : public Loss {
 public:
  explicit BCEWithLogitsLoss(functional::BCEWithLogitsOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;
  functional::BCEWithLogitsOptions options;
};

}  // namespace kiln::nn
