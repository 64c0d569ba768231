#include "nn/linear.h"

#include <string>

#include "nn/functional.h"
#include "nn/repr.h"
#include "nn/weight_layer.h"
#include "tensor/factory.h"

namespace kiln::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features(in_features), out_features(out_features) {
  KILN_CHECK(in_features >= 0 && out_features >= 0, "Linear: in_features and out_features must be >= 0, got ",
             in_features, " and ", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  this->bias = register_parameter("bias", bias ? empty({out_features}) : Tensor());
  reset_parameters();
}

void Linear::reset_parameters() {
  reset_weight_and_bias_(weight, bias);
}

Tensor Linear::forward(const Tensor& input) { return functional::linear(input, weight, bias); }

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + repr::boolean(bias.defined());
}

}  // namespace kiln::nn
