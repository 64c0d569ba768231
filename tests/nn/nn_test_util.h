// Helpers shared by the nn tests. Inside kiln::nn, `testing` names this
// namespace; gtest's is ::testing.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/error.h"
#include "tensor/tensor.h"

namespace kiln::nn::testing {

// Expects fn to throw kiln::Error whose message contains every one of `expected`.
inline void expect_error_parts(const std::function<void()>& fn, const std::vector<std::string>& expected) {
  try {
    fn();
  } catch (const Error& e) {
    for (const std::string& part : expected) {
      EXPECT_NE(e.message().find(part), std::string::npos)
          << "message was: " << e.message() << "\nexpected to contain: " << part;
    }
    return;
  }
  ADD_FAILURE() << "expected kiln::Error containing: " << (expected.empty() ? "" : expected[0]);
}

inline void expect_error(const std::function<void()>& fn, const std::string& expected) {
  expect_error_parts(fn, {expected});
}

// The values of any tensor in row-major order, as double.
inline std::vector<double> values_of(const Tensor& t) {
  Tensor host = t.detach().to(DType::Float64, kCPU).contiguous();
  const double* p = host.data<double>();
  return std::vector<double>(p, p + host.numel());
}

// A module M made from `args` and moved to float64, as the PyTorch oracle
// tests compare them: make64<nn::GRU>(4, 3).
template <class M, class... Args>
std::shared_ptr<M> make64(Args&&... args) {
  auto m = std::make_shared<M>(std::forward<Args>(args)...);
  m->to(DType::Float64);
  return m;
}

}  // namespace kiln::nn::testing
