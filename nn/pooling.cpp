#include "nn/pooling.h"

#include <string>

#include "nn/functional.h"
#include "nn/repr.h"

namespace kiln::nn {

MaxPool2d::MaxPool2d(const kiln::MaxPool2dOptions& options) : options(options) {}

MaxPool2d::MaxPool2d(Size2d kernel_size, std::optional<Size2d> stride, Size2d padding, Size2d dilation, bool ceil_mode)
    : options{
          .kernel = kernel_size, .stride = stride, .padding = padding, .dilation = dilation, .ceil_mode = ceil_mode} {}

Tensor MaxPool2d::forward(const Tensor& input) { return functional::max_pool2d(input, options); }

std::string MaxPool2d::extra_repr() const {
  // torch's stride defaults to the kernel size, and prints that way.
  return "kernel_size=" + repr::int_or_pair(options.kernel) +
         ", stride=" + repr::int_or_pair(options.stride_or_kernel()) +
         ", padding=" + repr::int_or_pair(options.padding) + ", dilation=" + repr::int_or_pair(options.dilation) +
         ", ceil_mode=" + repr::boolean(options.ceil_mode);
}

AvgPool2d::AvgPool2d(const kiln::AvgPool2dOptions& options) : options(options) {}

AvgPool2d::AvgPool2d(Size2d kernel_size, std::optional<Size2d> stride, Size2d padding, bool ceil_mode,
                     bool count_include_pad, std::optional<int64_t> divisor_override)
    : options{.kernel = kernel_size,
              .stride = stride,
              .padding = padding,
              .ceil_mode = ceil_mode,
              .count_include_pad = count_include_pad,
              .divisor_override = divisor_override} {}

Tensor AvgPool2d::forward(const Tensor& input) { return functional::avg_pool2d(input, options); }

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + repr::int_or_pair(options.kernel) +
         ", stride=" + repr::int_or_pair(options.stride_or_kernel()) +
         ", padding=" + repr::int_or_pair(options.padding);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2d output_size) : output_size(output_size) {}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) { return functional::adaptive_avg_pool2d(input, output_size); }

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + repr::int_or_pair(output_size); }

}  // namespace kiln::nn
