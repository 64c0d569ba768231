// matmul / mm / bmm / linear: torch's shape rules (1-d operands, broadcast
// batch dims), values against a float64 loop over views of the operands,
// dtypes, empty shapes and every error message.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

// Uniform [-1, 1) values of `dtype` (16-bit floats rounded from float).
Tensor random_tensor(const Shape& shape, DType dtype = DType::Float32, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (double& v : values) v = dist(rng);
  return from_vector<double>(values, shape).to(dtype);
}

// Integers in [lo, lo + 3].
Tensor random_ints(const Shape& shape, DType dtype, int64_t lo, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, lo + 3);
  std::vector<int64_t> values(static_cast<size_t>(shape_numel(shape)));
  for (int64_t& v : values) v = dist(rng);
  return from_vector<int64_t>(values, shape).to(dtype);
}

// got (M, N) against a (M, K) @ b (K, N) computed in double, element by element.
void expect_product(const Tensor& got, const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(got.shape(), (Shape{a.size(0), b.size(1)}));
  for (int64_t i = 0; i < a.size(0); ++i) {
    for (int64_t j = 0; j < b.size(1); ++j) {
      double want = 0;
      for (int64_t p = 0; p < a.size(1); ++p) want += a.at<double>({i, p}) * b.at<double>({p, j});
      ASSERT_NEAR(got.at<double>({i, j}), want, tol) << "at " << i << ", " << j;
    }
  }
}

TEST(Matmul, TwoDimsAllDtypesAndLayouts) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor a = random_tensor({37, 53}, dtype, 1), b = random_tensor({53, 29}, dtype, 2);
    expect_product(matmul(a, b), a, b, 1e-4);
    // Transposed operands are read through their strides, not copied.
    Tensor at = random_tensor({53, 37}, dtype, 3).t(), bt = random_tensor({29, 53}, dtype, 4).t();
    expect_product(matmul(at, bt), at, bt, 1e-4);
    // A column slice: rows of stride 60, not contiguous.
    Tensor as = random_tensor({37, 60}, dtype, 5).slice(1, 3, 56);
    expect_product(mm(as, b), as, b, 1e-4);
  }
}

TEST(Matmul, SixteenBitFloatsAccumulateInFloat32) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    Tensor a = random_tensor({20, 300}, dtype, 6), b = random_tensor({300, 12}, dtype, 7);
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), dtype);
    // The inputs are exact in float; the only error left is the final rounding.
    double rel = dtype == DType::Float16 ? 1e-3 : 8e-3;
    for (int64_t i = 0; i < 20; ++i) {
      for (int64_t j = 0; j < 12; ++j) {
        double want = 0;
        for (int64_t p = 0; p < 300; ++p) want += a.at<double>({i, p}) * b.at<double>({p, j});
        EXPECT_NEAR(c.at<double>({i, j}), want, rel * std::fabs(want) + 1e-3);
      }
    }
  }
}

TEST(Matmul, IntegersAreExact) {
  for (DType dtype : {DType::Int32, DType::Int64, DType::Int8, DType::UInt8}) {
    int64_t lo = dtype == DType::UInt8 ? 0 : -3;  // small, so no int8 / uint8 sum wraps
    Tensor a = random_ints({7, 9}, dtype, lo, 8), b = random_ints({9, 5}, dtype, lo, 9);
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), dtype);
    for (int64_t i = 0; i < 7; ++i) {
      for (int64_t j = 0; j < 5; ++j) {
        int64_t want = 0;
        for (int64_t p = 0; p < 9; ++p) want += a.at<int64_t>({i, p}) * b.at<int64_t>({p, j});
        EXPECT_EQ(c.at<int64_t>({i, j}), want) << dtype << " at " << i << ", " << j;
      }
    }
  }
}

