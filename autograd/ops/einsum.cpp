// Differentiable einsum: the tensor layer's plan run with differentiable
// arithmetic, so it records no node of its own; its gradient is that of the
// views, products, sums and bmm it is made of (Note [Einsum by composition]
// in tensor/einsum.h).
#include "autograd/ops.h"

namespace kiln {

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  static constexpr ops::EinsumArithmetic kDifferentiable{
      [](const Tensor& a, const Tensor& b) { return mul(a, b); },
      [](const Tensor& x, const Shape& dims) { return sum(x, dims, /*keepdim=*/true); },
      [](const Tensor& a, const Tensor& b) { return bmm(a, b); },
  };
  return ops::einsum(equation, operands, kDifferentiable);
}

}  // namespace kiln
