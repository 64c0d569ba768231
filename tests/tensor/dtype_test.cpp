// DTypes, 16-bit float conversions, devices and scalars.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(dtype_name(DType::BFloat16), "bfloat16");
  EXPECT_EQ(element_size(DType::Bool), 1u);
  EXPECT_EQ(element_size(DType::Float16), 2u);
  EXPECT_EQ(element_size(DType::Int32), 4u);
  EXPECT_EQ(element_size(DType::Float64), 8u);
  EXPECT_TRUE(is_floating(DType::BFloat16));
  EXPECT_FALSE(is_floating(DType::Int64));
  EXPECT_TRUE(is_integral(DType::UInt8));
  EXPECT_FALSE(is_integral(DType::Bool));
}

TEST(DType, PromoteTypesFollowsTorch) {
  EXPECT_EQ(promote_types(DType::Bool, DType::UInt8), DType::UInt8);
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int8), DType::Int32);  // torch: int16, absent here
  EXPECT_EQ(promote_types(DType::Int32, DType::Int64), DType::Int64);
  EXPECT_EQ(promote_types(DType::Int64, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::BFloat16, DType::Float32), DType::Float32);
  EXPECT_EQ(promote_types(DType::Float32, DType::Float64), DType::Float64);
  EXPECT_EQ(promote_types(DType::Bool, DType::Bool), DType::Bool);
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    Half h = Half::from_bits(static_cast<uint16_t>(bits));
    float f = h;
    if (std::isnan(f)) continue;
    EXPECT_EQ(Half(f).bits, bits) << "bits 0x" << std::hex << bits;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(static_cast<float>(Half(1.0f + 1.0f / 2048)), 1.0f);           // tie -> even (1.0)
  EXPECT_EQ(static_cast<float>(Half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie -> even (up)
  EXPECT_EQ(static_cast<float>(Half(65504.0f)), 65504.0f);                 // largest finite
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(65520.0f))));             // rounds up to inf
  EXPECT_EQ(static_cast<float>(Half(5.9604644775390625e-8f)), 5.9604644775390625e-8f);  // smallest subnormal
  EXPECT_EQ(static_cast<float>(Half(2.0e-8f)), 0.0f);
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3.0f / 256)), 1.0f + 2.0f / 128);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(static_cast<float>(BFloat16(-3.0f)), -3.0f);
}

// Note [Float to integer conversion]: x86's answers, defined for every value.
TEST(DType, FloatsOutOfAnIntegersRangeConvertAsDefined) {
  const std::vector<double> values = {-1.0, 300.0, -200.5, std::nan(""), 3e9, -3e9, 1e30, 2.9, -2.9};
  for (DType from : {DType::Float32, DType::Float64}) {
    Tensor source = from_vector<double>(values, {static_cast<int64_t>(values.size())}).to(from);
    const std::string what(dtype_name(from));
    Tensor u8 = source.to(DType::UInt8), i8 = source.to(DType::Int8);
    Tensor i32 = source.to(DType::Int32), i64 = source.to(DType::Int64);
    const int32_t imin = std::numeric_limits<int32_t>::min();
    const int64_t lmin = std::numeric_limits<int64_t>::min();
    // 8 bits: through int32, then wrapped; int32(NaN, 3e9, ...) is INT32_MIN, whose low bits are 0.
    EXPECT_EQ(std::vector<int>(u8.data<uint8_t>(), u8.data<uint8_t>() + 9),
              (std::vector<int>{255, 44, 56, 0, 0, 0, 0, 2, 254}))
        << what;
    EXPECT_EQ(std::vector<int>(i8.data<int8_t>(), i8.data<int8_t>() + 9),
              (std::vector<int>{-1, 44, 56, 0, 0, 0, 0, 2, -2}))
        << what;
    EXPECT_EQ(std::vector<int32_t>(i32.data<int32_t>(), i32.data<int32_t>() + 9),
              (std::vector<int32_t>{-1, 300, -200, imin, imin, imin, imin, 2, -2}))
        << what;
    EXPECT_EQ(std::vector<int64_t>(i64.data<int64_t>(), i64.data<int64_t>() + 9),
              (std::vector<int64_t>{-1, 300, -200, lmin, 3000000000, -3000000000, lmin, 2, -2}))
        << what;
  }
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device("cpu"), kCPU);
  EXPECT_EQ(Device("cuda"), cuda_device(0));
  EXPECT_EQ(Device("cuda:3"), cuda_device(3));
  EXPECT_EQ(cuda_device(1).str(), "cuda:1");
  expect_error([] { Device("gpu"); }, "Device: cannot parse 'gpu'");
  expect_error([] { Device("cuda:x"); }, "Device: cannot parse 'cuda:x'");
  expect_error([] { Device("cuda:"); }, "Device: cannot parse 'cuda:'");
}

TEST(Scalar, KeepsKindAndConverts) {
  Scalar i = 7;
  Scalar f = 2.5;
  Scalar b = true;
  EXPECT_TRUE(i.is_integral());
  EXPECT_TRUE(f.is_floating());
  EXPECT_TRUE(b.is_bool());
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(f.dtype(), DType::Float64);
  EXPECT_EQ(f.to<int32_t>(), 2);
  EXPECT_EQ(static_cast<float>(f.to<Half>()), 2.5f);
  Scalar big = int64_t{9007199254740993};  // 2^53 + 1: exact only as an integer
  EXPECT_EQ(big.to<int64_t>(), int64_t{9007199254740993});
}

TEST(Error, MessageHasLocationInWhatButNotInMessage) {
  try {
    KILN_CHECK(1 + 1 == 3, "arith: ", 1, " + ", 1, " is not ", 3, " in ", Shape{2, 3});
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "arith: 1 + 1 is not 3 in [2, 3]");
    EXPECT_NE(std::string(e.what()).find("dtype_test.cpp:"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
