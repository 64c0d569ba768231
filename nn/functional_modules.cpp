#include "nn/functional_modules.h"

#include "autograd/ops.h"

namespace kiln::nn {

Tensor Add::operator()(const Tensor& a, const Tensor& b) { return (*this)(TensorList{a, b})[0]; }

TensorList Add::forward_many(const TensorList& inputs) {
  KILN_CHECK(inputs.size() == 2, name(), ": expected 2 tensors to add, got ", inputs.size());
  return {kiln::add(inputs[0], inputs[1])};
}

}  // namespace kiln::nn
