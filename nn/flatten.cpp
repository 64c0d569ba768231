#include "nn/flatten.h"

#include <string>

#include "nn/functional.h"

namespace kiln::nn {

Tensor Flatten::forward(const Tensor& input) { return functional::flatten(input, start_dim, end_dim); }

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}

}  // namespace kiln::nn
