// Helpers shared by the data tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tensor/error.h"

namespace kiln::data {

// Expects fn() to throw kiln::Error whose message contains every part.
inline void expect_error_parts(const std::function<void()>& fn, const std::vector<std::string>& expected) {
  try {
    fn();
  } catch (const Error& e) {
    for (const std::string& part : expected)
      EXPECT_NE(e.message().find(part), std::string::npos)
          << "message was: " << e.message() << "\nexpected to contain: " << part;
    return;
  }
  ADD_FAILURE() << "expected kiln::Error containing: " << (expected.empty() ? "" : expected[0]);
}

}  // namespace kiln::data
