// Helpers shared by the tensor tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln.h"

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
