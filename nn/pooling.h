// Pooling layers, as torch.nn.MaxPool2d, AvgPool2d and AdaptiveAvgPool2d.
// Each takes torch's arguments in order, LibTorch's option builder, or the
// options struct of tensor/pool.h that the kernels take:
//   auto pool = std::make_shared<nn::MaxPool2d>(2);                       // kernel 2, stride 2
//   nn::MaxPool2d overlap(nn::MaxPool2dOptions(3).stride(2).padding(1));  // as LibTorch
//   auto avg = std::make_shared<nn::AvgPool2d>(kiln::AvgPool2dOptions{.kernel = 3, .stride = 2, .padding = 1});
// Inside namespace kiln::nn, MaxPool2dOptions is the builder; the kernels'
// struct is kiln::MaxPool2dOptions (the builder converts to it, so
// F::max_pool2d(x, nn::MaxPool2dOptions(2)) works too).
#pragma once

#include <cstdint>
#include <optional>

#include "nn/module.h"
#include "tensor/arg.h"
#include "tensor/pool.h"

namespace kiln::nn {

// torch.nn.MaxPool2d's arguments (Note [Option builders] in tensor/arg.h);
// stride defaults to the kernel size. Each size is one int for both sides or {h, w}.
class MaxPool2dOptions {
 public:
  explicit MaxPool2dOptions(Size2d kernel_size) : kernel_size_(kernel_size) {}

  // The kernels' form of the same settings (tensor/pool.h).
  operator kiln::MaxPool2dOptions() const {  // NOLINT: implicit, so that F::max_pool2d takes a builder
    return {
        .kernel = kernel_size_, .stride = stride_, .padding = padding_, .dilation = dilation_, .ceil_mode = ceil_mode_};
  }
  MaxPool2dOptions& stride(Size2d stride) {
    stride_ = stride;
    return *this;
  }
  const std::optional<Size2d>& stride() const { return stride_; }  // nullopt: the kernel size

  KILN_ARG(Size2d, kernel_size);
  KILN_ARG(Size2d, padding) = 0;
  KILN_ARG(Size2d, dilation) = 1;
  KILN_ARG(bool, ceil_mode) = false;

 private:
  std::optional<Size2d> stride_;
};

// torch.nn.AvgPool2d's arguments, as MaxPool2dOptions.
class AvgPool2dOptions {
 public:
  explicit AvgPool2dOptions(Size2d kernel_size) : kernel_size_(kernel_size) {}

  operator kiln::AvgPool2dOptions() const {  // NOLINT: implicit, as MaxPool2dOptions'
    return {.kernel = kernel_size_,
            .stride = stride_,
            .padding = padding_,
            .ceil_mode = ceil_mode_,
            .count_include_pad = count_include_pad_,
            .divisor_override = divisor_override_};
  }
  AvgPool2dOptions& stride(Size2d stride) {
    stride_ = stride;
    return *this;
  }
  const std::optional<Size2d>& stride() const { return stride_; }  // nullopt: the kernel size

  KILN_ARG(Size2d, kernel_size);
  KILN_ARG(Size2d, padding) = 0;
  KILN_ARG(bool, ceil_mode) = false;
  KILN_ARG(bool, count_include_pad) = true;
  KILN_ARG(std::optional<int64_t>, divisor_override) = std::nullopt;

 private:
  std::optional<Size2d> stride_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const kiln::MaxPool2dOptions& options);
  explicit MaxPool2d(const MaxPool2dOptions& options) : MaxPool2d(kiln::MaxPool2dOptions(options)) {}
  explicit MaxPool2d(Size2d kernel_size, std::optional<Size2d> stride = std::nullopt, Size2d padding = 0,
                     Size2d dilation = 1, bool ceil_mode = false);

  Tensor forward(const Tensor& input) override;
  // "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False"
  std::string extra_repr() const override;

  const kiln::MaxPool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const kiln::AvgPool2dOptions& options);
  explicit AvgPool2d(const AvgPool2dOptions& options) : AvgPool2d(kiln::AvgPool2dOptions(options)) {}
  explicit AvgPool2d(Size2d kernel_size, std::optional<Size2d> stride = std::nullopt, Size2d padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true,
                     std::optional<int64_t> divisor_override = std::nullopt);

  Tensor forward(const Tensor& input) override;
  // "kernel_size=2, stride=2, padding=0"
  std::string extra_repr() const override;

  const kiln::AvgPool2dOptions options;
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
