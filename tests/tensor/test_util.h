// Helpers shared by the tensor tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

#include "kiln.h"

namespace kiln {

// An int32 tensor holding 0, 1, 2, ... in row-major order.
inline Tensor iota_tensor(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::Int32);
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int32_t>(i);
  return t;
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
