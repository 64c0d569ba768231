// Flatten, as torch.nn.Flatten: merges dims start_dim..end_dim, by default
// everything but the batch dim, e.g. between a convolutional stack and its
// classifier: (N, 16, 5, 5) -> (N, 400).
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace kiln::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) override;
  // "start_dim=1, end_dim=-1"
  std::string extra_repr() const override;

  const int64_t start_dim;
  const int64_t end_dim;
};

}  // namespace kiln::nn
