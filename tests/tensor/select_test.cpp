// tril, triu, masked_fill, topk and multinomial against plain reference
// loops written here, torch's rules for ties and NaN, every error path, and
// the CUDA kernels against the CPU's (skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "tensor/ops.h"
#include "tensor/philox.h"
#include "tests/tensor/test_util.h"

#ifdef KILN_WITH_CUDA
#include "tests/tensor/cuda_test_util.h"
#endif

namespace kiln {

using namespace kiln::ops;
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> values_of(const Tensor& t) {
  Tensor c = t.to(DType::Float64, kCPU).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

std::vector<int64_t> indices_of(const Tensor& t) {
  Tensor c = t.to(kCPU).contiguous();
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

// Row-major random values in [lo, hi) of `shape`, converted to dtype.
Tensor random_values(const Shape& shape, DType dtype, uint64_t seed, double lo = -3, double hi = 3) {
  return from_vector(pseudo_random(shape_numel(shape, "random_values"), lo, hi, seed), shape).to(dtype);
}

// Writes `value` into column j of the 2-d CPU tensor t, or into entry (i, j).
void set_column(const Tensor& t, int64_t j, double value) {
  Tensor column = t.select(1, j);
  fill_(column, value);
}
void set_entry(const Tensor& t, int64_t i, int64_t j, double value) {
  Tensor entry = t.select(0, i).select(0, j);
  fill_(entry, value);
}

// Same values, NaN where NaN (NaN == NaN here).
void expect_same_values(const std::vector<double>& expected, const std::vector<double>& actual,
                        const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << what << " at " << i << ": got " << actual[i];
    } else {
      EXPECT_EQ(expected[i], actual[i]) << what << " at " << i;
    }
  }
}

// ---- tril / triu ----

// x (B, M, N) row-major values with entries outside the triangle zeroed.
std::vector<double> triangle_reference(const std::vector<double>& x, int64_t batch, int64_t rows, int64_t cols,
                                       int64_t diagonal, bool lower) {
  std::vector<double> out(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t at = (b * rows + i) * cols + j;
        const bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
        out[at] = keep ? x[at] : 0.0;
      }
    }
  }
  return out;
}

