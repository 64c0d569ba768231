// softmax, log_softmax and logsumexp against float64 references computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/ops.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/reduce_simd.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> values_of(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// Softmax (or log-softmax) of row-major `shape` values along `dim`, in float64.
std::vector<double> reference(const std::vector<double>& x, const Shape& shape, int64_t dim, bool log) {
  int64_t n = shape[dim], inner = 1, outer = 1;
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + i; };
      double m = -kInf;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, x[at(k)]);
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) out[at(k)] = log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 10; ++i) {
    bool ok = std::isinf(want[i]) ? got[i] == want[i] : std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]);
    if (!ok) ++failures;
    EXPECT_TRUE(ok) << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
}

// Checks softmax and log_softmax of x along every dim against the reference.
void check_all_dims(const Tensor& x, double rtol, double atol, const std::string& what) {
  std::vector<double> xv = values_of(x);
  for (int64_t dim = 0; dim < x.dim(); ++dim) {
    for (bool log : {false, true}) {
      Tensor got = log ? log_softmax(x, dim) : softmax(x, dim);
      // Log-probabilities near 0 come from a cancellation (x - max) - log(sum),
      // so they are only accurate to rtol in absolute terms.
      double tolerance = log ? std::max(atol, rtol) : atol;
      EXPECT_EQ(got.shape(), x.shape());
      EXPECT_EQ(got.dtype(), x.dtype());
      expect_close(values_of(got), reference(xv, x.shape(), dim, log), rtol, tolerance,
                   what + (log ? " log_softmax" : " softmax") + " dim " + std::to_string(dim));
    }
  }
}

TEST(Softmax, SmallRowsMatchReferenceAndSumToOne) {
  Tensor x = from_vector<double>(pseudo_random(640, -5, 5), {64, 10}).to(DType::Float32);
  Tensor y = softmax(x, -1);
  Tensor row_sums = sum(y, {1});
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(row_sums.at<float>({i}), 1.0f, 1e-6);
  check_all_dims(x, 2e-6, 1e-7, "(64, 10)");
}

TEST(Softmax, AnyDimAnyLayout) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    double rtol = dtype == DType::Float32 ? 2e-6 : 1e-13;
    std::string name(dtype_name(dtype));
    Tensor c = from_vector<double>(pseudo_random(60, -4, 4, 2), {3, 4, 5}).to(dtype);
    check_all_dims(c, rtol, 1e-9, name + " contiguous");
    check_all_dims(from_vector<double>(pseudo_random(60, -4, 4, 3), {5, 3, 4}).to(dtype).permute({1, 2, 0}), rtol,
                   1e-9, name + " permuted");
    Tensor base = from_vector<double>(pseudo_random(4 * 9 * 11, -4, 4, 4), {4, 9, 11}).to(dtype);
    check_all_dims(base.slice(1, 1, 9, 3).slice(2, 0, 11, 2), rtol, 1e-9, name + " sliced");
    // Softmax over dim 0 / dim 1 with a contiguous inner dim of >= 16: the
    // column layout.
    check_all_dims(from_vector<double>(pseudo_random(2 * 5 * 40, -4, 4, 5), {2, 5, 40}).to(dtype), rtol, 1e-9,
                   name + " columns");
  }
}

TEST(Softmax, HalfPrecisionComputesInFloat32) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    Tensor x = from_vector<double>(pseudo_random(3 * 40, -4, 4, 6), {3, 40}).to(dtype);
    check_all_dims(x, dtype == DType::Float16 ? 2e-3 : 1e-2, 1e-3, std::string(dtype_name(dtype)));
  }
}

