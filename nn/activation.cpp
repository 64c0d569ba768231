#include "nn/activation.h"

#include <string>

#include "nn/repr.h"

namespace kiln::nn {

Tensor ReLU::forward(const Tensor& input) { return functional::relu(input); }

Tensor LeakyReLU::forward(const Tensor& input) { return functional::leaky_relu(input, negative_slope); }
std::string LeakyReLU::extra_repr() const { return "negative_slope=" + repr::floating(negative_slope); }

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
