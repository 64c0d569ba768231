// Pooling layers, as torch.nn.MaxPool2d, AvgPool2d and AdaptiveAvgPool2d.
// Each takes torch's arguments in order, or the options struct of
// tensor/pool.h:
//   auto pool = std::make_shared<nn::MaxPool2d>(2);                       // kernel 2, stride 2
//   auto avg = std::make_shared<nn::AvgPool2d>(AvgPool2dOptions{.kernel = 3, .stride = 2, .padding = 1});
#pragma once

#include <cstdint>
#include <optional>

#include "nn/module.h"
#include "tensor/pool.h"

namespace kiln::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const MaxPool2dOptions& options);
  explicit MaxPool2d(Size2d kernel_size, std::optional<Size2d> stride = std::nullopt, Size2d padding = 0,
                     Size2d dilation = 1, bool ceil_mode = false);

  Tensor forward(const Tensor& input) override;
  // "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False"
  std::string extra_repr() const override;

  const MaxPool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const AvgPool2dOptions& options);
  explicit AvgPool2d(Size2d kernel_size, std::optional<Size2d> stride = std::nullopt, Size2d padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true,
                     std::optional<int64_t> divisor_override = std::nullopt);

  Tensor forward(const Tensor& input) override;
  // "kernel_size=2, stride=2, padding=0"
  std::string extra_repr() const override;

  const AvgPool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2d output_size);

  Tensor forward(const Tensor& input) override;
  // "output_size=5", or "output_size=(5, 3)" when the sides differ.
  std::string extra_repr() const override;

  const Size2d output_size;
};

}  // namespace kiln::nn
