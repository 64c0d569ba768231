// cumsum and cumprod (tensor/scan.h) against hand-computed values and a
// float64 reference loop, for every dim of a 3-d tensor, the dtype rules,
// 0-dim, empty and non-contiguous inputs, and the errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {
namespace {

std::vector<double> as_doubles(const Tensor& t) {
  Tensor h = t.to(DType::Float64).contiguous();
  return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
}

// The scan of contiguous values of `shape` along `dim`, in float64.
std::vector<double> reference_scan(const std::vector<double>& x, const Shape& shape, int64_t dim, bool product,
                                   bool reverse = false) {
  int64_t outer = 1, inner = 1;
  const int64_t n = shape[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double acc = product ? 1 : 0;
      for (int64_t s = 0; s < n; ++s) {
        const int64_t i = reverse ? n - 1 - s : s;
        const int64_t at = (o * n + i) * inner + j;
        acc = product ? acc * x[at] : acc + x[at];
        out[at] = acc;
      }
    }
  return out;
}

TEST(Scan, HandValues) {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(as_doubles(ops::cumsum(x, 1)), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(as_doubles(ops::cumsum(x, 0)), (std::vector<double>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(as_doubles(ops::cumprod(x, -1)), (std::vector<double>{1, 2, 6, 4, 20, 120}));
  EXPECT_EQ(as_doubles(ops::cumprod(x, -2)), (std::vector<double>{1, 2, 3, 4, 10, 18}));
  EXPECT_EQ(as_doubles(ops::reverse_cumsum(x, 1)), (std::vector<double>{6, 5, 3, 15, 11, 6}));
  EXPECT_EQ(ops::cumsum(x, 1).dtype(), DType::Float32);
}

// Every dim of a 3-d float64 tensor, and of a float32 one, whose CPU scan
// accumulates in float64 and so rounds each partial result once.
TEST(Scan, MatchesTheReferenceAlongEveryDim) {
  const Shape shape{5, 7, 9};
  std::vector<double> x = pseudo_random(shape_numel(shape), 0.5, 1.5, 3);
  Tensor x64 = from_vector(x, shape);
  Tensor x32 = x64.to(DType::Float32);
  std::vector<double> x32_values = as_doubles(x32);
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (bool product : {false, true}) {
      SCOPED_TRACE(testing::Message() << "dim " << dim << (product ? " cumprod" : " cumsum"));
      Tensor got64 = product ? ops::cumprod(x64, dim) : ops::cumsum(x64, dim);
      std::vector<double> want64 = reference_scan(x, shape, dim, product);
      std::vector<double> v64 = as_doubles(got64);
      for (size_t i = 0; i < v64.size(); ++i) EXPECT_EQ(v64[i], want64[i]) << i;
      Tensor got32 = product ? ops::cumprod(x32, dim - 3) : ops::cumsum(x32, dim - 3);
      std::vector<double> want32 = reference_scan(x32_values, shape, dim, product);
      std::vector<double> v32 = as_doubles(got32);
      for (size_t i = 0; i < v32.size(); ++i) EXPECT_EQ(v32[i], static_cast<double>(static_cast<float>(want32[i]))) << i;
    }
    std::vector<double> want_reverse = reference_scan(x, shape, dim, false, true);
    EXPECT_EQ(as_doubles(ops::reverse_cumsum(x64, dim)), want_reverse);
  }
}

// Rows long and many enough to be split over threads.
TEST(Scan, LargeInputsAcrossThreads) {
  const Shape shape{64, 1000};
  std::vector<double> x = pseudo_random(shape_numel(shape), -1, 1, 4);
  Tensor t = from_vector(x, shape);
  EXPECT_EQ(as_doubles(ops::cumsum(t, 1)), reference_scan(x, shape, 1, false));
  EXPECT_EQ(as_doubles(ops::cumsum(t, 0)), reference_scan(x, shape, 0, false));
}

TEST(Scan, DtypeRules) {
  Tensor ints = from_vector<int32_t>({1, -2, 3}, {3});
  Tensor s = ops::cumsum(ints, 0);
  EXPECT_EQ(s.dtype(), DType::Int64);  // integers accumulate in int64, as torch
  EXPECT_EQ(as_doubles(s), (std::vector<double>{1, -1, 2}));
  Tensor flags = from_vector<bool>({true, false, true, true}, {4});
  EXPECT_EQ(ops::cumsum(flags, 0).dtype(), DType::Int64);
  EXPECT_EQ(as_doubles(ops::cumsum(flags, 0)), (std::vector<double>{1, 1, 2, 3}));
  Tensor as_float = ops::cumprod(ints, 0, DType::Float64);
  EXPECT_EQ(as_float.dtype(), DType::Float64);
  EXPECT_EQ(as_doubles(as_float), (std::vector<double>{1, -2, -6}));
  Tensor narrow = ops::cumsum(from_vector<int64_t>({100, 100, 100}, {3}), 0, DType::Int8);
  EXPECT_EQ(narrow.dtype(), DType::Int8);  // converted first, then summed in int64 and wrapped into int8
  EXPECT_EQ(as_doubles(narrow), (std::vector<double>{100, -56, 44}));
  Tensor half = from_vector<float>({0.5f, 0.25f, 0.125f}, {3}).to(DType::Float16);
  EXPECT_EQ(ops::cumsum(half, 0).dtype(), DType::Float16);
  EXPECT_EQ(as_doubles(ops::cumsum(half, 0)), (std::vector<double>{0.5, 0.75, 0.875}));
  // int64 wraps around, as torch's does.
  const int64_t big = std::numeric_limits<int64_t>::max();
  Tensor wrapped = ops::cumsum(from_vector<int64_t>({big, 1}, {2}), 0);
  EXPECT_EQ(wrapped.data<int64_t>()[1], std::numeric_limits<int64_t>::min());
}

TEST(Scan, ZeroDimEmptyAndStridedInputs) {
  Tensor scalar = from_vector<double>({5}, {});
  EXPECT_EQ(ops::cumsum(scalar, 0).shape(), Shape{});
  EXPECT_EQ(as_doubles(ops::cumprod(scalar, -1)), (std::vector<double>{5}));
  Tensor empty = Tensor::empty({0, 3}, DType::Float32);
  EXPECT_EQ(ops::cumsum(empty, 0).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::cumsum(empty, 1).shape(), (Shape{0, 3}));
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor xt = x.t();  // (3, 2), not contiguous
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_EQ(as_doubles(ops::cumsum(xt, 1)), (std::vector<double>{1, 5, 2, 7, 3, 9}));
}

TEST(Scan, Errors) {
  Tensor x = from_vector<float>({1, 2, 3}, {3});
  expect_error([&] { ops::cumsum(x, 1); }, "cumsum: dim 1 is out of range for a tensor of 1 dimensions");
  expect_error([&] { ops::cumprod(x, -2); }, "cumprod: dim -2 is out of range");
  expect_error([&] { ops::cumsum(from_vector<double>({1}, {}), 1); }, "cumsum: dim 1 is out of range");
  expect_error([&] { ops::cumsum(x, 0, DType::Bool); }, "cumsum: cannot accumulate into bool");
  expect_error([&] { ops::cumsum(Tensor(), 0); }, "cumsum: got an undefined tensor");
}

#ifndef KILN_WITH_CUDA
// Without the CUDA backend no scan kernels are registered for CUDA: the op
// says so, naming itself and the device (a tensor that claims to live on
// the GPU reaches the kernel lookup without one).
TEST(Scan, ADeviceWithoutTheGroupIsNamed) {
  Tensor on_gpu = tensor_claiming_device(cuda_device(0), 4);
  expect_error([&] { ops::cumsum(on_gpu, 0); }, "cumsum: scan kernels are not supported on cuda:0");
}
#endif

}  // namespace
}  // namespace kiln
