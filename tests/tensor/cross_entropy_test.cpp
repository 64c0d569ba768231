// The fused class-index cross entropy (tensor/cross_entropy.h, Note [Fused
// cross entropy]) against float64 loops written from the formulas, with and
// without class weights, label smoothing and ignored rows, for every
// floating dtype; and its errors.
#include "tensor/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tensor/factory.h"
#include "tests/tensor/test_util.h"

#ifdef KILN_WITH_CUDA
#include "tests/tensor/cuda_compare.h"
#endif

namespace kiln {
namespace {

constexpr int64_t kRows = 7, kClasses = 5, kIgnore = -100;
// Row 2 and row 5 are ignored.
const std::vector<int64_t> kTargets = {3, 0, kIgnore, 4, 1, kIgnore, 2};

struct Reference {
  std::vector<double> losses, target_weights, grad;  // grad: (rows, classes)
};

// The formulas of Note [Fused cross entropy] in float64; u: the gradient
// reaching each row's loss.
Reference reference(const std::vector<double>& x, const std::vector<double>& w, double s,
                    const std::vector<double>& u) {
  Reference r{std::vector<double>(kRows, 0.0), std::vector<double>(kRows, 0.0),
              std::vector<double>(kRows * kClasses, 0.0)};
  double weight_sum = 0;
  for (int64_t c = 0; c < kClasses; ++c) weight_sum += w.empty() ? 1.0 : w[c];
  for (int64_t n = 0; n < kRows; ++n) {
    const int64_t t = kTargets[n];
    if (t == kIgnore) continue;
    const double* row = x.data() + n * kClasses;
    double max = row[0];
    for (int64_t c = 1; c < kClasses; ++c) max = std::max(max, row[c]);
    double sum = 0;
    for (int64_t c = 0; c < kClasses; ++c) sum += std::exp(row[c] - max);
    auto logp = [&](int64_t c) { return row[c] - max - std::log(sum); };
    auto wc = [&](int64_t c) { return w.empty() ? 1.0 : w[c]; };
    double smooth = 0;
    for (int64_t c = 0; c < kClasses; ++c) smooth += wc(c) * -logp(c);
    r.losses[n] = (1 - s) * wc(t) * -logp(t) + s / kClasses * smooth;
    r.target_weights[n] = wc(t);
    const double a = (1 - s) * wc(t) + s / kClasses * weight_sum;
    for (int64_t j = 0; j < kClasses; ++j) {
      const double p = std::exp(logp(j));
      r.grad[n * kClasses + j] = u[n] * (p * a - (j == t ? (1 - s) * wc(t) : 0.0) - s / kClasses * wc(j));
    }
  }
  return r;
}

void expect_near_all(const Tensor& got, const std::vector<double>& expected, double tol, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(expected.size())) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    EXPECT_NEAR(flat_value(got, i), expected[i], tol * (1 + std::abs(expected[i]))) << what << " element " << i;
  }
}

IndexErrorMessage message_for(const std::string& op) {
  return [op](int64_t v) { return op + ": target " + std::to_string(v) + " is out of range"; };
}

