// Result dtypes of elementwise ops follow torch.result_type (Note [Type promotion]).
#include <gtest/gtest.h>

#include <cmath>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

// A tensor of dtype d with at least one dim (shape (2,)) or 0-dim.
Tensor dimensioned(DType d) { return ones({2}, d); }
Tensor zero_dim(DType d) { return ones({}, d); }

struct TensorCase {
  Tensor a, b;
  DType expected;
  const char* what;
};

TEST(TypePromotion, TensorPairsFollowTorchResultType) {
  using D = DType;
  std::vector<TensorCase> cases = {
      {dimensioned(D::Bool), dimensioned(D::Bool), D::Bool, "bool + bool"},
      {dimensioned(D::Bool), dimensioned(D::Int8), D::Int8, "bool + int8"},
      {dimensioned(D::UInt8), dimensioned(D::Int8), D::Int32, "uint8 + int8 (torch: int16, absent)"},
      {dimensioned(D::UInt8), dimensioned(D::UInt8), D::UInt8, "uint8 + uint8"},
      {dimensioned(D::Int32), dimensioned(D::Int64), D::Int64, "int32 + int64"},
      {dimensioned(D::Float16), dimensioned(D::BFloat16), D::Float32, "float16 + bfloat16"},
      {dimensioned(D::Int64), dimensioned(D::Float16), D::Float16, "int64 + float16"},
      {dimensioned(D::BFloat16), dimensioned(D::Float32), D::Float32, "bfloat16 + float32"},
      {dimensioned(D::Float32), dimensioned(D::Float64), D::Float64, "float32 + float64"},
      // 0-dim tensors only matter when of a higher category.
      {dimensioned(D::UInt8), zero_dim(D::Int64), D::UInt8, "uint8 + 0-dim int64"},
      {dimensioned(D::Float32), zero_dim(D::Float64), D::Float32, "float32 + 0-dim float64"},
      {zero_dim(D::Float64), dimensioned(D::Float32), D::Float32, "0-dim float64 + float32"},
      {dimensioned(D::Int32), zero_dim(D::Float64), D::Float64, "int32 + 0-dim float64"},
      {dimensioned(D::Bool), zero_dim(D::Int32), D::Int32, "bool + 0-dim int32"},
      {dimensioned(D::Float16), zero_dim(D::Float64), D::Float16, "float16 + 0-dim float64"},
      {zero_dim(D::Float64), zero_dim(D::Int32), D::Float64, "0-dim float64 + 0-dim int32"},
      {zero_dim(D::Int8), zero_dim(D::Int64), D::Int64, "0-dim int8 + 0-dim int64"},
  };
  for (const TensorCase& c : cases) {
    EXPECT_EQ(result_type(c.a, c.b), c.expected) << c.what;
    EXPECT_EQ(add(c.a, c.b).dtype(), c.expected) << c.what;
    EXPECT_EQ(mul(c.b, c.a).dtype(), c.expected) << c.what << " (swapped)";
  }
}

struct ScalarCase {
  Tensor a;
  Scalar b;
  DType expected;
  const char* what;
};

TEST(TypePromotion, NumbersOnlyDecideAHigherCategory) {
  using D = DType;
  std::vector<ScalarCase> cases = {
      {dimensioned(D::Int32), 2.5, D::Float32, "int32 + 2.5 (default float)"},
      {dimensioned(D::Int64), 2.5, D::Float32, "int64 + 2.5"},
      {dimensioned(D::Float16), 2.5, D::Float16, "float16 + 2.5"},
      {dimensioned(D::BFloat16), 2.5, D::BFloat16, "bfloat16 + 2.5"},
      {dimensioned(D::Float64), 2.5, D::Float64, "float64 + 2.5"},
      {dimensioned(D::Int8), 1000, D::Int8, "int8 + 1000"},
      {dimensioned(D::UInt8), 5, D::UInt8, "uint8 + 5"},
      {dimensioned(D::Bool), 1, D::Int64, "bool + 1"},
      {dimensioned(D::Bool), 2.5, D::Float32, "bool + 2.5"},
      {dimensioned(D::Bool), true, D::Bool, "bool + true"},
      {dimensioned(D::Float32), true, D::Float32, "float32 + true"},
      {zero_dim(D::Int32), 5, D::Int32, "0-dim int32 + 5"},
      {zero_dim(D::Int32), 2.5, D::Float32, "0-dim int32 + 2.5"},
      {zero_dim(D::Float16), 2.5, D::Float16, "0-dim float16 + 2.5"},
      {zero_dim(D::Float64), 2, D::Float64, "0-dim float64 + 2"},
  };
  for (const ScalarCase& c : cases) {
    EXPECT_EQ(result_type(c.a, c.b), c.expected) << c.what;
    EXPECT_EQ(add(c.a, c.b).dtype(), c.expected) << c.what;
    EXPECT_EQ((c.b * c.a).dtype(), c.expected) << c.what << " (number on the left)";
  }
}

TEST(TypePromotion, ValuesFollowTheResultType) {
  // int8 + 1000 computes in int8: 1000 wraps to -24, and 1 - 24 = -23, as torch.
  Tensor a = from_vector<int8_t>({1, 2});
  Tensor r = add(a, 1000);
  EXPECT_EQ(r.dtype(), DType::Int8);
  EXPECT_EQ(r.at<int>({0}), -23);
  // int32 + 2.5 is float32 3.5.
  Tensor f = add(from_vector<int32_t>({1, 2}), 2.5);
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(f.at<float>({1}), 4.5f);
  // float16 + 2.5 stays float16: float16 spacing is 0.5 below 1024 and 2
  // from 2048, so 2048 + 2.5 rounds to 2050.
  Tensor h = add(from_vector<float>({1000.0f, 2048.0f}).to(DType::Float16), 2.5);
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(h.at<float>({0}), 1002.5f);
  EXPECT_EQ(h.at<float>({1}), 2050.0f);
  // bool + bool is logical or; bool * bool is logical and.
  Tensor t = from_vector<bool>({true, true, false});
  Tensor u = from_vector<bool>({true, false, false});
  EXPECT_EQ(add(t, u).at<bool>({1}), true);
  EXPECT_EQ(mul(t, u).at<bool>({1}), false);
}

