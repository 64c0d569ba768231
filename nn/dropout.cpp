#include "nn/dropout.h"

#include <string>

#include "nn/functional.h"
#include "nn/repr.h"

namespace kiln::nn {

Dropout::Dropout(double p, Generator* generator) : p(p), generator(generator) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: the probability p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& input) { return functional::dropout(input, p, is_training(), generator); }

std::string Dropout::extra_repr() const { return "p=" + repr::floating(p) + ", inplace=False"; }

}  // namespace kiln::nn
