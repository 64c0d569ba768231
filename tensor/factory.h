// Factories: new tensors filled with constants, ranges or random numbers.
#pragma once

#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace kiln {

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, Scalar value, TensorOptions options = {});
// A 0-dim tensor holding `value`, of the given dtype.
Tensor scalar_tensor(Scalar value, TensorOptions options = {});

Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);

// A tensor holding a copy of `values` with the given shape (default: 1-d):
//   Tensor w = from_vector<float>({1, 2, 3, 4}, {2, 2});
template <class T>
Tensor from_vector(const std::vector<T>& values, Shape shape = {}, Device device = kCPU);

// [start, end) in steps of `step`, as torch.arange; integer dtype when all
// three are integers (int64), else float32 unless options say otherwise.
Tensor arange(Scalar end, TensorOptions options = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions options = {});
// `steps` values evenly spaced from start to end inclusive, as torch.linspace.
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
// n x m identity (m = n when m < 0).
Tensor eye(int64_t n, int64_t m = -1, TensorOptions options = {});

// Random tensors from a Philox4x32 stream (see tensor/random.h). Without a
// generator they draw from the default one, which kiln::manual_seed resets.
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);  // N(0, 1)
// Integers uniform in [low, high); dtype int64 unless options say otherwise.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = DType::Int64,
               Generator* gen = nullptr);
// 1 with probability p, else 0, in the dtype of options (float32 by default).
Tensor bernoulli(const Shape& shape, double p, TensorOptions options = {}, Generator* gen = nullptr);

// In-place random fills, as torch's tensor.uniform_() / normal_().
Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);

}  // namespace kiln