TEST(CrossEntropyRows, MatchesTheFormulasForEveryOptionAndDtype) {
  const std::vector<double> x = pseudo_random(kRows * kClasses, -4, 4, 11);
  const std::vector<double> w = pseudo_random(kClasses, 0.5, 2, 12);
  const std::vector<double> g = pseudo_random(kRows, -1, 1, 13);
  const Tensor target = from_vector<int64_t>(kTargets, {kRows});
  for (DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
    const double tol = dtype == DType::Float64 ? 1e-12 : dtype == DType::Float32 ? 1e-5
                       : dtype == DType::Float16                           ? 4e-3
                                                                           : 3e-2;
    // The 16-bit dtypes see the inputs rounded: the reference takes the same values.
    const Tensor xt = from_vector(x, {kRows, kClasses}).to(dtype), wt = from_vector(w, {kClasses}).to(dtype);
    std::vector<double> xr(x.size()), wr(w.size());
    for (size_t i = 0; i < x.size(); ++i) xr[i] = flat_value(xt, static_cast<int64_t>(i));
    for (size_t i = 0; i < w.size(); ++i) wr[i] = flat_value(wt, static_cast<int64_t>(i));
    for (bool weighted : {false, true}) {
      for (double s : {0.0, 0.1}) {
        const std::string what = std::string(dtype_name(dtype)) + (weighted ? " weighted" : "") +
                                 " smoothing " + std::to_string(s);
        const Tensor weight = weighted ? wt : Tensor();
        ops::CrossEntropyRows rows =
            ops::cross_entropy_rows(xt, target, weight, kIgnore, s, message_for("cross_entropy_rows"));
        EXPECT_EQ(rows.losses.dtype(), dtype);
        // Per-row upstream gradients (reduction none).
        const Reference per_row = reference(xr, weighted ? wr : std::vector<double>{}, s, g);
        expect_near_all(rows.losses, per_row.losses, tol, what + " losses");
        expect_near_all(rows.target_weights, per_row.target_weights, tol, what + " target weights");
        const Tensor grad =
            ops::cross_entropy_rows_backward(from_vector(g, {kRows}).to(dtype), Tensor(), xt, target, weight, kIgnore, s);
        expect_near_all(grad, per_row.grad, tol, what + " grad (per row)");
        // One upstream gradient divided by a denominator (reduction mean).
        const Tensor one = full({}, 0.75, dtype), denominator = full({}, 3.0, dtype);
        const Reference mean = reference(xr, weighted ? wr : std::vector<double>{}, s, std::vector<double>(kRows, 0.25));
        expect_near_all(ops::cross_entropy_rows_backward(one, denominator, xt, target, weight, kIgnore, s), mean.grad,
                        tol, what + " grad (mean)");
      }
    }
  }
}

TEST(CrossEntropyRows, ARowOfHugeLogitsStaysFinite) {
  // The max is subtracted before exp: logits of 1e4 would overflow exp.
  const Tensor x = from_vector<double>({1e4, 0, -1e4}, {1, 3}).to(DType::Float32);
  ops::CrossEntropyRows rows =
      ops::cross_entropy_rows(x, from_vector<int64_t>({1}, {1}), Tensor(), kIgnore, 0.0, message_for("ce"));
  EXPECT_NEAR(flat_value(rows.losses, 0), 1e4, 1e-2);
  const Tensor grad = ops::cross_entropy_rows_backward(full({}, 1.0), Tensor(), x, from_vector<int64_t>({1}, {1}),
                                                       Tensor(), kIgnore, 0.0);
  EXPECT_NEAR(flat_value(grad, 0), 1.0, 1e-6);  // p - onehot: (1, 0, 0) - (0, 1, 0)
  EXPECT_NEAR(flat_value(grad, 1), -1.0, 1e-6);
  EXPECT_NEAR(flat_value(grad, 2), 0.0, 1e-6);
}

TEST(CrossEntropyRows, BadOperandsAreErrors) {
  const Tensor x = zeros({2, 3});
  expect_error([&] { ops::cross_entropy_rows(x, from_vector<int64_t>({0, 3}, {2}), Tensor(), kIgnore, 0.0,
                                             message_for("cross_entropy")); },
               "cross_entropy: target 3 is out of range");
  expect_error([&] { ops::cross_entropy_rows(x, from_vector<int64_t>({-1, 0}, {2}), Tensor(), kIgnore, 0.0,
                                             message_for("cross_entropy")); },
               "cross_entropy: target -1 is out of range");
  // ignore_index itself is no error, even outside [0, C).
  EXPECT_NO_THROW(ops::cross_entropy_rows(x, from_vector<int64_t>({kIgnore, 2}, {2}), Tensor(), kIgnore, 0.0,
                                          message_for("cross_entropy")));
  expect_error([&] { ops::cross_entropy_rows(x, zeros({2}), Tensor(), kIgnore, 0.0, message_for("ce")); },
               "cross_entropy_rows: expected int64 targets of shape [2], got float32 [2]");
  expect_error([&] { ops::cross_entropy_rows(x, from_vector<int64_t>({0, 1}, {2}), zeros({2}), kIgnore, 0.0,
                                             message_for("ce")); },
               "cross_entropy_rows: expected class weights float32 [3] on cpu, got float32 [2] on cpu");
  expect_error([&] { ops::cross_entropy_rows(x, from_vector<int64_t>({0, 1}, {2}), Tensor(), kIgnore, 1.5,
                                             message_for("ce")); },
               "cross_entropy_rows: smoothing must be in [0, 1], got 1.5");
  expect_error([&] { ops::cross_entropy_rows_backward(zeros({3}), Tensor(), x, from_vector<int64_t>({0, 1}, {2}),
                                                      Tensor(), kIgnore, 0.0); },
               "cross_entropy_rows_backward: expected grad_out float32 [] or [2] on cpu, got float32 [3] on cpu");
}

