// Helpers shared by the tensor tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace kiln {


// An int32 tensor holding 0, 1, 2, ... in row-major order.
inline Tensor iota_tensor(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::Int32);
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int32_t>(i);
  return t;
}

// A float32 tensor of `numel` elements whose storage claims to live on
// `device` but is host memory that is never touched: lets device-mismatch
// checks, which run before any kernel, be tested on machines without a GPU.
inline Tensor tensor_claiming_device(Device device, int64_t numel) {
  auto memory = std::make_shared<std::vector<float>>(numel);
  auto storage = Storage::from_blob(memory->data(), numel * sizeof(float), device, [memory](void*) {});
  return Tensor(std::make_shared<TensorImpl>(storage, DType::Float32, Shape{numel}, Shape{1}, 0));
}

// Element k (row-major order) of any-rank `t`, read through its strides as double.
inline double flat_value(const Tensor& t, int64_t k) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (k % t.size(d)) * t.stride(d);
    k /= t.size(d);
  }
  return visit_dtype(t.dtype(), [&]<class T>() {
    return static_cast<double>(static_cast<ComputeType<T>>(static_cast<const T*>(t.data_ptr())[offset]));
  });
}

// n deterministic values in [lo, hi) from a 64-bit LCG; `seed` picks the stream.
inline std::vector<double> pseudo_random(int64_t n, double lo, double hi, uint64_t seed = 1) {
  std::vector<double> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) / static_cast<double>(1ull << 53);
  }
  return v;
}

// Expects fn to throw kiln::Error whose message contains `expected`.
inline void expect_error(const std::function<void()>& fn, const std::string& expected) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(expected), std::string::npos)
        << "message was: " << e.message() << "\nexpected to contain: " << expected;
    return;
  }
  ADD_FAILURE() << "expected kiln::Error containing: " << expected;
}

}  // namespace kiln
