// Activation layers, as torch.nn.ReLU, LeakyReLU, GELU, Sigmoid, Tanh,
// Softmax and LogSoftmax: modules with no parameters around the functions
// of nn/functional.h, for use in a Sequential.
//   auto act = std::make_shared<nn::ReLU>(nn::ReLUOptions().inplace(true));   // as LibTorch
//   nn::LeakyReLU leaky(nn::LeakyReLUOptions().negative_slope(0.2).inplace(true));
// inplace writes the result into the input and returns it (F::relu_), which
// saves a tensor's memory; under autograd that is recorded, and refused on
// a leaf that requires grad or a tensor that shares its memory with a view
// (Note [Recorded in-place ops] in autograd/function.h).
#pragma once

#include <cstdint>

#include "nn/functional.h"
#include "nn/module.h"
#include "tensor/arg.h"

namespace kiln::nn {

// torch.nn.ReLU's argument (Note [Option builders] in tensor/arg.h); what
// F::relu's builder is too.
class ReLUOptions {
 public:
  explicit ReLUOptions(bool inplace = false) : inplace_(inplace) {}
  KILN_ARG(bool, inplace);
};

class ReLU : public Module {
 public:
  explicit ReLU(bool inplace = false) : inplace(inplace) {}
  explicit ReLU(const ReLUOptions& o) : ReLU(o.inplace()) {}
  Tensor forward(const Tensor& input) override;
  // "inplace=True" when in place, else nothing, as torch.
  std::string extra_repr() const override;

  const bool inplace;
};

// torch.nn.LeakyReLU's arguments; what F::leaky_relu's builder is too.
class LeakyReLUOptions {
 public:
  KILN_ARG(double, negative_slope) = 0.01;
  KILN_ARG(bool, inplace) = false;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01, bool inplace = false)
      : negative_slope(negative_slope), inplace(inplace) {}
  explicit LeakyReLU(const LeakyReLUOptions& o) : LeakyReLU(o.negative_slope(), o.inplace()) {}
  Tensor forward(const Tensor& input) override;
  // "negative_slope=0.01", then ", inplace=True" when in place, as torch.
  std::string extra_repr() const override;

  const double negative_slope;
  const bool inplace;
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