TEST(Tril, MatchesTorchOnSmallExamples) {
  Tensor x = ones({3, 3});
  EXPECT_EQ(values_of(tril(x)), (std::vector<double>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(values_of(triu(x)), (std::vector<double>{1, 1, 1, 0, 1, 1, 0, 0, 1}));
  EXPECT_EQ(values_of(triu(x, 1)), (std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(values_of(tril(x, -1)), (std::vector<double>{0, 0, 0, 1, 0, 0, 1, 1, 0}));
  // A wide matrix: tril(ones(2, 4), 1) keeps j <= i + 1.
  EXPECT_EQ(values_of(tril(ones({2, 4}), 1)), (std::vector<double>{1, 1, 0, 0, 1, 1, 1, 0}));
}

TEST(Tril, EveryDiagonalOfBatchedMatricesMatchesTheReference) {
  const int64_t batch = 6, rows = 4, cols = 5;
  Tensor x = random_values({2, 3, rows, cols}, DType::Float32, 1);
  const std::vector<double> xs = values_of(x);
  for (int64_t diagonal = -rows - 2; diagonal <= cols + 2; ++diagonal) {
    for (bool lower : {true, false}) {
      Tensor out = lower ? tril(x, diagonal) : triu(x, diagonal);
      EXPECT_EQ(out.shape(), x.shape());
      EXPECT_EQ(out.dtype(), DType::Float32);
      EXPECT_EQ(values_of(out), triangle_reference(xs, batch, rows, cols, diagonal, lower))
          << (lower ? "tril" : "triu") << " diagonal " << diagonal;
    }
  }
  // Extreme diagonals keep everything or nothing, without overflow.
  EXPECT_EQ(values_of(tril(x, std::numeric_limits<int64_t>::max())), xs);
  EXPECT_EQ(values_of(triu(x, std::numeric_limits<int64_t>::max())), std::vector<double>(xs.size(), 0.0));
  EXPECT_EQ(values_of(triu(x, std::numeric_limits<int64_t>::min())), xs);
}

TEST(Tril, KeepsTheDtypeAndReadsAnyLayout) {
  // A transposed (non-contiguous) int64 input and a bool one.
  Tensor base = random_values({5, 3}, DType::Float64, 2, -50, 50).to(DType::Int64);
  Tensor x = base.t();  // (3, 5)
  ASSERT_FALSE(x.is_contiguous());
  Tensor out = triu(x, -1);
  EXPECT_EQ(out.dtype(), DType::Int64);
  EXPECT_EQ(values_of(out), triangle_reference(values_of(x), 1, 3, 5, -1, false));
  Tensor flags = ones({2, 2}, DType::Bool);
  Tensor lower = tril(flags);
  EXPECT_EQ(lower.dtype(), DType::Bool);
  EXPECT_EQ(values_of(lower), (std::vector<double>{1, 0, 1, 1}));
  // Empty matrices give empty results of the same shape.
  EXPECT_EQ(tril(zeros({2, 0, 3})).shape(), (Shape{2, 0, 3}));
}

TEST(Tril, RejectsFewerThanTwoDims) {
  expect_error([] { tril(ones({4})); }, "tril: expected a tensor of at least 2 dims");
  expect_error([] { triu(scalar_tensor(1.0)); }, "triu: expected a tensor of at least 2 dims");
}

// ---- masked_fill ----

TEST(MaskedFill, FillsWhereTheBroadcastMaskIsTrue) {
  Tensor x = random_values({3, 4}, DType::Float32, 3);
  Tensor mask = from_vector<bool>({true, false, false, true}, {1, 4});
  Tensor out = masked_fill(x, mask, -kInf);
  EXPECT_EQ(out.shape(), x.shape());
  std::vector<double> expected = values_of(x);
  for (int64_t i = 0; i < 3; ++i) expected[i * 4] = expected[i * 4 + 3] = -kInf;
  EXPECT_EQ(values_of(out), expected);
  // x itself is unchanged.
  EXPECT_NE(values_of(x)[0], -kInf);
}

TEST(MaskedFill, TheResultTakesTheBroadcastShapeOfXAndMask) {
  Tensor x = from_vector<int64_t>({1, 2, 3}, {3});
  Tensor mask = from_vector<bool>({true, false, false, false, true, false}, {2, 3});
  Tensor out = masked_fill(x, mask, 7);
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(out.dtype(), DType::Int64);
  EXPECT_EQ(values_of(out), (std::vector<double>{7, 2, 3, 1, 7, 3}));
}

TEST(MaskedFill, StoresTheValueInXsDtype) {
  Tensor h = zeros({2}, DType::Float16);
  EXPECT_EQ(values_of(masked_fill(h, ones({2}, DType::Bool), 1e10)), (std::vector<double>{kInf, kInf}));
  EXPECT_TRUE(std::isnan(values_of(masked_fill(h, ones({2}, DType::Bool), kNaN))[0]));
  Tensor b = zeros({2}, DType::Bool);
  Tensor filled = masked_fill(b, from_vector<bool>({false, true}), true);
  EXPECT_EQ(filled.dtype(), DType::Bool);
  EXPECT_EQ(values_of(filled), (std::vector<double>{0, 1}));
  EXPECT_EQ(values_of(masked_fill(zeros({1}, DType::UInt8), ones({1}, DType::Bool), 255.0)),
            (std::vector<double>{255}));
}

TEST(MaskedFill, InPlaceWritesXAndBumpsItsVersion) {
  Tensor x = random_values({2, 3}, DType::Float64, 4);
  const std::vector<double> before = values_of(x);
  const uint64_t version = x.version();
  Tensor mask = from_vector<bool>({false, true, false}, {3});
  Tensor& same = masked_fill_(x, mask, 0.5);
  EXPECT_TRUE(same.is_same(x));
  EXPECT_GT(x.version(), version);
  std::vector<double> expected = before;
  expected[1] = expected[4] = 0.5;
  EXPECT_EQ(values_of(x), expected);
  // Through a non-contiguous view: only the view's elements change.
  Tensor base = zeros({3, 2});
  Tensor view = base.t();  // (2, 3)
  masked_fill_(view, from_vector<bool>({true, false, true, false, false, true}, {2, 3}), 1.0);
  EXPECT_EQ(values_of(base), (std::vector<double>{1, 0, 0, 0, 1, 1}));
}

TEST(MaskedFill, InPlaceWithAMaskInXsOwnMemoryReadsTheMaskBeforeWriting) {
  // mask = x.t(): a different layout of the same memory, read whole before
  // the writes (x[i][j] = !x[j][i] would otherwise see earlier writes).
  Tensor x = from_vector<bool>({true, false, false, true, true, false, false, false, true}, {3, 3});
  Tensor expected = masked_fill(x, x.t(), false);
  Tensor mask = x.t();
  masked_fill_(x, mask, false);
  EXPECT_EQ(values_of(x), values_of(expected));
}

TEST(MaskedFill, RejectsBadArguments) {
  Tensor x = zeros({2, 3});
  expect_error([&] { masked_fill(x, ones({2, 3}), 1.0); }, "masked_fill: expected a bool mask, got float32");
  expect_error([&] { masked_fill(x, ones({4}, DType::Bool), 1.0); }, "masked_fill: shapes [2, 3] and [4]");
  expect_error([&] { masked_fill(zeros({2}, DType::Int64), ones({2}, DType::Bool), 0.5); },
               "masked_fill: value 0.5 cannot be stored in a tensor of int64");
  expect_error([&] { masked_fill(zeros({2}, DType::UInt8), ones({2}, DType::Bool), 256); },
               "masked_fill: value 256 cannot be stored in a tensor of uint8");
  expect_error([&] { masked_fill(zeros({2}, DType::Int32), ones({2}, DType::Bool), -kInf); },
               "cannot be stored in a tensor of int32");
  expect_error([&] { masked_fill(zeros({2}, DType::Bool), ones({2}, DType::Bool), 2); },
               "masked_fill: value 2 cannot be stored in a tensor of bool");
  expect_error([&] { masked_fill(tensor_claiming_device(cuda_device(0), 4), ones({4}, DType::Bool), 1.0); },
               "masked_fill");
  // In place: the mask must broadcast to x, and x must not be expanded.
  expect_error(
      [&] {
        masked_fill_(x, ones({4, 2, 3}, DType::Bool), 1.0);
      },
      "masked_fill_: a mask of shape [4, 2, 3] does not broadcast to the shape of x, [2, 3]");
  Tensor expanded = zeros({3}).expand({2, 3});
  expect_error([&] { masked_fill_(expanded, ones({2, 3}, DType::Bool), 1.0); }, "masked_fill_");
}

// ---- topk ----

// The plain reference: k times, the best entry not taken yet (NaN above
// every number, the lower index among equals), per row of (rows, n).
void topk_reference(const std::vector<double>& x, int64_t rows, int64_t n, int64_t k, bool largest,
                    std::vector<double>& values, std::vector<int64_t>& indices) {
  values.assign(rows * k, 0);
  indices.assign(rows * k, 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<bool> taken(n, false);
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t i = 0; i < n; ++i) {
        if (taken[i]) continue;
        if (best < 0) {
          best = i;
          continue;
        }
        const double v = x[r * n + i], b = x[r * n + best];
        bool better;
        if (std::isnan(v) || std::isnan(b)) {
          better = largest ? std::isnan(v) && !std::isnan(b) : std::isnan(b) && !std::isnan(v);
        } else {
          better = largest ? v > b : v < b;
        }
        if (better) best = i;
      }
      taken[best] = true;
      values[r * k + j] = x[r * n + best];
      indices[r * k + j] = best;
    }
  }
}

void check_topk_rows(const Tensor& x, int64_t k, bool largest, const std::string& what) {
  const int64_t rows = x.size(0), n = x.size(1);
  TopK got = topk(x, k, -1, largest);
  ASSERT_EQ(got.values.shape(), (Shape{rows, k})) << what;
  ASSERT_EQ(got.values.dtype(), x.dtype()) << what;
  ASSERT_EQ(got.indices.dtype(), DType::Int64) << what;
  std::vector<double> values;
  std::vector<int64_t> indices;
  topk_reference(values_of(x), rows, n, k, largest, values, indices);
  expect_same_values(values, values_of(got.values), what);
  EXPECT_EQ(indices, indices_of(got.indices)) << what;
}

TEST(TopK, MatchesTheReferenceForEveryKAndDtype) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
                      DType::Int8, DType::UInt8}) {
    // Small integer-valued ranges give many ties.
    Tensor x = random_values({5, 17}, DType::Float64, 5, 0, 8).to(DType::Int64).to(dtype);
    for (int64_t k = 0; k <= 17; ++k) {
      for (bool largest : {true, false}) {
        check_topk_rows(x, k, largest, detail::str(dtype, " k ", k, largest ? " largest" : " smallest"));
      }
    }
  }
  Tensor wide = random_values({3, 5000}, DType::Float32, 6);
  for (int64_t k : {1, 7, 200, 4999, 5000}) check_topk_rows(wide, k, true, detail::str("wide k ", k));
  check_topk_rows(wide, 50, false, "wide smallest");
}

