// Where an error says it was raised (Note [Source paths in messages] in
// tensor/error.cpp), whether CUDA can be used, asked in every build
// (tensor/cuda_status.h), and LibTorch's short names (tensor/constants.h):
// what a program embedding Kiln meets first.
#include <gtest/gtest.h>

#include <string>

#include "kiln.h"

namespace kiln {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ErrorLocation, IsRelativeToTheSourceFolder) {
  // Raised inside the library: tensor/linalg.cpp or wherever matmul checks.
  const std::string e = message_of([] { ops::matmul(zeros({2, 3}), zeros({4, 5})); });
  ASSERT_FALSE(e.empty());
  const size_t at = e.rfind(" [at ");
  ASSERT_NE(at, std::string::npos) << e;
  const std::string where = e.substr(at + 5);
  EXPECT_EQ(where.rfind("tensor/", 0), 0u) << "expected a path relative to the source folder: " << e;
  EXPECT_EQ(where.find(KILN_SOURCE_DIR), std::string::npos) << e;
}

TEST(ErrorLocation, AProgramsOwnChecksAreRelativeToo) {
  try {
    KILN_FAIL("a check in a test");
  } catch (const Error& e) {
    EXPECT_STREQ(e.file(), "tests/tensor/error_location_test.cpp");
    EXPECT_NE(std::string(e.what()).find("a check in a test [at tests/tensor/error_location_test.cpp:"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaStatus, AnswersInEveryBuild) {
  const int count = cuda::device_count();
  EXPECT_GE(count, 0);
  EXPECT_EQ(cuda::is_available(), count > 0);
  if (cuda::is_available()) {
    EXPECT_EQ(cuda::unavailable_reason(), "");
  } else {
    EXPECT_FALSE(cuda::unavailable_reason().empty());
#ifndef KILN_WITH_CUDA
    EXPECT_NE(cuda::unavailable_reason().find("built without its cuda backend (KILN_CUDA=OFF)"), std::string::npos)
        << cuda::unavailable_reason();
#endif
  }
}

TEST(Constants, AreLibTorchsNames) {
  Tensor x = randn({2, 3}, kFloat64);
  EXPECT_EQ(x.dtype(), DType::Float64);
  EXPECT_EQ(x.to(kFloat32).dtype(), DType::Float32);
  EXPECT_EQ(x.to(kHalf).dtype(), DType::Float16);
  EXPECT_EQ(kLong, DType::Int64);
  EXPECT_EQ(kInt, DType::Int32);
  EXPECT_EQ(kByte, DType::UInt8);
  EXPECT_EQ(kChar, DType::Int8);
  EXPECT_EQ(kDouble, kFloat64);
  EXPECT_EQ(kBFloat16, DType::BFloat16);
  EXPECT_EQ(kBool, DType::Bool);
  EXPECT_EQ(kCUDA, Device(DeviceType::CUDA, 0));
  EXPECT_EQ(kCUDA.str(), "cuda:0");
  if (!cuda::is_available()) {
    // Asking for the GPU without one is an error naming why, not a crash.
    try {
      x.to(kCUDA);
      FAIL() << "moving to cuda:0 without a GPU must throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln
