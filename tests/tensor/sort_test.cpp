// sort and argsort (tensor/select.h) against std::stable_sort under torch's
// order (NaN above every number, ties in their original order), for every
// dtype, along any dim of any layout; every error path; and the CUDA
// results against the CPU's (skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
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

std::vector<int64_t> indices_of(const Tensor& t) {
  Tensor c = t.to(kCPU).contiguous();
  return std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + c.numel());
}

// Values equal, NaN equal to NaN.
void expect_same_values(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// The reference: each row of the (rows, n) row-major `v` stably sorted,
// NaN larger than every number; values and indices, row-major.
void reference_sort(const std::vector<double>& v, int64_t n, bool descending, std::vector<double>& values,
                    std::vector<int64_t>& indices) {
  values.clear();
  indices.clear();
  auto less = [](double a, double b) { return std::isnan(b) ? !std::isnan(a) : a < b; };
  for (size_t row = 0; n > 0 && row < v.size() / n; ++row) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    const double* r = v.data() + row * n;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return descending ? less(r[b], r[a]) : less(r[a], r[b]);
    });
    for (int64_t i : order) {
      values.push_back(r[i]);
      indices.push_back(i);
    }
  }
}

// Row-major values in [lo, hi), floored for integer dtypes (so that there are ties).
Tensor values_for(DType dtype, const Shape& shape, uint64_t seed, double lo = -4, double hi = 4) {
  std::vector<double> v = pseudo_random(shape_numel(shape), lo, hi, seed);
  for (double& x : v) {
    if (!is_floating(dtype) || dtype == DType::Float16) x = std::floor(x);  // ties in every dtype
  }
  if (dtype == DType::Bool) {
    for (double& x : v) x = x > 0;
  }
  if (dtype == DType::UInt8) {
    for (double& x : v) x = std::fabs(x);
  }
  return from_vector(v, shape).to(dtype);
}

constexpr DType kEveryDType[] = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int32,  DType::Int64,
                                 DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

TEST(Sort, MatchesTorchOnSmallExamples) {
  // torch.sort(tensor([3., nan, 1., 3., nan]), stable=True) and descending=True.
  Tensor x = from_vector<double>({3, kNaN, 1, 3, kNaN});
  ValuesIndices up = sort(x);
  expect_same_values(values_of(up.values), {1, 3, 3, kNaN, kNaN}, "ascending");
  EXPECT_EQ(indices_of(up.indices), (std::vector<int64_t>{2, 0, 3, 1, 4}));
  ValuesIndices down = sort(x, -1, /*descending=*/true);
  expect_same_values(values_of(down.values), {kNaN, kNaN, 3, 3, 1}, "descending");
  EXPECT_EQ(indices_of(down.indices), (std::vector<int64_t>{1, 4, 0, 3, 2}));
  EXPECT_EQ(up.indices.dtype(), DType::Int64);
  // Bools sort false first: torch.sort(tensor([True, False, True])).
  ValuesIndices b = sort(from_vector<bool>({true, false, true}));
  EXPECT_EQ(b.values.dtype(), DType::Bool);
  EXPECT_EQ(values_of(b.values), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(indices_of(b.indices), (std::vector<int64_t>{1, 0, 2}));
  // -0 equals 0: the two keep their order, and each its own sign.
  ValuesIndices zeros_ = sort(from_vector<double>({0.0, -0.0, -kInf, kInf}));
  EXPECT_EQ(indices_of(zeros_.indices), (std::vector<int64_t>{2, 0, 1, 3}));
  EXPECT_TRUE(std::signbit(values_of(zeros_.values)[2]));
}

TEST(Sort, EveryDtypeMatchesTheStableReference) {
  for (DType dtype : kEveryDType) {
    for (bool descending : {false, true}) {
      for (int64_t n : {1, 2, 7, 64, 1000}) {
        const std::string what = detail::str(dtype, " n ", n, descending ? " descending" : "");
        Tensor x = values_for(dtype, {3, n}, 1 + n);
        std::vector<double> want_values;
        std::vector<int64_t> want_indices;
        reference_sort(values_of(x), n, descending, want_values, want_indices);
        ValuesIndices got = sort(x, 1, descending, /*stable=*/true);
        EXPECT_EQ(got.values.dtype(), dtype) << what;
        EXPECT_EQ(got.values.shape(), x.shape()) << what;
        expect_same_values(values_of(got.values), want_values, what);
        EXPECT_EQ(indices_of(got.indices), want_indices) << what;
        EXPECT_EQ(indices_of(argsort(x, -1, descending)), want_indices) << what;
      }
    }
  }
}

TEST(Sort, NaNAndInfinitiesInFloatingDtypes) {
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    Tensor x = from_vector<double>({kNaN, 2, -kInf, kNaN, kInf, -1, 2, -0.0}).to(dtype);
    for (bool descending : {false, true}) {
      std::vector<double> want_values;
      std::vector<int64_t> want_indices;
      reference_sort(values_of(x), 8, descending, want_values, want_indices);
      ValuesIndices got = sort(x, 0, descending);
      expect_same_values(values_of(got.values), want_values, detail::str(dtype));
      EXPECT_EQ(indices_of(got.indices), want_indices) << dtype;
    }
  }
}