TEST(TopK, TiesKeepTheLowerIndexFirst) {
  Tensor x = from_vector<float>({1, 3, 3, 2, 3}, {5});
  TopK best = topk(x, 2);
  EXPECT_EQ(values_of(best.values), (std::vector<double>{3, 3}));
  EXPECT_EQ(indices_of(best.indices), (std::vector<int64_t>{1, 2}));
  TopK least = topk(x, 3, 0, /*largest=*/false);
  EXPECT_EQ(values_of(least.values), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(indices_of(least.indices), (std::vector<int64_t>{0, 3, 1}));
  // -0 equals 0: the lower index first, and each keeps its own sign.
  Tensor zeros_ = from_vector<double>({0.0, -0.0, -0.0, 0.0}, {4});
  TopK z = topk(zeros_, 4);
  EXPECT_EQ(indices_of(z.indices), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(std::signbit(values_of(z.values)[1]));
}

TEST(TopK, NaNIsLargerThanEveryNumber) {
  Tensor x = from_vector<float>({1, NAN, INFINITY, NAN, -INFINITY}, {5});
  TopK best = topk(x, 3);
  expect_same_values({kNaN, kNaN, kInf}, values_of(best.values), "largest");
  EXPECT_EQ(indices_of(best.indices), (std::vector<int64_t>{1, 3, 2}));
  TopK least = topk(x, 5, -1, /*largest=*/false);
  expect_same_values({-kInf, 1, kInf, kNaN, kNaN}, values_of(least.values), "smallest");
  EXPECT_EQ(indices_of(least.indices), (std::vector<int64_t>{4, 0, 2, 1, 3}));
}

TEST(TopK, AlongAnyDimOfAnyLayout) {
  // x (4, 6, 3) from a permuted tensor; topk along dim 1 is topk of the
  // rows of x.transpose(1, 2) laid out contiguously.
  Tensor x = random_values({6, 3, 4}, DType::Float32, 7).permute({2, 0, 1});
  ASSERT_FALSE(x.is_contiguous());
  TopK got = topk(x, 2, 1, /*largest=*/false);
  EXPECT_EQ(got.values.shape(), (Shape{4, 2, 3}));
  Tensor rows = x.transpose(1, 2).contiguous().view({12, 6});
  std::vector<double> values;
  std::vector<int64_t> indices;
  topk_reference(values_of(rows), 12, 6, 2, false, values, indices);
  expect_same_values(values, values_of(got.values.transpose(1, 2).contiguous()), "dim 1 values");
  EXPECT_EQ(indices, indices_of(got.indices.transpose(1, 2).contiguous()));
  // A 0-dim tensor is one entry at index 0.
  TopK one = topk(scalar_tensor(2.5), 1);
  EXPECT_EQ(one.values.dim(), 0);
  EXPECT_EQ(one.values.item<double>(), 2.5);
  EXPECT_EQ(one.indices.item<int64_t>(), 0);
}

TEST(TopK, RejectsBadArguments) {
  Tensor x = zeros({2, 3});
  expect_error([&] { topk(x, 4); }, "topk: k 4 is out of range for dim 1 of size 3");
  expect_error([&] { topk(x, -1); }, "topk: k -1 is out of range for dim 1 of size 3");
  expect_error([&] { topk(x, 1, 2); }, "topk: dim 2 is out of range");
  expect_error([&] { topk(zeros({3}, DType::Bool), 1); }, "topk: expected a numeric tensor, got bool");
  expect_error([&] { topk(scalar_tensor(1.0), 2); }, "topk: k 2 is out of range for dim 0 of size 1");
}

// ---- multinomial ----

// The plain reference of Note [Multinomial draws] for well-conditioned
// rows: one running sum from the left (segments change only the rounding,
// which random weights never hit), the same Philox uniforms.
std::vector<int64_t> multinomial_reference(const std::vector<double>& p, int64_t rows, int64_t n, int64_t num_samples,
                                           bool replacement, uint64_t seed, uint64_t offset) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> w(p.begin() + r * n, p.begin() + (r + 1) * n);
    for (int64_t j = 0; j < num_samples; ++j) {
      const philox::Block b = philox::element_block(seed, offset, r * num_samples + j);
      const double u = philox::uniform53(b.w[0], b.w[1]);
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      double running = 0;
      int64_t pick = -1;
      for (int64_t i = 0; i < n && pick < 0; ++i) {
        running += w[i];
        if (w[i] > 0 && running > u * total) pick = i;
      }
      out.push_back(pick);
      if (!replacement) w[pick] = 0;
    }
  }
  return out;
}

