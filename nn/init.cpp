// torch.nn.init: gains, fans and the initialisers built on them.
#include "nn/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace kiln::nn::init {

namespace {

// The inverse error function on (-1, 1): Giles' single-precision
// approximation ("Approximating the erfinv function", GPU Computing Gems,
// 2011), refined by two Newton steps on erf(x) = y to double precision.
double erfinv(double y) {
  if (y <= -1.0) return -INFINITY;
  if (y >= 1.0) return INFINITY;
  double w = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w < 5.0) {
    w -= 2.5;
    x = 2.81022636e-08;
    x = 3.43273939e-07 + x * w;
    x = -3.5233877e-06 + x * w;
    x = -4.39150654e-06 + x * w;
    x = 0.00021858087 + x * w;
    x = -0.00125372503 + x * w;
    x = -0.00417768164 + x * w;
    x = 0.246640727 + x * w;
    x = 1.50140941 + x * w;
  } else {
    w = std::sqrt(w) - 3.0;
    x = -0.000200214257;
    x = 0.000100950558 + x * w;
    x = 0.00134934322 + x * w;
    x = -0.00367342844 + x * w;
    x = 0.00573950773 + x * w;
    x = -0.0076224613 + x * w;
    x = 0.00943887047 + x * w;
    x = 1.00167406 + x * w;
    x = 2.83297682 + x * w;
  }
  x *= y;
  for (int step = 0; step < 2; ++step) {
    x -= (std::erf(x) - y) / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-x * x));
  }
  return x;
}

double normal_cdf(double x) { return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)); }

void check_floating(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), op, ": the tensor is undefined");
  KILN_CHECK(t.is_floating_point(), op, ": expected a floating point tensor, got ", t.dtype());
}

int64_t fan_for_mode(const Tensor& t, std::string_view mode, const char* op) {
  KILN_CHECK(mode == "fan_in" || mode == "fan_out", op, ": mode '", mode,
             "' is not supported; use 'fan_in' or 'fan_out'");
  Fans fans = calculate_fan_in_and_fan_out(t);
  return mode == "fan_in" ? fans.fan_in : fans.fan_out;
}

// gain / sqrt(fan), the std of both kaiming initialisers.
double kaiming_std(const Tensor& t, double a, std::string_view mode, std::string_view nonlinearity, const char* op) {
  check_floating(t, op);
  int64_t fan = fan_for_mode(t, mode, op);
  return calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}

}  // namespace

double calculate_gain(std::string_view nonlinearity, std::optional<double> param) {
  static constexpr std::string_view kLinear[] = {"linear",           "conv1d",           "conv2d",
                                                 "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                                 "conv_transpose3d", "sigmoid"};
  if (std::find(std::begin(kLinear), std::end(kLinear), nonlinearity) != std::end(kLinear)) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    double slope = param.value_or(0.01);
    KILN_CHECK(std::isfinite(slope), "calculate_gain: negative_slope ", slope, " is not a valid number");
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  KILN_FAIL("calculate_gain: unsupported nonlinearity '", nonlinearity,
            "' (expected linear, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, "
            "sigmoid, tanh, relu, leaky_relu or selu)");
}

Fans calculate_fan_in_and_fan_out(const Tensor& t) {
  KILN_CHECK(t.defined(), "calculate_fan_in_and_fan_out: the tensor is undefined");
  KILN_CHECK(t.dim() >= 2, "calculate_fan_in_and_fan_out: fan in and fan out can not be computed for a tensor with "
             "fewer than 2 dimensions (got shape ", t.shape(), ")");
  // weight: (out, in, k1, k2, ...); each output sees in * k1 * k2 * ... inputs.
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive_field *= t.size(d);
  return {t.size(1) * receptive_field, t.size(0) * receptive_field};
}

Tensor uniform_(Tensor t, double a, double b, Generator* gen) {
  check_floating(t, "uniform_");
  NoGradGuard no_grad;
  kiln::uniform_(t, a, b, gen);
  return t;
}

Tensor normal_(Tensor t, double mean, double std, Generator* gen) {
  check_floating(t, "normal_");
  NoGradGuard no_grad;
  kiln::normal_(t, mean, std, gen);
  return t;
}

Tensor trunc_normal_(Tensor t, double mean, double std, double a, double b, Generator* gen) {
  check_floating(t, "trunc_normal_");
  KILN_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0.0,
             "trunc_normal_: expected a finite mean and a finite std >= 0, got mean ", mean, " and std ", std);
  KILN_CHECK(a < b, "trunc_normal_: expected a < b, got a ", a, " and b ", b);
  if (t.numel() == 0) return t;
  NoGradGuard no_grad;
  // Uniform on [cdf(a), cdf(b)] mapped through the inverse normal CDF,
  // computed in float64 on the CPU so that every device and dtype draws the
  // same values from the same generator state.
  double low = normal_cdf((a - mean) / std);
  double high = normal_cdf((b - mean) / std);
  Tensor draws = Tensor::empty(t.shape(), DType::Float64);
  kiln::uniform_(draws, 2.0 * low - 1.0, 2.0 * high - 1.0, gen);
  double* values = draws.data<double>();
  for (int64_t i = 0; i < draws.numel(); ++i) {
    values[i] = std::clamp(mean + std * std::numbers::sqrt2 * erfinv(values[i]), a, b);
  }
  t.copy_(draws);
  return t;
}