TEST(Sort, AlongAnyDimOfAnyLayout) {
  // (4, 5, 6) laid out as the permutation of a (6, 4, 5) tensor.
  Tensor base = values_for(DType::Float32, {6, 4, 5}, 2);
  Tensor x = base.permute({1, 2, 0});
  ASSERT_FALSE(x.is_contiguous());
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    const int64_t d = (dim + 3) % 3;
    SCOPED_TRACE(dim);
    // The reference along d: move d last, sort rows, move back.
    Tensor moved = x.transpose(d, 2).contiguous();
    std::vector<double> want_values;
    std::vector<int64_t> want_indices;
    reference_sort(values_of(moved), moved.size(2), false, want_values, want_indices);
    ValuesIndices got = sort(x, dim);
    EXPECT_EQ(got.values.shape(), x.shape());
    expect_same_values(values_of(got.values.transpose(d, 2)), want_values, "values");
    EXPECT_EQ(indices_of(got.indices.transpose(d, 2)), want_indices);
    // The indices say where each value came from.
    EXPECT_EQ(values_of(gather(x, d, got.indices)), values_of(got.values));
  }
}

TEST(Sort, ZeroDimAndEmptyTensors) {
  ValuesIndices s = sort(scalar_tensor(5.0));
  EXPECT_EQ(s.values.shape(), Shape{});
  EXPECT_EQ(s.values.item<double>(), 5.0);
  EXPECT_EQ(s.indices.item<int64_t>(), 0);
  EXPECT_EQ(sort(scalar_tensor(5.0), 0).indices.shape(), Shape{});
  ValuesIndices e = sort(zeros({2, 0}), 1);
  EXPECT_EQ(e.values.shape(), (Shape{2, 0}));
  EXPECT_EQ(e.indices.shape(), (Shape{2, 0}));
  EXPECT_EQ(sort(zeros({0, 3}), 1).values.shape(), (Shape{0, 3}));
  EXPECT_EQ(argsort(zeros({0})).shape(), (Shape{0}));
}

TEST(Sort, RejectsBadArguments) {
  expect_error([] { sort(zeros({2, 3}), 2); }, "sort: dim 2 is out of range for a tensor of 2 dimensions");
  expect_error([] { sort(scalar_tensor(1.0), 1); }, "sort: dim 1 is out of range for a tensor of 0 dimensions");
  expect_error([] { argsort(zeros({2}), -2); }, "argsort: dim -2 is out of range");
  expect_error([] { sort(Tensor()); }, "sort: got an undefined tensor");
  expect_error([] { argsort(Tensor()); }, "argsort: got an undefined tensor");
}

// ---- CUDA against the CPU ----

TEST(SortCuda, MatchesTheCpuExactly) {
  if (!cuda::is_available()) GTEST_SKIP() << "no usable CUDA GPU: " << cuda::unavailable_reason();
  const Device gpu = cuda_device(0);
  // Short rows, long rows (a bitonic sort of 2^17 slots), and many rows.
  const std::vector<Shape> shapes = {{5, 17}, {2, 100000}, {300, 64}};
  for (DType dtype : kEveryDType) {
    for (const Shape& shape : shapes) {
      Tensor x = values_for(dtype, shape, 3 + shape[1]);
      if (is_floating(dtype)) {
        Tensor two = x.view({x.numel()}).narrow(0, 3, 2);
        ops::fill_(two, kNaN);
      }
      for (bool descending : {false, true}) {
        const std::string what = detail::str(dtype, " ", shape, descending ? " descending" : "");
        ValuesIndices cpu = sort(x, -1, descending);
        ValuesIndices dev = sort(x.to(gpu), -1, descending);
        EXPECT_EQ(dev.values.device(), gpu) << what;
        expect_same_values(values_of(dev.values), values_of(cpu.values), what);
        EXPECT_EQ(indices_of(dev.indices), indices_of(cpu.indices)) << what;
      }
    }
  }
  Tensor x = values_for(DType::Float32, {40, 3, 5}, 4);
  EXPECT_EQ(indices_of(argsort(x.to(gpu), 0, true)), indices_of(argsort(x, 0, true)));
}

}  // namespace
}  // namespace kiln