TEST(Multinomial, DrawsMatchThePlainReferenceLoop) {
  for (bool replacement : {true, false}) {
    for (int64_t n : {1, 5, 300, 1000}) {
      const int64_t rows = 7, num_samples = std::min<int64_t>(n, 40);
      Tensor p = random_values({rows, n}, DType::Float64, 8 + n, 0, 1);
      // Zeros that must never be drawn.
      if (n > 1) set_column(p, n - 1, 0.0);
      Generator gen(123);
      gen.set_state(123, 1000);
      Tensor got = multinomial(p, replacement ? 60 : num_samples - (n > 1 ? 1 : 0), replacement, &gen);
      const int64_t drawn = got.size(1);
      EXPECT_EQ(got.dtype(), DType::Int64);
      EXPECT_EQ(gen.offset(), static_cast<uint64_t>(1000 + rows * drawn));
      EXPECT_EQ(indices_of(got), multinomial_reference(values_of(p), rows, n, drawn, replacement, 123, 1000))
          << "n " << n << (replacement ? " with" : " without") << " replacement";
    }
  }
}

TEST(Multinomial, TakesEveryFloatingDtypeAndOneDimensionalRows) {
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32}) {
    Tensor p = random_values({50}, DType::Float64, 9, 0, 1).to(dtype);
    Generator gen(5);
    Tensor got = multinomial(p, 10, true, &gen);
    EXPECT_EQ(got.shape(), (Shape{10}));
    EXPECT_EQ(indices_of(got), multinomial_reference(values_of(p), 1, 50, 10, true, 5, 0)) << dtype;
  }
}

