// A short tour of Kiln's tensors, run by `make train` until the LeNet trainer exists.
#include <iostream>

#include "kiln.h"

int main() {
  using namespace kiln;

  // Factories: ranges, constants and seeded random numbers.
  Tensor x = arange(6.0).reshape({2, 3});
  std::cout << "x = arange(6.0).reshape({2, 3}):\n" << x << "\n\n";
  std::cout << "eye(3, -1, int64):\n" << eye(3, -1, DType::Int64) << "\n\n";
  std::cout << "linspace(0, 1, 5):\n" << linspace(0, 1, 5) << "\n\n";

  // A view shares x's storage: only the sizes and strides change.
  Tensor xt = x.t();
  std::cout << "x.t() (shape " << detail::str(xt.shape()) << ", strides " << detail::str(xt.strides())
            << ", contiguous " << std::boolalpha << xt.is_contiguous() << "):\n"
            << xt << "\n\n";

  manual_seed(0);
  Tensor w = randn({3, 2});
  std::cout << "w = randn({3, 2}) after manual_seed(0):\n" << w << "\n\n";

  // A few ops: a linear map, an activation and reductions.
  Tensor y = relu(add(matmul(x, w), 0.5));
  std::cout << "relu(x @ w + 0.5):\n" << y << "\n\n";
  std::cout << "softmax over dim 1:\n" << softmax(y, 1) << "\n\n";
  std::cout << "sum of x over dim 0: " << sum(x, {0}) << "\n";
  std::cout << "mean of x: " << mean(x) << "\n\n";

  // Big tensors print their corners and their shape.
  std::cout << "rand({100, 100}):\n" << rand({100, 100}) << "\n";
  return 0;
}
