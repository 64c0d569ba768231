// Range factories against torch's documented sizes, dtypes and values.
#include <gtest/gtest.h>

#include <cmath>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

TEST(Arange, IntegerArgumentsMakeInt64) {
  Tensor t = arange(5);
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.shape(), (Shape{5}));
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(t.at<int64_t>({i}), i);

  Tensor down = arange(10, 0, -3);  // torch: [10, 7, 4, 1]
  EXPECT_EQ(down.shape(), (Shape{4}));
  EXPECT_EQ(down.at<int64_t>({3}), 1);
  EXPECT_EQ(arange(5, 5).shape(), (Shape{0}));
}

TEST(Arange, FloatingArgumentsMakeFloat32) {
  // torch.arange(0, 1, 0.1) has 10 elements, each start + i * step.
  Tensor t = arange(0, 1, 0.1);
  EXPECT_EQ(t.dtype(), DType::Float32);
  ASSERT_EQ(t.shape(), (Shape{10}));
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(t.at<float>({i}), static_cast<float>(0.1 * static_cast<double>(i)));

  Tensor half_steps = arange(1, 2.5, 0.5);  // [1.0, 1.5, 2.0]: the end is excluded
  ASSERT_EQ(half_steps.shape(), (Shape{3}));
  EXPECT_EQ(half_steps.at<float>({2}), 2.0f);
  EXPECT_EQ(arange(1, 2.6, 0.5).shape(), (Shape{4}));  // ceil(1.6 / 0.5) = 4
  EXPECT_EQ(arange(5.0).dtype(), DType::Float32);
}

TEST(Arange, ExplicitDtypes) {
  Tensor d = arange(0, 3, 1, DType::Float64);
  EXPECT_EQ(d.dtype(), DType::Float64);
  EXPECT_EQ(d.at<double>({2}), 2.0);
  // An explicitly requested float32 wins over the integer-arguments rule.
  EXPECT_EQ(arange(0, 3, 1, DType::Float32).dtype(), DType::Float32);
  EXPECT_EQ(arange(4, DType::Float32).dtype(), DType::Float32);
  Tensor i = arange(0.0, 2.0, 0.5, DType::Int32);  // truncates as torch: [0, 0, 1, 1]
  EXPECT_EQ(i.dtype(), DType::Int32);
  EXPECT_EQ(i.at<int32_t>({1}), 0);
  EXPECT_EQ(i.at<int32_t>({3}), 1);
  Tensor h = arange(0, 4, 1, DType::Float16);
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(h.at<float>({3}), 3.0f);
}

TEST(Arange, LargeIntegersStayExact) {
  int64_t start = (int64_t{1} << 60) + 1;  // not representable in a double
  Tensor t = arange(start, start + 7, 3);
  ASSERT_EQ(t.shape(), (Shape{3}));
  EXPECT_EQ(t.at<int64_t>({0}), start);
  EXPECT_EQ(t.at<int64_t>({2}), start + 6);
}

TEST(Arange, Errors) {
  expect_error([] { arange(0, 5, 0); }, "arange: step must be non-zero (start 0, end 5, step 0)");
  expect_error([] { arange(0, 5, -1); }, "arange: upper bound and step are inconsistent (start 0, end 5, step -1)");
  expect_error([] { arange(3.0, 1.0, 0.5); },
               "arange: upper bound and step are inconsistent (start 3, end 1, step 0.5)");
  expect_error([] { arange(0.0, INFINITY); }, "arange: start and end must be finite (start 0, end inf)");
}

TEST(Linspace, ValuesAndDtype) {
  Tensor t = linspace(0, 1, 5);
  EXPECT_EQ(t.dtype(), DType::Float32);
  std::vector<float> expected{0.0f, 0.25f, 0.5f, 0.75f, 1.0f};
  ASSERT_EQ(t.shape(), (Shape{5}));
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(t.at<float>({i}), expected[i]);

  Tensor d = linspace(0, 1, 11, DType::Float64);
  for (int64_t i = 0; i <= 10; ++i) EXPECT_NEAR(d.at<double>({i}), static_cast<double>(i) / 10.0, 1e-15);
  EXPECT_EQ(d.at<double>({10}), 1.0);
}

// The second half counts down from `end`, so the ends are exact and a range
// symmetric about 0 gives exactly symmetric values.
TEST(Linspace, IsSymmetricAndHitsBothEnds) {
  Tensor t = linspace(-1.3, 1.3, 8);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(t.at<float>({i}), -t.at<float>({7 - i})) << i;
  EXPECT_EQ(t.at<float>({0}), -1.3f);
  EXPECT_EQ(t.at<float>({7}), 1.3f);
}

TEST(Linspace, IntegerDtypeTruncatesLikeTorch) {
  // torch.linspace(0, 10, 4, dtype=torch.int64) == [0, 3, 6, 10].
  Tensor t = linspace(0, 10, 4, DType::Int64);
  EXPECT_EQ(t.dtype(), DType::Int64);
  std::vector<int64_t> expected{0, 3, 6, 10};
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(t.at<int64_t>({i}), expected[i]);
}

TEST(Linspace, ZeroAndOneSteps) {
  EXPECT_EQ(linspace(0, 1, 0).shape(), (Shape{0}));
  Tensor one = linspace(2.5, 7, 1);
  ASSERT_EQ(one.shape(), (Shape{1}));
  EXPECT_EQ(one.at<float>({0}), 2.5f);
  expect_error([] { linspace(0, 1, -1); }, "linspace: number of steps must be non-negative, got -1");
}

TEST(Eye, SquareAndRectangular) {
  Tensor i3 = eye(3);
  EXPECT_EQ(i3.dtype(), DType::Float32);
  EXPECT_EQ(i3.shape(), (Shape{3, 3}));
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(i3.at<float>({r, c}), r == c ? 1.0f : 0.0f);
  }
  Tensor wide = eye(2, 4, DType::Int64);
  EXPECT_EQ(wide.shape(), (Shape{2, 4}));
  EXPECT_EQ(wide.at<int64_t>({1, 1}), 1);
  EXPECT_EQ(wide.at<int64_t>({1, 2}), 0);
  Tensor tall = eye(4, 2);
  EXPECT_EQ(tall.at<float>({1, 1}), 1.0f);
  EXPECT_EQ(tall.at<float>({3, 1}), 0.0f);
  EXPECT_EQ(eye(0).shape(), (Shape{0, 0}));
  EXPECT_EQ(eye(3, 0).shape(), (Shape{3, 0}));
  expect_error([] { eye(-1); }, "eye: n must be non-negative, got -1");
}

}  // namespace
}  // namespace kiln