TEST(Multinomial, WithoutReplacementDrawsEveryPositiveEntryOnce) {
  Tensor p = from_vector<double>({0.1, 0.0, 5.0, 1e-12, 0.3, 0.0, 2.0}, {1, 7});
  Generator gen(77);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> drawn = indices_of(multinomial(p, 5, false, &gen));
    EXPECT_EQ(std::set<int64_t>(drawn.begin(), drawn.end()), (std::set<int64_t>{0, 2, 3, 4, 6}));
  }
  // With replacement, zeros are never drawn either.
  for (int64_t i : indices_of(multinomial(p, 2000, true, &gen))) EXPECT_TRUE(i != 1 && i != 5) << i;
}

TEST(Multinomial, TheSameGeneratorStateGivesTheSameSamples) {
  Tensor p = random_values({4, 30}, DType::Float32, 10, 0, 1);
  Generator a(9), b(9);
  Tensor first = multinomial(p, 3, false, &a);
  EXPECT_EQ(indices_of(first), indices_of(multinomial(p, 3, false, &b)));
  // The generator moved on: the next call differs.
  EXPECT_NE(indices_of(first), indices_of(multinomial(p, 3, false, &a)));
  // The default generator is used without one.
  manual_seed(4);
  Tensor x = multinomial(p, 3);
  manual_seed(4);
  EXPECT_EQ(indices_of(x), indices_of(multinomial(p, 3)));
}

