// Values as Python prints them, for the extra_repr() of the layers: a model
// printed by Kiln reads like the same model printed by torch
// ("Conv2d(3, 6, kernel_size=(5, 5), stride=(1, 1))").
#pragma once

#include <string>

#include "tensor/shape.h"
#include "tensor/size2d.h"

namespace kiln::nn::repr {

// "True" / "False".
std::string boolean(bool value);
// Python's repr of a float: the shortest digits that read back to the same
// double, in fixed notation for exponents -4..15 and scientific otherwise:
// 0.1, 1.0, 1e-05, 1e+16.
std::string floating(double value);
// An int pair as the tuple torch keeps for conv layers: "(5, 5)".
std::string pair(Size2d size);
// A size as the pooling layers keep it: "2" when both sides agree, "(3, 2)" otherwise.
std::string int_or_pair(Size2d size);
// A tuple: "(768,)", "(2, 3)".
std::string tuple(const Shape& values);

}  // namespace kiln::nn::repr
