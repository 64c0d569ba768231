// Activation layers, as torch.nn.ReLU, LeakyReLU, GELU, Sigmoid, Tanh,
// Softmax and LogSoftmax: modules with no parameters around the functions
// of nn/functional.h, for use in a Sequential.
#pragma once

#include <cstdint>

#include "nn/functional.h"
#include "nn/module.h"

namespace kiln::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& input) override;
  // "negative_slope=0.01"
  std::string extra_repr() const override;

  const double negative_slope;
};

class GELU : public Module {
 public:
  explicit GELU(functional::GeluApproximation approximate = functional::GeluApproximation::None)
      : approximate(approximate) {}
  Tensor forward(const Tensor& input) override;
  // "approximate='none'" or "approximate='tanh'"
  std::string extra_repr() const override;

  const functional::GeluApproximation approximate;
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

// Softmax along `dim` (negative counts from the end).
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input) override;
  // "dim=1"
  std::string extra_repr() const override;

  const int64_t dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  const int64_t dim;
};

}  // namespace kiln::nn
