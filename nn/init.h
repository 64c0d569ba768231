// Weight initialisation, as torch.nn.init: the same names, defaults and
// formulas, so that a layer initialised here draws from the distribution its
// torch counterpart does.
//
//   init::kaiming_uniform_(fc->weight, std::sqrt(5.0));   // torch's default for Linear and Conv
//   init::zeros_(fc->bias);
//
// Each function fills its tensor in place under NoGradGuard (so it works on
// parameters that require grad), returns it, and leaves a zero-element
// tensor untouched. The random ones draw from `gen`, or from the default
// generator when it is null (tensor/random.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tensor/random.h"
#include "tensor/scalar.h"
#include "tensor/tensor.h"

namespace kiln::nn::init {

// The recommended gain for a nonlinearity: 1 for linear, conv{1,2,3}d,
// conv_transpose{1,2,3}d and sigmoid; 5/3 for tanh; sqrt(2) for relu;
// sqrt(2 / (1 + slope^2)) for leaky_relu (slope = param, default 0.01);
// 3/4 for selu.
double calculate_gain(std::string_view nonlinearity, std::optional<double> param = std::nullopt);

struct Fans {
  int64_t fan_in;
  int64_t fan_out;
};
// For a weight of shape (out, in, k1, k2, ...): fan_in = in * k1 * k2 * ...,
// fan_out = out * k1 * k2 * .... Needs at least 2 dims.
//   auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(conv->weight);
Fans calculate_fan_in_and_fan_out(const Tensor& t);

// U(a, b).
Tensor uniform_(Tensor t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
// N(mean, std^2).
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
// N(mean, std^2) restricted to [a, b], by inverting the normal CDF of a
// uniform draw (torch's method; every element takes one draw).
Tensor trunc_normal_(Tensor t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                     Generator* gen = nullptr);
Tensor constant_(Tensor t, Scalar value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);
// The identity matrix (2-d tensors only).
Tensor eye_(Tensor t);
// The identity of a convolution: a weight (out, in, k...) of 3 to 5 dims
// that passes input channel c to output channel c (per group) through the
// centre of the kernel.
Tensor dirac_(Tensor t, int64_t groups = 1);

// Glorot & Bengio (2010): U(-bound, bound) with
// bound = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1.0, Generator* gen = nullptr);

// He et al. (2015): U(-bound, bound) with bound = gain * sqrt(3 / fan), where
// gain = calculate_gain(nonlinearity, a) and fan is fan_in or fan_out (`mode`).
Tensor kaiming_uniform_(Tensor t, double a = 0.0, std::string_view mode = "fan_in",
                        std::string_view nonlinearity = "leaky_relu", Generator* gen = nullptr);
// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(Tensor t, double a = 0.0, std::string_view mode = "fan_in",
                       std::string_view nonlinearity = "leaky_relu", Generator* gen = nullptr);

}  // namespace kiln::nn::init