TEST(Softmax, LargeAndInfiniteInputsStayFinite) {
  Tensor x = from_vector<float>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  std::vector<double> want = reference(values_of(x), {2, 3}, 1, false);
  expect_close(values_of(softmax(x, 1)), want, 1e-6, 1e-7, "large softmax");
  std::vector<double> want_log = reference(values_of(x), {2, 3}, 1, true);
  expect_close(values_of(log_softmax(x, 1)), want_log, 1e-6, 1e-5, "large log_softmax");
  // 40 elements: the SIMD loop and its tail both see large values.
  std::vector<double> big = pseudo_random(40, 3000, 3100, 7);
  Tensor b = from_vector<double>(big, {40}).to(DType::Float32);
  expect_close(values_of(softmax(b, 0)), reference(values_of(b), {40}, 0, false), 2e-6, 1e-12, "big row");
  // -inf entries get probability 0 and log-probability -inf.
  Tensor m = from_vector<float>({-INFINITY, 0, 1, -INFINITY}, {4});
  Tensor p = softmax(m, 0);
  EXPECT_EQ(p.at<float>({0}), 0.0f);
  EXPECT_NEAR(p.at<float>({2}), std::exp(1.0) / (1 + std::exp(1.0)), 1e-6);
  EXPECT_EQ(log_softmax(m, 0).at<float>({3}), -INFINITY);
  // A row of all -inf has no distribution: NaN, as torch.
  EXPECT_TRUE(std::isnan(softmax(from_vector<float>({-INFINITY, -INFINITY}), 0).at<float>({0})));
}

TEST(Softmax, LargeTensorsSplitRowsOverThreads) {
  // (512, 4096) rows and a single 100000-element row.
  Tensor x = from_vector<double>(pseudo_random(512 * 4096, -10, 10, 8), {512, 4096}).to(DType::Float32);
  int previous = get_num_threads();
  set_num_threads(1);
  Tensor one = softmax(x, 1);
  set_num_threads(2);
  Tensor two = softmax(x, 1);
  set_num_threads(previous);
  EXPECT_TRUE(equal(one, two));
  expect_close(values_of(two), reference(values_of(x), {512, 4096}, 1, false), 5e-6, 1e-12, "(512, 4096)");
  Tensor row = from_vector<double>(pseudo_random(100000, -10, 10, 9), {1, 100000}).to(DType::Float32);
  expect_close(values_of(log_softmax(row, -1)), reference(values_of(row), {1, 100000}, 1, true), 1e-5, 1e-5,
               "(1, 100000)");
}

TEST(Softmax, ZeroDimAndEmpty) {
  EXPECT_EQ(softmax(scalar_tensor(3.0, DType::Float32), 0).item<float>(), 1.0f);
  EXPECT_EQ(log_softmax(scalar_tensor(3.0, DType::Float64), -1).item<double>(), 0.0);
  EXPECT_EQ(softmax(Tensor::empty({0, 5}), 1).shape(), (Shape{0, 5}));
}

TEST(Softmax, LogSumExpIsStable) {
  Tensor big = from_vector<float>({1000, 1000, 999, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0, 1}, {3, 3});
  Tensor r = logsumexp(big, {1});
  EXPECT_NEAR(r.at<float>({0}), 1000 + std::log(2 + std::exp(-1.0)), 1e-3);
  EXPECT_EQ(r.at<float>({1}), -kInf);  // all -inf: -inf, not NaN
  EXPECT_NEAR(r.at<float>({2}), std::log(1 + std::exp(1.0)), 1e-6);
  Tensor with_inf = from_vector<double>({1, kInf, 3});
  EXPECT_EQ(logsumexp(with_inf, {0}).item<double>(), kInf);
  EXPECT_TRUE(std::isnan(logsumexp(from_vector<double>({1, kNaN}), {0}).item<double>()));
  // Against a float64 reference over two dims of a permuted view.
  Tensor x = from_vector<double>(pseudo_random(60, -50, 50), {3, 4, 5}).permute({2, 0, 1});  // (5, 3, 4)
  std::vector<double> xv = values_of(x);
  Tensor got = logsumexp(x, {0, 2}, true);
  EXPECT_EQ(got.shape(), (Shape{1, 3, 1}));
  for (int j = 0; j < 3; ++j) {
    double m = -kInf, s = 0;
    for (int i = 0; i < 5; ++i)
      for (int k = 0; k < 4; ++k) m = std::max(m, xv[(i * 3 + j) * 4 + k]);
    for (int i = 0; i < 5; ++i)
      for (int k = 0; k < 4; ++k) s += std::exp(xv[(i * 3 + j) * 4 + k] - m);
    EXPECT_NEAR(got.at<double>({0, j, 0}), m + std::log(s), 1e-12);
  }
  EXPECT_EQ(logsumexp(Tensor::empty({2, 0}), {1}).at<float>({1}), -kInf);
}

