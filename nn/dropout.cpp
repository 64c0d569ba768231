#include "nn/dropout.h"

#include <string>

#include "nn/functional.h"
#include "nn/repr.h"

namespace kiln::nn {

Dropout::Dropout(double p, Generator* generator, bool inplace) : p(p), generator(generator), inplace(inplace) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: the probability p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& input) {
  if (!inplace) return functional::dropout(input, p, is_training(), generator);
  Tensor x = input;  // the same tensor, as ReLU's in-place forward
  return functional::dropout_(x, p, is_training(), generator);
}

std::string Dropout::extra_repr() const {
  return "p=" + repr::floating(p) + (inplace ? ", inplace=True" : ", inplace=False");
}

}  // namespace kiln::nn
