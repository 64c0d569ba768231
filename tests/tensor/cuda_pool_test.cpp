// CUDA pooling against the CPU backend. The CUDA kernels visit windows and
// sum gradients in the CPU's order (tensor/cuda/pool.cu), so the results
// are expected to be equal, not merely close: for every floating dtype,
// with padding, dilation, ceil_mode, ties and NaN.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tensor/pool.h"
#include "tests/tensor/cuda_test_util.h"

namespace kiln {

using namespace kiln::ops;
using namespace kiln::backend_compare;
namespace {

struct MaxCase {
  Shape shape;
  MaxPool2dOptions options;
};

std::vector<MaxCase> max_cases() {
  return {
      {{2, 3, 8, 8}, {.kernel = 2}},                                           // LeNet's 2x2, stride 2
      {{2, 3, 9, 7}, {.kernel = 3, .stride = Size2d(2), .padding = 1}},        // overlapping, padded
      {{1, 2, 10, 11}, {.kernel = {3, 2}, .stride = Size2d(2, 1), .padding = {1, 1}, .dilation = {2, 3}}},
      {{2, 2, 7, 7}, {.kernel = 2, .stride = Size2d(2), .ceil_mode = true}},  // a window overhangs the input
      {{1, 1, 1, 1}, {.kernel = 1}},
  };
}

TEST(CudaPool, MaxPoolValuesIndicesAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<MaxCase> cases = max_cases();
  for (DType dtype : kFloatDTypes) {
    for (size_t c = 0; c < cases.size(); ++c) {
      const MaxCase& mc = cases[c];
      const std::string what = detail::str("max_pool2d case ", c, " ", dtype);
      Tensor x = random_tensor(mc.shape, dtype, 10 + c);
      // Ties (a repeated value) and NaN, which wins its windows.
      set_flat(x, 1, flat_value(x, 0));
      set_flat(x, 5, std::numeric_limits<double>::quiet_NaN());
      set_flat(x, 6, std::numeric_limits<double>::quiet_NaN());
      PoolResult cpu = max_pool2d_with_indices(x, mc.options);
      PoolResult dev = max_pool2d_with_indices(x.to(gpu()), mc.options);
      expect_matches(cpu.values, dev.values, what + " values", 0);
      expect_matches(cpu.indices, dev.indices, what + " indices", 0);
      expect_matches(cpu.values, max_pool2d(x.to(gpu()), mc.options), what + " values only", 0);
      // Overlapping windows send several gradients to one input element.
      Tensor grad_out = random_tensor(cpu.values.shape(), dtype, 20 + c);
      expect_matches(max_pool2d_backward(grad_out, x.shape(), cpu.indices, mc.options),
                     max_pool2d_backward(grad_out.to(gpu()), x.shape(), dev.indices, mc.options), what + " backward",
                     0);
    }
  }
}

TEST(CudaPool, MaxPoolBackwardRejectsAnIndexOutsideThePlane) {
  SKIP_WITHOUT_GPU();
  Tensor grad_out = ones({1, 1, 2, 2}, {DType::Float32, gpu()});
  Tensor indices = from_vector<int64_t>({0, 3, 16, -1}, {1, 1, 2, 2}).to(gpu());
  expect_error([&] { max_pool2d_backward(grad_out, {1, 1, 4, 4}, indices, {.kernel = 2}).cpu(); },
               "max_pool2d_backward: index 16 at position 2 of plane 0 is outside the input plane of 4 x 4 elements");
}

TEST(CudaPool, AvgPoolAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<Shape, AvgPool2dOptions>> cases = {
      {{2, 3, 8, 8}, {.kernel = 2}},
      {{2, 3, 9, 7}, {.kernel = 3, .stride = Size2d(2), .padding = 1}},
      {{2, 3, 9, 7}, {.kernel = 3, .stride = Size2d(2), .padding = 1, .count_include_pad = false}},
      {{1, 2, 10, 11}, {.kernel = {3, 4}, .stride = Size2d(1, 3), .padding = {1, 2}, .ceil_mode = true}},
      {{1, 2, 10, 11}, {.kernel = {3, 4}, .stride = Size2d(2, 3), .padding = {1, 2}, .ceil_mode = true,
                        .count_include_pad = false}},
      {{2, 2, 6, 6}, {.kernel = 3, .stride = Size2d(1), .padding = 1, .divisor_override = 5}},
  };
  for (DType dtype : kFloatDTypes) {
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto& [shape, options] = cases[c];
      const std::string what = detail::str("avg_pool2d case ", c, " ", dtype);
      Tensor x = random_tensor(shape, dtype, 30 + c);
      Tensor cpu = avg_pool2d(x, options);
      expect_matches(cpu, avg_pool2d(x.to(gpu()), options), what, 0);
      Tensor grad_out = random_tensor(cpu.shape(), dtype, 40 + c);
      expect_matches(avg_pool2d_backward(grad_out, shape, options),
                     avg_pool2d_backward(grad_out.to(gpu()), shape, options), what + " backward", 0);
    }
  }
}

TEST(CudaPool, AdaptiveAvgPoolAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  // Output sizes that divide the input, that do not (overlapping windows),
  // larger than the input, and 1 (global average pooling).
  const std::vector<std::pair<Shape, Size2d>> cases = {
      {{2, 3, 8, 8}, Size2d(4)}, {{2, 3, 10, 7}, Size2d(3, 4)}, {{1, 2, 3, 5}, Size2d(7, 8)}, {{4, 5, 9, 9}, Size2d(1)}};
  for (DType dtype : kFloatDTypes) {
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto& [shape, size] = cases[c];
      const std::string what = detail::str("adaptive_avg_pool2d case ", c, " ", dtype);
      Tensor x = random_tensor(shape, dtype, 50 + c);
      Tensor cpu = adaptive_avg_pool2d(x, size);
      expect_matches(cpu, adaptive_avg_pool2d(x.to(gpu()), size), what, 0);
      Tensor grad_out = random_tensor(cpu.shape(), dtype, 60 + c);
      expect_matches(adaptive_avg_pool2d_backward(grad_out, shape),
                     adaptive_avg_pool2d_backward(grad_out.to(gpu()), shape), what + " backward", 0);
    }
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