struct FloatKernels {
  const char* name;
  void (*row)(float*, const float*, int64_t, bool);
  void (*exp)(float*, const float*, int64_t);
};

// The SIMD kernel sets this CPU can run.
std::vector<FloatKernels> simd_kernels() {
  std::vector<FloatKernels> sets;
  if (cpu::simd_level() >= cpu::SimdLevel::Avx2) sets.push_back({"avx2", cpu::softmax_row_f32_avx2, cpu::exp_f32_avx2});
  if (cpu::simd_level() >= cpu::SimdLevel::Avx512) {
    sets.push_back({"avx512", cpu::softmax_row_f32_avx512, cpu::exp_f32_avx512});
  }
  return sets;
}

TEST(Softmax, SimdRowMatchesScalarReference) {
  if (simd_kernels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (const FloatKernels& k : simd_kernels()) {
    for (int64_t n = 1; n <= 70; ++n) {
      std::vector<double> v = pseudo_random(n, -30, 30, n);
      v[n / 2] = -INFINITY;
      std::vector<float> in(v.begin(), v.end()), simd(n), scalar(n);
      for (bool log : {false, true}) {
        k.row(simd.data(), in.data(), n, log);
        cpu::softmax_row_f32_scalar(scalar.data(), in.data(), n, log);
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(scalar[i])) {
            EXPECT_TRUE(std::isnan(simd[i])) << k.name << " " << n << " " << i;  // a row of one -inf
          } else if (std::isinf(scalar[i])) {
            EXPECT_EQ(simd[i], scalar[i]) << k.name << " " << n << " " << i;
          } else {
            EXPECT_NEAR(simd[i], scalar[i], 1e-6 + 1e-6 * std::abs(scalar[i]))
                << k.name << " " << n << " " << i << " log " << log;
          }
        }
      }
    }
  }
}

TEST(Softmax, SimdExpMatchesStdExp) {
  if (simd_kernels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::vector<float> in;
  for (double x = -87.0; x <= 88.0; x += 0.37) in.push_back(static_cast<float>(x));
  in.insert(in.end(), {0.0f, -0.0f, 1e-8f, -1e-8f, -INFINITY, -100.0f, 100.0f, INFINITY, NAN});
  for (const FloatKernels& k : simd_kernels()) {
    std::vector<float> out(in.size());
    k.exp(out.data(), in.data(), static_cast<int64_t>(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      double want = std::exp(static_cast<double>(in[i]));
      if (std::isnan(in[i])) {
        EXPECT_TRUE(std::isnan(out[i])) << k.name;
      } else if (in[i] < -87.33f) {
        // Below FLT_MIN: flushed to 0 by the vector lanes, a denormal from
        // std::exp in the scalar tail.
        EXPECT_GE(out[i], 0.0f) << k.name << " " << in[i];
        EXPECT_LT(out[i], std::numeric_limits<float>::min()) << k.name << " " << in[i];
      } else if (std::isinf(want) || want > 3.4e38) {
        EXPECT_EQ(out[i], INFINITY) << k.name << " " << in[i];
      } else {
        EXPECT_NEAR(out[i], want, 4e-7 * want) << k.name << " " << in[i];  // a few ulp
      }
    }
  }
}

TEST(Softmax, ErrorMessages) {
  expect_error([] { softmax(iota_tensor({2, 3}), 1); }, "softmax: expected a floating point tensor, got int32");
  expect_error([] { log_softmax(iota_tensor({2, 3}), 1); },
               "log_softmax: expected a floating point tensor, got int32");
  expect_error([] { softmax(Tensor::empty({2, 3}), 2); }, "softmax: dim 2 is out of range for a tensor of 2 dimensions");
  expect_error([] { log_softmax(Tensor::empty({2, 3}), -3); },
               "log_softmax: dim -3 is out of range for a tensor of 2 dimensions");
}

}  // namespace
}  // namespace kiln