#ifdef KILN_WITH_CUDA
// The CUDA kernels against the CPU's on shapes that take many blocks and
// rows wider than a warp (a lane then walks several classes), one class, and
// every floating dtype.
TEST(CudaCrossEntropyRows, MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const Device gpu = cuda_device(0);
  uint64_t seed = 50;
  for (auto [rows, classes] : {std::pair<int64_t, int64_t>{1000, 100}, {300, 37}, {70, 1}, {5, 2000}}) {
    for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
      const double tol = cuda_compare::tolerance_for(dtype);
      std::vector<int64_t> targets(static_cast<size_t>(rows));
      for (int64_t n = 0; n < rows; ++n) targets[n] = n % 7 == 3 ? kIgnore : (n * 31 + 5) % classes;
      const Tensor target = from_vector<int64_t>(targets, {rows});
      const Tensor x = cuda_compare::random_tensor({rows, classes}, dtype, seed++, -6, 6);
      const Tensor weight = cuda_compare::random_tensor({classes}, dtype, seed++, 0.5, 2);
      const Tensor go = cuda_compare::random_tensor({rows}, dtype, seed++);
      for (bool weighted : {false, true}) {
        for (double s : {0.0, 0.1}) {
          const std::string what = detail::str(dtype_name(dtype), " ", rows, "x", classes, weighted ? " weighted" : "",
                                               " smoothing ", s);
          const Tensor w = weighted ? weight : Tensor(), w_gpu = weighted ? weight.to(gpu) : Tensor();
          const ops::CrossEntropyRows cpu = ops::cross_entropy_rows(x, target, w, kIgnore, s, message_for("ce"));
          const ops::CrossEntropyRows dev =
              ops::cross_entropy_rows(x.to(gpu), target.to(gpu), w_gpu, kIgnore, s, message_for("ce"));
          cuda_compare::expect_close(cpu.losses, dev.losses, tol, tol, what + " losses");
          cuda_compare::expect_close(cpu.target_weights, dev.target_weights, 0, 0, what + " target weights");
          cuda_compare::expect_close(
              ops::cross_entropy_rows_backward(go, Tensor(), x, target, w, kIgnore, s),
              ops::cross_entropy_rows_backward(go.to(gpu), Tensor(), x.to(gpu), target.to(gpu), w_gpu, kIgnore, s),
              tol, tol, what + " grad");
        }
      }
    }
  }
}

TEST(CudaCrossEntropyRows, ABadTargetIsReportedAtTheNextWait) {
  SKIP_WITHOUT_GPU();
  const Device gpu = cuda_device(0);
  ops::CrossEntropyRows rows;
  ASSERT_NO_THROW(rows = ops::cross_entropy_rows(zeros({2, 3}).to(gpu), from_vector<int64_t>({0, 3}, {2}).to(gpu),
                                                 Tensor(), kIgnore, 0.0, message_for("cross_entropy")));
  expect_error([&] { (void)rows.losses.cpu(); }, "cross_entropy: target 3 is out of range");
}
#endif  // KILN_WITH_CUDA

}  // namespace
}  // namespace kiln