TEST(Multinomial, DoesNotDependOnTheThreadCount) {
  const int saved = get_num_threads();
  Tensor p = random_values({3000, 40}, DType::Float32, 11, 0, 1);
  std::vector<std::vector<int64_t>> results;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Generator gen(31);
    results.push_back(indices_of(multinomial(p, 8, false, &gen)));
    Generator gen2(32);
    std::vector<int64_t> with = indices_of(multinomial(p, 8, true, &gen2));
    results.back().insert(results.back().end(), with.begin(), with.end());
  }
  set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

// |count - expected| within 6 standard deviations for each category.
// The seed is fixed, so the counts are too: this passes or fails the same
// way on every run, and 6 sigma leaves room for any seed a change picks.
void expect_frequencies(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t draws,
                        const std::string& what) {
  for (size_t i = 0; i < probs.size(); ++i) {
    const double expected = probs[i] * static_cast<double>(draws);
    const double sigma = std::sqrt(static_cast<double>(draws) * probs[i] * (1 - probs[i]));
    EXPECT_LE(std::abs(static_cast<double>(counts[i]) - expected), 6 * sigma + 1e-9)
        << what << ": category " << i << " drawn " << counts[i] << " times, expected " << expected;
  }
}

TEST(Multinomial, FrequenciesFollowTheProbabilities) {
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4, 0.0};
  const int64_t draws = 200000;
  Generator gen(2024);
  std::vector<int64_t> counts(5, 0);
  for (int64_t i : indices_of(multinomial(from_vector<double>({1, 2, 3, 4, 0}), draws, true, &gen))) ++counts[i];
  expect_frequencies(counts, p, draws, "with replacement");
  EXPECT_EQ(counts[4], 0);

  // Without replacement, two draws from each of many identical rows: the
  // first is p, the second P(j) = sum_i p_i p_j / (1 - p_i) over i != j.
  const int64_t rows = 100000;
  Tensor probs = from_vector<double>({0.1, 0.2, 0.3, 0.4}, {1, 4}).expand({rows, 4});
  std::vector<int64_t> drawn = indices_of(multinomial(probs, 2, false, &gen));
  std::vector<int64_t> first(4, 0), second(4, 0);
  for (int64_t r = 0; r < rows; ++r) {
    ++first[drawn[2 * r]];
    ++second[drawn[2 * r + 1]];
    EXPECT_NE(drawn[2 * r], drawn[2 * r + 1]);
  }
  std::vector<double> second_p(4, 0.0);
  for (int j = 0; j < 4; ++j) {
    for (int i = 0; i < 4; ++i) {
      if (i != j) second_p[j] += p[i] * p[j] / (1 - p[i]);
    }
  }
  expect_frequencies(first, {0.1, 0.2, 0.3, 0.4}, rows, "first draw without replacement");
  expect_frequencies(second, second_p, rows, "second draw without replacement");
}

