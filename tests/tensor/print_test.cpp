// Tensor::str() golden strings: torch's layout with Kiln's fixed choices
// (4 decimals, dtype always shown, shape shown when elided or empty).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

TEST(Print, FloatMatrixAlignsColumns) {
  Tensor t = from_vector<float>({1.0f, 2.5f, -3.0f, 4.0f}, {2, 2});
  EXPECT_EQ(t.str(),
            "tensor([[ 1.0000,  2.5000],\n"
            "        [-3.0000,  4.0000]], dtype=float32)");
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), t.str());
}

TEST(Print, IntegersAndBools) {
  EXPECT_EQ(from_vector<int64_t>({1, -20, 300}).str(), "tensor([  1, -20, 300], dtype=int64)");
  EXPECT_EQ(from_vector<uint8_t>({7, 255}).str(), "tensor([  7, 255], dtype=uint8)");
  EXPECT_EQ(from_vector<int8_t>({-128, 5}).str(), "tensor([-128,    5], dtype=int8)");
  EXPECT_EQ(from_vector<bool>({true, false, true}).str(), "tensor([ True, False,  True], dtype=bool)");
}

TEST(Print, TransposedViewPrintsLogicalOrder) {
  Tensor t = iota_tensor({2, 3}).t();
  EXPECT_EQ(t.str(),
            "tensor([[0, 3],\n"
            "        [1, 4],\n"
            "        [2, 5]], dtype=int32)");
  Tensor stepped = iota_tensor({2, 6}).slice(1, 1, 6, 2);  // columns 1, 3, 5
  EXPECT_EQ(stepped.str(),
            "tensor([[ 1,  3,  5],\n"
            "        [ 7,  9, 11]], dtype=int32)");
}

TEST(Print, ThreeDimsSeparatedByBlankLines) {
  EXPECT_EQ(iota_tensor({2, 2, 2}).str(),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]], dtype=int32)");
}

TEST(Print, ZeroDimAndEmpty) {
  EXPECT_EQ(scalar_tensor(3.5).str(), "tensor(3.5000, dtype=float32)");
  EXPECT_EQ(scalar_tensor(-2, DType::Int64).str(), "tensor(-2, dtype=int64)");
  EXPECT_EQ(zeros({0, 3}).str(), "tensor([], size=[0, 3], dtype=float32)");
  EXPECT_EQ(zeros({0}, DType::Int64).str(), "tensor([], dtype=int64)");
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
}

TEST(Print, ScientificWhenMagnitudesAreFarApart) {
  EXPECT_EQ(from_vector<double>({1e10, 1.5}).str(), "tensor([1.0000e+10, 1.5000e+00], dtype=float64)");
  EXPECT_EQ(from_vector<float>({1e-5f, -2e-5f}).str(), "tensor([ 1.0000e-05, -2.0000e-05], dtype=float32)");
  // Zeros and non-finite values do not push a tensor into scientific mode.
  EXPECT_EQ(from_vector<float>({0.0f, NAN, INFINITY, -1.0f}).str(),
            "tensor([ 0.0000,     nan,     inf, -1.0000], dtype=float32)");
}

TEST(Print, SixteenBitFloats) {
  EXPECT_EQ(from_vector<Half>({Half(0.5f), Half(-1.25f)}).str(), "tensor([ 0.5000, -1.2500], dtype=float16)");
  EXPECT_EQ(from_vector<BFloat16>({BFloat16(2.0f)}, {1, 1}).str(), "tensor([[2.0000]], dtype=bfloat16)");
}

TEST(Print, LongRowsWrapAtEightyColumns) {
  EXPECT_EQ(arange(0.0, 20.0).str(),
            "tensor([ 0.0000,  1.0000,  2.0000,  3.0000,  4.0000,  5.0000,  6.0000,  7.0000,\n"
            "         8.0000,  9.0000, 10.0000, 11.0000, 12.0000, 13.0000, 14.0000, 15.0000,\n"
            "        16.0000, 17.0000, 18.0000, 19.0000], dtype=float32)");
}

TEST(Print, LargeTensorsAreElidedWithTheirShape) {
  EXPECT_EQ(iota_tensor({2000}).str(), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999], size=[2000], dtype=int32)");
  EXPECT_EQ(iota_tensor({40, 50}).str(),
            "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n"
            "        [  50,   51,   52,  ...,   97,   98,   99],\n"
            "        [ 100,  101,  102,  ...,  147,  148,  149],\n"
            "        ...,\n"
            "        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n"
            "        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n"
            "        [1950, 1951, 1952,  ..., 1997, 1998, 1999]], size=[40, 50], dtype=int32)");
  // An elided 3-d tensor skips whole blocks, with blank lines around "...".
  std::string cube = iota_tensor({10, 10, 11}).str();
  EXPECT_NE(cube.find("[ 319,  320,  321,  ...,  327,  328,  329]],\n\n        ...,\n\n        [[ 770,"),
            std::string::npos)
      << cube;
  EXPECT_NE(cube.find("[1089, 1090, 1091,  ..., 1097, 1098, 1099]]], size=[10, 10, 11],\n       dtype=int32)"),
            std::string::npos)
      << cube;
  // Exactly 1000 elements are still printed in full.
  EXPECT_EQ(iota_tensor({1000}).str().find("..."), std::string::npos);
}

// The element width comes from the shown elements only: the hidden middle of
// an elided tensor may hold wider numbers.
TEST(Print, ElidedWidthIgnoresHiddenElements) {
  Tensor t = zeros({1001}, DType::Int64);
  t.data<int64_t>()[500] = 123456789;
  EXPECT_EQ(t.str(), "tensor([0, 0, 0,  ..., 0, 0, 0], size=[1001], dtype=int64)");
}

}  // namespace
}  // namespace kiln