TEST(Matmul, OneDimensionalOperands) {
  Tensor v = random_tensor({5}, DType::Float64, 10), w = random_tensor({5}, DType::Float64, 11);
  Tensor m = random_tensor({5, 3}, DType::Float64, 12), n = random_tensor({4, 5}, DType::Float64, 13);

  Tensor dot = matmul(v, w);  // (5) @ (5) -> scalar
  EXPECT_EQ(dot.dim(), 0);
  double want = 0;
  for (int64_t i = 0; i < 5; ++i) want += v.at<double>({i}) * w.at<double>({i});
  EXPECT_NEAR(dot.item<double>(), want, 1e-12);

  Tensor vm = matmul(v, m);  // (5) @ (5, 3) -> (3)
  EXPECT_EQ(vm.shape(), (Shape{3}));
  expect_product(vm.unsqueeze(0), v.unsqueeze(0), m, 1e-12);

  Tensor nv = matmul(n, v);  // (4, 5) @ (5) -> (4)
  EXPECT_EQ(nv.shape(), (Shape{4}));
  expect_product(nv.unsqueeze(1), n, v.unsqueeze(1), 1e-12);

  Tensor batch = random_tensor({2, 5, 3}, DType::Float64, 14);
  Tensor vb = matmul(v, batch);  // (5) @ (2, 5, 3) -> (2, 3)
  EXPECT_EQ(vb.shape(), (Shape{2, 3}));
  for (int64_t i = 0; i < 2; ++i) {
    expect_product(vb.select(0, i).unsqueeze(0), v.unsqueeze(0), batch.select(0, i), 1e-12);
  }

  Tensor bt = random_tensor({2, 4, 5}, DType::Float64, 15);
  Tensor bv = matmul(bt, v);  // (2, 4, 5) @ (5) -> (2, 4)
  EXPECT_EQ(bv.shape(), (Shape{2, 4}));
  for (int64_t i = 0; i < 2; ++i) expect_product(bv.select(0, i).unsqueeze(1), bt.select(0, i), v.unsqueeze(1), 1e-12);
}

TEST(Matmul, BroadcastBatchDims) {
  Tensor a = random_tensor({2, 1, 3, 4}, DType::Float32, 16), b = random_tensor({5, 4, 6}, DType::Float32, 17);
  Tensor c = matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 5, 3, 6}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      expect_product(c.select(0, i).select(0, j), a.select(0, i).select(0, 0), b.select(0, j), 1e-5);
    }
  }
  // 2-d @ batched: the matrix broadcasts over b's batch.
  Tensor m = random_tensor({3, 4}, DType::Float32, 18);
  Tensor mb = matmul(m, b);
  ASSERT_EQ(mb.shape(), (Shape{5, 3, 6}));
  for (int64_t j = 0; j < 5; ++j) expect_product(mb.select(0, j), m, b.select(0, j), 1e-5);
}

TEST(Matmul, BatchedTimesMatrixFoldsIntoOneProduct) {
  // (2, 3, 4) @ (4, 5); a permuted (non-contiguous) batch too.
  Tensor a = random_tensor({2, 3, 4}, DType::Float64, 19), b = random_tensor({4, 5}, DType::Float64, 20);
  Tensor c = matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 3, 5}));
  for (int64_t i = 0; i < 2; ++i) expect_product(c.select(0, i), a.select(0, i), b, 1e-12);
  Tensor ap = random_tensor({3, 2, 4}, DType::Float64, 21).permute({1, 0, 2});
  Tensor cp = matmul(ap, b);
  for (int64_t i = 0; i < 2; ++i) expect_product(cp.select(0, i), ap.select(0, i), b, 1e-12);
}

TEST(Matmul, BmmAgainstReference) {
  Tensor a = random_tensor({4, 7, 9}, DType::Float32, 22);
  Tensor b = random_tensor({4, 11, 9}, DType::Float32, 23).transpose(1, 2);  // (4, 9, 11), transposed
  Tensor c = bmm(a, b);
  ASSERT_EQ(c.shape(), (Shape{4, 7, 11}));
  for (int64_t i = 0; i < 4; ++i) expect_product(c.select(0, i), a.select(0, i), b.select(0, i), 1e-5);
}

TEST(Matmul, EmptyShapes) {
  EXPECT_EQ(matmul(zeros({0, 3}), ones({3, 4})).shape(), (Shape{0, 4}));
  Tensor z = matmul(ones({3, 0}), ones({0, 4}));  // K = 0: all zeros
  ASSERT_EQ(z.shape(), (Shape{3, 4}));
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(z.at<float>({i, j}), 0.f);
  }
  EXPECT_EQ(matmul(ones({0, 2, 3}), ones({3, 4})).shape(), (Shape{0, 2, 4}));
  EXPECT_EQ(bmm(ones({2, 3, 0}), ones({2, 0, 5})).shape(), (Shape{2, 3, 5}));
}