TEST(TypePromotion, DivisionIsTrueDivisionInTheDefaultFloat) {
  Tensor a = from_vector<int64_t>({7, -7, 1});
  Tensor b = from_vector<int64_t>({2, 2, 0});
  Tensor q = div(a, b);
  EXPECT_EQ(q.dtype(), DType::Float32);
  EXPECT_EQ(q.at<float>({0}), 3.5f);
  EXPECT_EQ(q.at<float>({1}), -3.5f);
  EXPECT_TRUE(std::isinf(q.at<float>({2})));  // no integer division trap
  EXPECT_EQ(div(from_vector<bool>({true}), 2).dtype(), DType::Float32);
  EXPECT_EQ(div(dimensioned(DType::Float16), dimensioned(DType::Int32)).dtype(), DType::Float16);
  EXPECT_EQ((1 / dimensioned(DType::Int32)).dtype(), DType::Float32);
}

TEST(TypePromotion, UnaryFloatOpsOfIntegersGiveFloat32) {
  Tensor i = from_vector<int32_t>({1, 4});
  for (Tensor r : {exp(i), log(i), sqrt(i), rsqrt(i), sigmoid(i), tanh(i), gelu(i)}) {
    EXPECT_EQ(r.dtype(), DType::Float32);
  }
  EXPECT_EQ(sqrt(i).at<float>({1}), 2.0f);
  EXPECT_EQ(sqrt(from_vector<bool>({true})).dtype(), DType::Float32);
  EXPECT_EQ(exp(dimensioned(DType::BFloat16)).dtype(), DType::BFloat16);
  EXPECT_EQ(neg(dimensioned(DType::Int8)).dtype(), DType::Int8);
  EXPECT_EQ(abs(dimensioned(DType::Int64)).dtype(), DType::Int64);
  EXPECT_EQ(relu(dimensioned(DType::UInt8)).dtype(), DType::UInt8);
  EXPECT_EQ(logical_not(dimensioned(DType::Float32)).dtype(), DType::Bool);
}

TEST(TypePromotion, ComparisonsWhereClampAndPow) {
  Tensor i = from_vector<int32_t>({1, 2, 3});
  Tensor eq_mixed = eq(i, 2.0);
  EXPECT_EQ(eq_mixed.dtype(), DType::Bool);
  EXPECT_TRUE(eq_mixed.at<bool>({1}));
  // 2 == 2.5 is false: the comparison happens in float32, not after
  // truncating 2.5 to the int tensor's dtype.
  EXPECT_FALSE(eq(i, 2.5).at<bool>({1}));
  EXPECT_TRUE(lt(i, 2.5).at<bool>({1}));
  Tensor cond = from_vector<bool>({true, false, true});
  Tensor w = where(cond, i, 2.5);
  EXPECT_EQ(w.dtype(), DType::Float32);
  EXPECT_EQ(w.at<float>({1}), 2.5f);
  EXPECT_EQ(where(cond, i, from_vector<int64_t>({9, 9, 9})).dtype(), DType::Int64);
  EXPECT_EQ(clamp(i, 1.5, std::nullopt).dtype(), DType::Float32);
  EXPECT_EQ(clamp(i, 1.5, std::nullopt).at<float>({0}), 1.5f);
  EXPECT_EQ(clamp(i, 1, 2).dtype(), DType::Int32);
  EXPECT_EQ(pow(i, 2).dtype(), DType::Int32);
  EXPECT_EQ(pow(i, 0.5).dtype(), DType::Float32);
  EXPECT_EQ(pow(from_vector<bool>({true}), 2).dtype(), DType::Int64);
  EXPECT_EQ(maximum(i, dimensioned(DType::Float16).narrow(0, 0, 1)).dtype(), DType::Float16);
}

TEST(TypePromotion, CanCastRulesOfInPlaceOps) {
  Tensor i = from_vector<int64_t>({1, 2});
  expect_error([&] { add_(i, 2.5); }, "add_: result type float32 can't be cast to the desired output type int64");
  expect_error(
      [&] {
        add_(i, from_vector<float>({1, 2}));
      },
      "add_: result type float32 can't be cast to the desired output type int64");
  expect_error([&] { div_(i, 2); }, "div_: result type float32 can't be cast to the desired output type int64");
  expect_error([&] { exp_(i); }, "exp_: result type float32 can't be cast to the desired output type int64");
  Tensor b = from_vector<bool>({true, false});
  expect_error([&] { add_(b, 1); }, "add_: result type int64 can't be cast to the desired output type bool");
  expect_error([&] { clamp_(i, 0.5, std::nullopt); },
               "clamp_: result type float32 can't be cast to the desired output type int64");
  // Integer results may be written to a narrower integer tensor (they wrap).
  Tensor small = from_vector<int8_t>({100, 1});
  add_(small, from_vector<int64_t>({100, 1}));
  EXPECT_EQ(small.dtype(), DType::Int8);
  EXPECT_EQ(small.at<int>({0}), -56);
  // A float32 result rounds into a float16 tensor.
  Tensor h = from_vector<float>({1.0f}, {1}).to(DType::Float16);
  add_(h, from_vector<float>({1e-4f}, {1}));
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(h.at<float>({0}), 1.0f);
}

}  // namespace
}  // namespace kiln
