// Activation layers, as torch.nn.ReLU, LeakyReLU, ELU, Hardtanh, ReLU6,
// GELU, Sigmoid, Tanh, Softmax and LogSoftmax: modules with no parameters
// around the functions of nn/functional.h, for use in a Sequential.
//   auto act = std::make_shared<nn::ReLU>(nn::ReLUOptions().inplace(true));   // as LibTorch
//   nn::LeakyReLU leaky(nn::LeakyReLUOptions().negative_slope(0.2).inplace(true));
//   nn::Hardtanh clip(nn::HardtanhOptions().min_val(-2).max_val(2));
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

// torch.nn.ELU's arguments; what F::elu's builder is too.
class ELUOptions {
 public:
  KILN_ARG(double, alpha) = 1.0;
  KILN_ARG(bool, inplace) = false;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0, bool inplace = false) : alpha(alpha), inplace(inplace) {}
  explicit ELU(const ELUOptions& o) : ELU(o.alpha(), o.inplace()) {}
  Tensor forward(const Tensor& input) override;
  // "alpha=1.0", then ", inplace=True" when in place, as torch.
  std::string extra_repr() const override;

  const double alpha;
  const bool inplace;
};

// torch.nn.Hardtanh's arguments; what F::hardtanh's builder is too.
class HardtanhOptions {
 public:
  KILN_ARG(double, min_val) = -1.0;
  KILN_ARG(double, max_val) = 1.0;
  KILN_ARG(bool, inplace) = false;
};

// Requires max_val > min_val, as torch.nn.Hardtanh asserts (F::hardtanh
// also takes equal bounds).
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0, bool inplace = false);
  explicit Hardtanh(const HardtanhOptions& o) : Hardtanh(o.min_val(), o.max_val(), o.inplace()) {}
  Tensor forward(const Tensor& input) override;
  // "min_val=-1.0, max_val=1.0", then ", inplace=True" when in place, as torch.
  std::string extra_repr() const override;

  const double min_val;
  const double max_val;
  const bool inplace;
};

// torch.nn.ReLU6's argument; what F::relu6's builder is too.
class ReLU6Options {
 public:
  explicit ReLU6Options(bool inplace = false) : inplace_(inplace) {}
  KILN_ARG(bool, inplace);
};

// Hardtanh(0, 6), printed as torch prints it: "ReLU6()" or "ReLU6(inplace=True)".
class ReLU6 : public Module {
 public:
  explicit ReLU6(bool inplace = false) : inplace(inplace) {}
  explicit ReLU6(const ReLU6Options& o) : ReLU6(o.inplace()) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

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