TEST(Linear, WithAndWithoutBias) {
  Tensor x = random_tensor({2, 3, 8}, DType::Float32, 24), w = random_tensor({5, 8}, DType::Float32, 25);
  Tensor bias = random_tensor({5}, DType::Float32, 26);
  Tensor y = linear(x, w, bias), y0 = linear(x, w);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
  ASSERT_EQ(y0.shape(), (Shape{2, 3, 5}));
  for (int64_t i = 0; i < 2; ++i) {
    expect_product(y0.select(0, i), x.select(0, i), w.t(), 1e-5);
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t o = 0; o < 5; ++o) {
        EXPECT_NEAR(y.at<float>({i, r, o}), y0.at<float>({i, r, o}) + bias.at<float>({o}), 1e-5);
      }
    }
  }
  Tensor v = linear(x.select(0, 0).select(0, 0), w, bias);  // 1-d input -> (5)
  ASSERT_EQ(v.shape(), (Shape{5}));
  for (int64_t o = 0; o < 5; ++o) EXPECT_NEAR(v.at<float>({o}), y.at<float>({0, 0, o}), 1e-6);
}

TEST(Matmul, Errors) {
  expect_error([] { matmul(zeros({64, 400}), zeros({120, 400})); },
               "matmul: shapes [64, 400] and [120, 400] cannot be multiplied (400 != 120)");
  expect_error([] { matmul(zeros({3}), zeros({4})); }, "matmul: shapes [3] and [4] cannot be multiplied (3 != 4)");
  expect_error([] { matmul(zeros({2, 3}), zeros({4})); },
               "matmul: shapes [2, 3] and [4] cannot be multiplied (3 != 4)");
  expect_error([] { matmul(zeros({}), zeros({3})); },
               "matmul: both arguments need at least 1 dimension, got shapes [] and [3]");
  expect_error([] { matmul(zeros({2, 3}), zeros({3, 2}, DType::Float64)); },
               "matmul: expected both tensors to have the same dtype, got float32 and float64");
  expect_error([] { matmul(zeros({2, 2, 3}), zeros({3, 3, 4})); },
               "matmul: batch dims [2] and [3] of shapes [2, 2, 3] and [3, 3, 4] cannot be broadcast");
  expect_error([] { matmul(Tensor(), zeros({3})); }, "matmul: an operand is undefined");
  expect_error([] { mm(zeros({2, 3, 4}), zeros({4, 5})); },
               "mm: expected 2-d tensors, got shapes [2, 3, 4] and [4, 5]");
  expect_error([] { mm(zeros({2, 3}), zeros({4, 5})); }, "mm: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  expect_error([] { mm(zeros({2, 3}), zeros({3, 5}, DType::Int64)); },
               "mm: expected both tensors to have the same dtype, got float32 and int64");
  expect_error([] { bmm(zeros({2, 3}), zeros({3, 5})); }, "bmm: expected 3-d tensors, got shapes [2, 3] and [3, 5]");
  expect_error([] { bmm(zeros({2, 3, 4}), zeros({3, 4, 5})); },
               "bmm: batch sizes of shapes [2, 3, 4] and [3, 4, 5] differ (2 != 3)");
  expect_error([] { bmm(zeros({2, 3, 4}), zeros({2, 5, 5})); },
               "bmm: shapes [2, 3, 4] and [2, 5, 5] cannot be multiplied (4 != 5)");
}

TEST(Linear, Errors) {
  expect_error([] { linear(zeros({4, 8}), zeros({5, 8, 1})); },
               "linear: weight must be 2-d (out_features, in_features), got shape [5, 8, 1]");
  expect_error([] { linear(zeros({4, 7}), zeros({5, 8})); },
               "linear: input of shape [4, 7] has 7 features but weight of shape [5, 8] expects 8");
  expect_error([] { linear(zeros({4, 8}), zeros({5, 8}), zeros({4})); }, "linear: bias must have shape [5], got [4]");
  expect_error([] { linear(zeros({4, 8}), zeros({5, 8}), zeros({5}, DType::Float64)); },
               "linear: expected both tensors to have the same dtype, got float32 and float64");
  expect_error([] { linear(zeros({}), zeros({5, 8})); }, "linear: input must have at least 1 dimension, got shape []");
}

TEST(Matmul, DeviceMismatch) {
  Tensor on_cuda = tensor_claiming_device(cuda_device(0), 6).view({3, 2});
  expect_error([&] { matmul(zeros({2, 3}), on_cuda); },
               "matmul: expected both tensors on the same device, got cpu and cuda:0");
  expect_error([&] { linear(zeros({4, 2}), on_cuda); }, "linear: expected both tensors on the same device");
}

}  // namespace
}  // namespace kiln
