#include "nn/activation.h"

#include <string>

#include "nn/repr.h"

namespace kiln::nn {

// In place, the result is the input's handle: a copy of it, since forward
// takes a const reference, names the same tensor, whose history the write
// replaces for every holder (Note [Recorded in-place ops]).
Tensor ReLU::forward(const Tensor& input) {
  if (!inplace) return functional::relu(input);
  Tensor x = input;
  return functional::relu_(x);
}
std::string ReLU::extra_repr() const { return inplace ? "inplace=True" : ""; }

Tensor LeakyReLU::forward(const Tensor& input) {
  if (!inplace) return functional::leaky_relu(input, negative_slope);
  Tensor x = input;
  return functional::leaky_relu_(x, negative_slope);
}
std::string LeakyReLU::extra_repr() const {
  return "negative_slope=" + repr::floating(negative_slope) + (inplace ? ", inplace=True" : "");
}

Tensor ELU::forward(const Tensor& input) {
  if (!inplace) return functional::elu(input, alpha);
  Tensor x = input;
  return functional::elu_(x, alpha);
}
std::string ELU::extra_repr() const { return "alpha=" + repr::floating(alpha) + (inplace ? ", inplace=True" : ""); }

Hardtanh::Hardtanh(double min_val, double max_val, bool inplace)
    : min_val(min_val), max_val(max_val), inplace(inplace) {
  KILN_CHECK(max_val > min_val, "Hardtanh: max_val (", max_val, ") must be greater than min_val (", min_val, ")");
}
Tensor Hardtanh::forward(const Tensor& input) {
  if (!inplace) return functional::hardtanh(input, min_val, max_val);
  Tensor x = input;
  return functional::hardtanh_(x, min_val, max_val);
}
std::string Hardtanh::extra_repr() const {
  return "min_val=" + repr::floating(min_val) + ", max_val=" + repr::floating(max_val) +
         (inplace ? ", inplace=True" : "");
}

Tensor ReLU6::forward(const Tensor& input) {
  if (!inplace) return functional::relu6(input);
  Tensor x = input;
  return functional::relu6_(x);
}
std::string ReLU6::extra_repr() const { return inplace ? "inplace=True" : ""; }

Tensor GELU::forward(const Tensor& input) { return functional::gelu(input, approximate); }
std::string GELU::extra_repr() const {
  return approximate == functional::GeluApproximation::Tanh ? "approximate='tanh'" : "approximate='none'";
}

Tensor Sigmoid::forward(const Tensor& input) { return functional::sigmoid(input); }

Tensor Tanh::forward(const Tensor& input) { return functional::tanh(input); }

Tensor Softmax::forward(const Tensor& input) { return functional::softmax(input, dim); }
std::string Softmax::extra_repr() const { return "dim=" + std::to_string(dim); }

Tensor LogSoftmax::forward(const Tensor& input) { return functional::log_softmax(input, dim); }
std::string LogSoftmax::extra_repr() const { return "dim=" + std::to_string(dim); }

}  // namespace kiln::nn
