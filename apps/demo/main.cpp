// A short tour of Kiln's tensors, run by `make train` until the LeNet trainer exists.
#include <iostream>

#include "kiln.h"

int main() {
  using namespace kiln;
  Tensor x = Tensor::empty({2, 3});
  backend_for(x.device()).fill(x, 1.5);
  std::cout << "x: shape " << detail::str(x.shape()) << ", dtype " << x.dtype() << ", device " << x.device() << "\n";
  Tensor xt = x.t();
  std::cout << "x.t(): shape " << detail::str(xt.shape()) << ", strides " << detail::str(xt.strides())
            << ", contiguous " << std::boolalpha << xt.is_contiguous() << "\n";
  return 0;
}
