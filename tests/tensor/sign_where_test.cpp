// sign, and where with numbers for branches (tensor/elementwise.h): values
// and dtypes as torch gives them (checked by hand against torch 1.13), every
// error path, and CUDA against the CPU (skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/cuda_status.h"
#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> values_of(const Tensor& t) {
  Tensor c = t.to(DType::Float64, kCPU).contiguous();
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

TEST(Sign, FloatsAsTorchZeroForNaNAndNegativeZero) {
  // torch.sign(tensor([-2., -0., 0., 3., nan, inf, -inf])) == [-1, 0, 0, 1, 0, 1, -1]
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    Tensor x = from_vector<double>({-2, -0.0, 0, 3, kNaN, kInf, -kInf, 1e-30}).to(dtype);
    Tensor s = sign(x);
    EXPECT_EQ(s.dtype(), dtype);
    std::vector<double> v = values_of(s);
    EXPECT_EQ(v, (std::vector<double>{-1, 0, 0, 1, 0, 1, -1, dtype == DType::Float16 ? 0.0 : 1.0})) << dtype;
    // The zero of -0 is +0, as torch's (0 < x) - (x < 0).
    EXPECT_FALSE(std::signbit(v[1])) << dtype;
  }
}

TEST(Sign, IntegersKeepTheirDtypeAndBoolIsItself) {
  for (DType dtype : {DType::Int8, DType::Int32, DType::Int64}) {
    Tensor s = sign(from_vector<int64_t>({-3, 0, 5, -128}).to(dtype));
    EXPECT_EQ(s.dtype(), dtype);
    EXPECT_EQ(values_of(s), (std::vector<double>{-1, 0, 1, -1}));
  }
  Tensor u = sign(from_vector<int64_t>({0, 5, 255}).to(DType::UInt8));
  EXPECT_EQ(u.dtype(), DType::UInt8);
  EXPECT_EQ(values_of(u), (std::vector<double>{0, 1, 1}));
  Tensor b = from_vector<bool>({true, false});
  Tensor sb = sign(b);
  EXPECT_EQ(sb.dtype(), DType::Bool);
  EXPECT_EQ(values_of(sb), (std::vector<double>{1, 0}));
  EXPECT_FALSE(sb.storage() == b.storage());
}

TEST(Sign, AnyLayoutAndEmpty) {
  Tensor x = from_vector<double>({-1, 2, 0, -4, 5, -6}, {2, 3}).t();
  EXPECT_EQ(values_of(sign(x)), (std::vector<double>{-1, -1, 1, 1, 0, -1}));
  EXPECT_EQ(sign(zeros({0, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(sign(scalar_tensor(-2.5)).item<double>(), -1.0);
  expect_error([] { sign(Tensor()); }, "sign: got an undefined tensor");
}

TEST(WhereScalars, ANumberForTheTrueBranch) {
  Tensor cond = from_vector<bool>({true, false, true, false}, {2, 2});
  Tensor b = from_vector<double>({1, 2, 3, 4}, {2, 2});
  Tensor out = where(cond, 9.5, b);
  EXPECT_EQ(out.dtype(), DType::Float64);
  EXPECT_EQ(values_of(out), (std::vector<double>{9.5, 2, 9.5, 4}));
  // Promotion as a binary op with a number: int8 with 2 stays int8; int8 with 2.5 is float32.
  Tensor i8 = from_vector<int64_t>({1, 2, 3, 4}, {2, 2}).to(DType::Int8);
  EXPECT_EQ(where(cond, 2, i8).dtype(), DType::Int8);
  EXPECT_EQ(where(cond, 2.5, i8).dtype(), DType::Float32);
  EXPECT_EQ(values_of(where(cond, 2.5, i8)), (std::vector<double>{2.5, 2, 2.5, 4}));
  EXPECT_EQ(where(cond, 2.5, i8.to(DType::Float16)).dtype(), DType::Float16);
  // cond broadcasts with b.
  Tensor row = from_vector<bool>({false, true});
  EXPECT_EQ(values_of(where(row, -1, b)), (std::vector<double>{1, -1, 3, -1}));
  EXPECT_EQ(where(from_vector<bool>({true, false}, {2, 1, 1}), 0.0, b).shape(), (Shape{2, 2, 2}));
}

TEST(WhereScalars, TwoNumbersTakeCondsShapeAndTheNumbersDtype) {
  Tensor cond = from_vector<bool>({true, false, false}, {3, 1});
  Tensor f = where(cond, 1.0, 0.0);
  EXPECT_EQ(f.dtype(), DType::Float32);  // the default float, as torch.where(cond, 1.0, 0.0)
  EXPECT_EQ(f.shape(), (Shape{3, 1}));
  EXPECT_EQ(values_of(f), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(where(cond, 1, 0).dtype(), DType::Int64);
  EXPECT_EQ(where(cond, 1, 2.5).dtype(), DType::Float32);
  EXPECT_EQ(where(cond, true, false).dtype(), DType::Bool);
  EXPECT_EQ(where(cond, true, 3).dtype(), DType::Int64);
  EXPECT_EQ(values_of(where(cond, true, 3)), (std::vector<double>{1, 3, 3}));
  EXPECT_EQ(where(scalar_tensor(true, DType::Bool), 4, 5).item<int64_t>(), 4);
  EXPECT_EQ(where(zeros({0}, DType::Bool), 1.0, 2.0).shape(), (Shape{0}));
}

TEST(WhereScalars, RejectsBadArguments) {
  Tensor x = zeros({2});
  expect_error([&] { where(zeros({2}), 1.0, 2.0); }, "where: expected the condition to be a bool tensor, got float32");
  expect_error([&] { where(zeros({2}, DType::Int64), 1.0, x); }, "where: expected the condition to be a bool tensor");
  expect_error([&] { where(zeros({3}, DType::Bool), 1.0, x); }, "where");
  expect_error([&] { where(Tensor(), 1.0, 2.0); }, "where: the condition is undefined");
}

// ---- CUDA against the CPU ----

TEST(SignWhereCuda, MatchesTheCpuExactly) {
  if (!cuda::is_available()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda::unavailable_reason();
  const Device gpu = cuda_device(0);
  Tensor x = from_vector<double>({-2, -0.0, 0, 3, kNaN, kInf, -kInf, 0.5}, {2, 4});
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    Tensor xd = x.to(dtype);
    EXPECT_EQ(values_of(sign(xd.to(gpu))), values_of(sign(xd))) << dtype;
  }
  Tensor ints = from_vector<int64_t>({-3, 0, 7, -1}, {2, 2});
  EXPECT_EQ(values_of(sign(ints.to(gpu))), values_of(sign(ints)));
  Tensor cond = gt(x, 0.0);
  Tensor cg = cond.to(gpu);
  EXPECT_EQ(values_of(where(cg, 1.5, x.to(gpu))), values_of(where(cond, 1.5, x)));
  Tensor both = where(cg, 1.0, -1.0);
  EXPECT_EQ(both.device(), gpu);
  EXPECT_EQ(values_of(both), values_of(where(cond, 1.0, -1.0)));
}

}  // namespace
}  // namespace kiln