TEST(Multinomial, RejectsBadProbabilities) {
  expect_error(
      [] {
        multinomial(from_vector<double>({0.5, -0.1, 0.6}), 1);
      },
      "multinomial: probability -0.1 at index 1 of row 0 is not allowed");
  expect_error(
      [] {
        multinomial(from_vector<double>({1, 1, 1, 1, 1, kNaN}, {2, 3}), 1);
      },
      "multinomial: probability nan at index 2 of row 1 is not allowed");
  expect_error(
      [] {
        multinomial(from_vector<float>({1, INFINITY}), 1, true);
      },
      "multinomial: probability inf at index 1 of row 0");
  expect_error(
      [] {
        multinomial(from_vector<double>({1, 1, 0, 0}, {2, 2}), 1);
      },
      "multinomial: the probabilities of row 1 sum to 0");
  expect_error(
      [] {
        multinomial(from_vector<double>({1e308, 1e308}), 1);
      },
      "multinomial: the probabilities of row 0 sum to inf");
  expect_error(
      [] {
        multinomial(from_vector<double>({0.5, 0.0, 0.5}), 3);
      },
      "multinomial: row 0 has 2 positive probabilities, too few to draw 3 samples without replacement");
  // The lowest bad row is named, whatever the threads found first.
  const int saved = get_num_threads();
  set_num_threads(2);
  Tensor many = ones({4000, 10});
  set_entry(many, 3999, 0, -1.0);
  set_entry(many, 2100, 5, -2.0);
  expect_error([&] { multinomial(many, 1); }, "at index 5 of row 2100");
  set_num_threads(saved);
}

TEST(Multinomial, RejectsBadArguments) {
  Tensor p = ones({2, 3});
  expect_error([&] { multinomial(p, 0); }, "multinomial: num_samples must be positive, got 0");
  expect_error([&] { multinomial(p, 4); }, "multinomial: cannot draw 4 samples without replacement from 3 categories");
  expect_error(
      [&] {
        multinomial(ones({2, 2, 2}), 1);
      },
      "multinomial: expected probabilities of shape (n) or (rows, n), got shape [2, 2, 2]");
  expect_error([&] { multinomial(ones({3}, DType::Int64), 1); },
               "multinomial: expected floating point probabilities, got int64");
  expect_error([&] { multinomial(ones({2, 0}), 1, true); }, "have no categories");
  // No rows: nothing drawn, nothing advanced.
  Generator gen(1);
  EXPECT_EQ(multinomial(ones({0, 3}), 2, false, &gen).shape(), (Shape{0, 2}));
  EXPECT_EQ(gen.offset(), uint64_t{0});
}

// ---- CUDA against the CPU ----

#ifdef KILN_WITH_CUDA
using backend_compare::gpu;

TEST(SelectCuda, TrilTriuAndMaskedFillMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = random_values({3, 5, 7}, DType::Float32, 12);
  Tensor xg = x.to(gpu());
  for (int64_t diagonal : {-6, -1, 0, 2, 8}) {
    backend_compare::expect_matches(tril(x, diagonal), tril(xg, diagonal), "tril", 0);
    backend_compare::expect_matches(triu(x, diagonal), triu(xg, diagonal), "triu", 0);
  }
  Tensor mask = gt(random_values({5, 1}, DType::Float32, 13), 0.0);
  backend_compare::expect_matches(masked_fill(x, mask, -kInf), masked_fill(xg, mask.to(gpu()), -kInf), "masked_fill",
                                  0);
  Tensor y = x.clone(), yg = xg.clone();
  masked_fill_(y, mask, 2.0);
  masked_fill_(yg, mask.to(gpu()), 2.0);
  backend_compare::expect_matches(y, yg, "masked_fill_", 0);
}