Tensor constant_(Tensor t, Scalar value) {
  KILN_CHECK(t.defined(), "constant_: the tensor is undefined");
  NoGradGuard no_grad;
  kiln::fill_(t, value);
  return t;
}

Tensor zeros_(Tensor t) { return constant_(std::move(t), 0); }

Tensor ones_(Tensor t) { return constant_(std::move(t), 1); }

Tensor eye_(Tensor t) {
  KILN_CHECK(t.defined(), "eye_: the tensor is undefined");
  KILN_CHECK(t.dim() == 2, "eye_: only tensors with 2 dimensions are supported, got shape ", t.shape());
  NoGradGuard no_grad;
  t.copy_(kiln::eye(t.size(0), t.size(1), {t.dtype(), t.device()}));
  return t;
}

Tensor dirac_(Tensor t, int64_t groups) {
  KILN_CHECK(t.defined(), "dirac_: the tensor is undefined");
  KILN_CHECK(t.dim() >= 3 && t.dim() <= 5, "dirac_: only tensors with 3, 4 or 5 dimensions are supported, got shape ",
             t.shape());
  KILN_CHECK(groups > 0 && t.size(0) % groups == 0, "dirac_: dim 0 (", t.size(0), ") must be divisible by groups (",
             groups, ")");
  NoGradGuard no_grad;
  kiln::zero_(t);
  int64_t out_per_group = t.size(0) / groups;
  int64_t channels = std::min(out_per_group, t.size(1));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < channels; ++c) {
      // weight[g * out_per_group + c, c, k1 / 2, k2 / 2, ...] = 1
      Tensor centre = t.select(0, g * out_per_group + c).select(0, c);
      while (centre.dim() > 0) centre = centre.select(0, centre.size(0) / 2);
      kiln::fill_(centre, 1);
    }
  }
  return t;
}

Tensor xavier_uniform_(Tensor t, double gain, Generator* gen) {
  check_floating(t, "xavier_uniform_");
  Fans fans = calculate_fan_in_and_fan_out(t);
  if (t.numel() == 0) return t;
  double std = gain * std::sqrt(2.0 / static_cast<double>(fans.fan_in + fans.fan_out));
  double bound = std::sqrt(3.0) * std;  // U(-bound, bound) has this std
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor xavier_normal_(Tensor t, double gain, Generator* gen) {
  check_floating(t, "xavier_normal_");
  Fans fans = calculate_fan_in_and_fan_out(t);
  if (t.numel() == 0) return t;
  double std = gain * std::sqrt(2.0 / static_cast<double>(fans.fan_in + fans.fan_out));
  return normal_(std::move(t), 0.0, std, gen);
}

Tensor kaiming_uniform_(Tensor t, double a, std::string_view mode, std::string_view nonlinearity, Generator* gen) {
  double std = kaiming_std(t, a, mode, nonlinearity, "kaiming_uniform_");
  if (t.numel() == 0) return t;
  double bound = std::sqrt(3.0) * std;
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor t, double a, std::string_view mode, std::string_view nonlinearity, Generator* gen) {
  double std = kaiming_std(t, a, mode, nonlinearity, "kaiming_normal_");
  if (t.numel() == 0) return t;
  return normal_(std::move(t), 0.0, std, gen);
}

}  // namespace kiln::nn::init