TEST(SelectCuda, TopKMatchesTheCpuExactly) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t rows, n;
    std::vector<int64_t> ks;
  };
  const std::vector<Case> cases = {
      {1, 1, {0, 1}}, {9, 17, {1, 5, 17}}, {4, 1000, {1, 3, 999}}, {3, 50257, {1, 50, 200, 5000}}, {300, 64, {8, 64}}};
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64, DType::Int32,
                      DType::Int8, DType::UInt8}) {
    for (const Case& c : cases) {
      // Few distinct values (ties) for the narrow types, NaN and -0 for floats.
      Tensor x = random_values({c.rows, c.n}, DType::Float64, 14 + c.n, 0, 100).to(DType::Int64).to(dtype);
      if (is_floating(dtype)) {
        x = random_values({c.rows, c.n}, DType::Float64, 15 + c.n).to(dtype);
        backend_compare::set_flat(x, 3, kNaN);
        backend_compare::set_flat(x, 7, -0.0);
        backend_compare::set_flat(x, 8, 0.0);
        backend_compare::set_flat(x, c.n + 2, kNaN);
      }
      Tensor xg = x.to(gpu());
      for (int64_t k : c.ks) {
        for (bool largest : {true, false}) {
          const std::string what = detail::str(dtype, " (", c.rows, ", ", c.n, ") k ", k, largest ? " largest" : "");
          TopK cpu = topk(x, k, -1, largest);
          TopK dev = topk(xg, k, -1, largest);
          backend_compare::expect_matches(cpu.values, dev.values, what + " values", 0);
          backend_compare::expect_matches(cpu.indices, dev.indices, what + " indices", 0);
        }
      }
    }
  }
  // Along dim 0 of a 3-d tensor.
  Tensor x = random_values({40, 3, 5}, DType::Float32, 16);
  TopK cpu = topk(x, 6, 0);
  TopK dev = topk(x.to(gpu()), 6, 0);
  backend_compare::expect_matches(cpu.values, dev.values, "dim 0 values", 0);
  backend_compare::expect_matches(cpu.indices, dev.indices, "dim 0 indices", 0);
}

TEST(SelectCuda, MultinomialDrawsTheCpusSamples) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (int64_t n : {1, 3, 255, 257, 1000, 50257}) {
      for (bool replacement : {true, false}) {
        Tensor p = random_values({5, n}, DType::Float64, 17 + n, 0, 1).to(dtype);
        if (n > 4) set_column(p, 2, 0.0);
        const int64_t num_samples = replacement ? 100 : std::min<int64_t>(n > 4 ? n - 1 : n, 64);
        Generator a(99), b(99);
        a.set_state(99, 12345);
        b.set_state(99, 12345);
        Tensor cpu = multinomial(p, num_samples, replacement, &a);
        Tensor dev = multinomial(p.to(gpu()), num_samples, replacement, &b);
        backend_compare::expect_matches(cpu, dev, detail::str(dtype, " n ", n, replacement ? " with" : " without"), 0);
        EXPECT_EQ(a.offset(), b.offset());
      }
    }
  }
  // Every entry of a row drawn without replacement: a permutation, the same on both.
  Tensor p = random_values({2, 600}, DType::Float32, 18, 0, 1);
  Generator a(3), b(3);
  backend_compare::expect_matches(multinomial(p, 600, false, &a), multinomial(p.to(gpu()), 600, false, &b),
                                  "permutation", 0);
}

TEST(SelectCuda, MultinomialReportsABadRowWhenTheHostWaits) {
  SKIP_WITHOUT_GPU();
  Tensor p = ones({3, 4});
  set_entry(p, 1, 2, -0.5);
  expect_error([&] { multinomial(p.to(gpu()), 1).cpu(); },
               "multinomial: probability -0.5 at index 2 of row 1 is not allowed");
  expect_error([&] { multinomial(zeros({2, 4}).to(gpu()), 1).cpu(); }, "multinomial: the probabilities of row");
  expect_error(
      [&] {
        multinomial(from_vector<float>({1, 0, 0}).to(gpu()), 2).cpu();
      },
      "has 1 positive probabilities, too few to draw 2 samples without replacement");
  // The stream is usable afterwards.
  EXPECT_EQ(indices_of(multinomial(from_vector<float>({0, 1}).to(gpu()), 1)), (std::vector<int64_t>{1}));
}
#endif  // KILN_WITH_CUDA

}  // namespace
}  // namespace kiln
