// Reductions against float64 references computed here with plain loops.
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

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

template <class T>
Tensor make(const std::vector<double>& values, const Shape& shape) {
  std::vector<T> converted(values.begin(), values.end());
  return from_vector<T>(converted, shape);
}

// The logical values of any tensor, row-major, as doubles.
std::vector<double> values_of(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

enum class Ref { Sum, Prod, Max, Min, Mean };

// Reduces `shape`-shaped values over the dims set in `reduced`, into the
// keepdim shape, in float64.
std::vector<double> reference(const std::vector<double>& x, const Shape& shape, const std::vector<bool>& reduced,
                              Ref op) {
  Shape out_shape = shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d]) out_shape[d] = 1;
  }
  int64_t n_out = 1;
  for (int64_t s : out_shape) n_out *= s;
  double init = op == Ref::Prod ? 1.0 : op == Ref::Max ? -kInf : op == Ref::Min ? kInf : 0.0;
  std::vector<double> out(n_out, init);
  std::vector<int64_t> count(n_out, 0);
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o = o * out_shape[d] + (reduced[d] ? 0 : index[d]);
    double v = x[i];
    double& acc = out[o];
    ++count[o];
    switch (op) {
      case Ref::Sum:
      case Ref::Mean: acc += v; break;
      case Ref::Prod: acc *= v; break;
      case Ref::Max: acc = (std::isnan(v) || v > acc) && !std::isnan(acc) ? v : acc; break;
      case Ref::Min: acc = (std::isnan(v) || v < acc) && !std::isnan(acc) ? v : acc; break;
    }
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  if (op == Ref::Mean) {
    for (int64_t o = 0; o < n_out; ++o) out[o] /= static_cast<double>(count[o]);
  }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": got " << got[i];
      continue;
    }
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " at " << i;
  }
}

// (2, 3, 4, 5) views with the same logical shape and three layouts.
std::vector<std::pair<std::string, Tensor>> layouts(DType dtype, double lo, double hi) {
  Tensor contiguous = make<double>(pseudo_random(120, lo, hi, 1), {2, 3, 4, 5}).to(dtype);
  // (4, 5, 3, 2) permuted to (2, 3, 4, 5): no dim is contiguous.
  Tensor permuted = make<double>(pseudo_random(120, lo, hi, 2), {4, 5, 3, 2}).to(dtype).permute({3, 2, 0, 1});
  // Every dim strided or offset: (3, 6, 4, 7)[0:2, ::2, :, 1:6].
  Tensor base = make<double>(pseudo_random(3 * 6 * 4 * 7, lo, hi, 3), {3, 6, 4, 7}).to(dtype);
  Tensor sliced = base.slice(0, 0, 2).slice(1, 0, 6, 2).slice(3, 1, 6);
  return {{"contiguous", contiguous}, {"permuted", permuted}, {"sliced", sliced}};
}

TEST(Reduce, EverySubsetOfDimsEveryLayout) {
  const Shape shape{2, 3, 4, 5};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    double rtol = dtype == DType::Float32 ? 2e-6 : 1e-13;
    for (auto& [layout, x] : layouts(dtype, 0.5, 1.5)) {
      ASSERT_EQ(x.shape(), shape);
      std::vector<double> xv = values_of(x);
      for (int mask = 0; mask < 16; ++mask) {
        Shape dims;
        std::vector<bool> reduced(4, false);
        for (int d = 0; d < 4; ++d) {
          if (mask & (1 << d)) {
            dims.push_back(d);
            reduced[d] = true;
          }
        }
        if (mask == 0) reduced.assign(4, true);  // empty dims means all
        Shape keep_shape = shape, squeezed;
        for (int d = 0; d < 4; ++d) {
          if (reduced[d]) keep_shape[d] = 1;
          else squeezed.push_back(shape[d]);
        }
        for (bool keepdim : {false, true}) {
          std::string what = layout + " " + std::string(dtype_name(dtype)) + " mask " + std::to_string(mask) +
                             (keepdim ? " keepdim" : "");
          auto check = [&](const Tensor& got, Ref op, const char* name) {
            EXPECT_EQ(got.shape(), keepdim ? keep_shape : squeezed) << name << " " << what;
            EXPECT_EQ(got.dtype(), dtype) << name << " " << what;
            expect_close(values_of(got), reference(xv, shape, reduced, op), rtol, 0, name + (" " + what));
          };
          check(sum(x, dims, keepdim), Ref::Sum, "sum");
          check(mean(x, dims, keepdim), Ref::Mean, "mean");
          check(prod(x, dims, keepdim), Ref::Prod, "prod");
          check(amax(x, dims, keepdim), Ref::Max, "amax");
          check(amin(x, dims, keepdim), Ref::Min, "amin");
        }
      }
    }
  }
}

TEST(Reduce, NegativeDimsAndKeepdimShapes) {
  Tensor x = make<float>(pseudo_random(24, -1, 1), {2, 3, 4});
  EXPECT_EQ(sum(x, {-1}).shape(), (Shape{2, 3}));
  EXPECT_EQ(sum(x, {0, -1}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_TRUE(equal(sum(x, {-1, 0}), sum(x, {0, 2})));
  EXPECT_EQ(sum(x).shape(), Shape{});
}

TEST(Reduce, IntegerAndBoolSumsAreExactInt64) {
  // int8 values whose sum overflows int8 and int32 products overflow int32.
  std::vector<int8_t> bytes(300, 100);
  Tensor b = from_vector<int8_t>(bytes, {3, 100});
  Tensor s = sum(b, {1});
  EXPECT_EQ(s.dtype(), DType::Int64);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.at<int64_t>({i}), 10000);
  EXPECT_EQ(sum(b).item<int64_t>(), 30000);

  Tensor u = from_vector<uint8_t>({200, 200, 200}, {3});
  EXPECT_EQ(sum(u).dtype(), DType::Int64);
  EXPECT_EQ(sum(u).item<int64_t>(), 600);

  Tensor i32 = from_vector<int32_t>({100000, 100000, 3}, {3});
  EXPECT_EQ(prod(i32).dtype(), DType::Int64);
  EXPECT_EQ(prod(i32).item<int64_t>(), 30000000000ll);

  // Transposed int32: column sums of iota (4, 6).
  Tensor t = iota_tensor({4, 6}).t();  // (6, 4)
  Tensor col = sum(t, {1});
  for (int j = 0; j < 6; ++j) EXPECT_EQ(col.at<int64_t>({j}), j * 4 + 6 * (0 + 1 + 2 + 3));

  Tensor flags = from_vector<bool>({true, false, true, true, false, true}, {2, 3});
  Tensor count = sum(flags, {1});
  EXPECT_EQ(count.dtype(), DType::Int64);
  EXPECT_EQ(count.at<int64_t>({0}), 2);
  EXPECT_EQ(count.at<int64_t>({1}), 2);
  EXPECT_EQ(amax(flags).item<bool>(), true);
  EXPECT_EQ(amin(flags).item<bool>(), false);
}

TEST(Reduce, SumWithDtype) {
  Tensor i = from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  Tensor d = sum(i, {0}, false, DType::Float64);
  EXPECT_EQ(d.dtype(), DType::Float64);
  EXPECT_EQ(d.at<double>({1}), 6.0);
  Tensor i32 = sum(i, {1}, true, DType::Int32);
  EXPECT_EQ(i32.dtype(), DType::Int32);
  EXPECT_EQ(i32.shape(), (Shape{2, 1}));
  EXPECT_EQ(i32.at<int>({1, 0}), 7);
  // float32 values that float64 accumulation keeps apart.
  Tensor f = from_vector<float>({1e8f, 1.0f, -1e8f}, {3});
  EXPECT_EQ(sum(f, {}, false, DType::Float64).item<double>(), 1.0);
}

TEST(Reduce, HalfPrecisionAccumulatesInFloat32) {
  // 3000 ones: a float16 accumulator would stall at 2048.
  Tensor h = ones({3000}, DType::Float16);
  EXPECT_EQ(sum(h).dtype(), DType::Float16);
  EXPECT_EQ(sum(h).item<float>(), 3000.0f);
  // The mean of 100000 ones sums past float16's max (65504) before dividing.
  EXPECT_EQ(mean(ones({100000}, DType::Float16)).item<float>(), 1.0f);
  Tensor bf = make<BFloat16>(pseudo_random(64, -2, 2), {8, 8});
  std::vector<double> bv = values_of(bf);
  expect_close(values_of(sum(bf, {1})), reference(bv, {8, 8}, {false, true}, Ref::Sum), 1e-2, 1e-2, "bf16 sum");
  expect_close(values_of(amax(bf, {0})), reference(bv, {8, 8}, {true, false}, Ref::Max), 0, 0, "bf16 amax");
}

TEST(Reduce, ExpandedInputCountsRepeats) {
  Tensor x = from_vector<float>({1, 2, 3}, {3, 1}).expand({3, 4});  // stride 0 along dim 1
  Tensor s = sum(x, {1});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.at<float>({i}), 4.0f * (i + 1));
  EXPECT_EQ(sum(x).item<float>(), 24.0f);
}

TEST(Reduce, ZeroDimTensor) {
  Tensor x = scalar_tensor(2.5, DType::Float32);
  EXPECT_EQ(sum(x).shape(), Shape{});
  EXPECT_EQ(sum(x).item<float>(), 2.5f);
  EXPECT_EQ(sum(x, {0}).item<float>(), 2.5f);
  EXPECT_EQ(amax(x, {-1}, true).item<float>(), 2.5f);
  EXPECT_EQ(max(x).item<float>(), 2.5f);
  EXPECT_EQ(argmax(x).item<int64_t>(), 0);
}

TEST(Reduce, EmptyReductions) {
  Tensor e = Tensor::empty({0, 3});
  Tensor s = sum(e, {0});
  EXPECT_EQ(s.shape(), (Shape{3}));
  for (int j = 0; j < 3; ++j) EXPECT_EQ(s.at<float>({j}), 0.0f);
  Tensor p = prod(e, {0}, true);
  EXPECT_EQ(p.shape(), (Shape{1, 3}));
  for (int j = 0; j < 3; ++j) EXPECT_EQ(p.at<float>({0, j}), 1.0f);
  EXPECT_EQ(sum(Tensor::empty({0}, DType::Int32)).item<int64_t>(), 0);
  EXPECT_TRUE(std::isnan(mean(e).item<float>()));
  // Reducing the non-empty dim of an empty tensor is an empty result, not an error.
  EXPECT_EQ(amax(e, {1}).shape(), (Shape{0}));
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{0}));
}

TEST(Reduce, MaxMinPropagateNaN) {
  Tensor x = from_vector<float>({1, NAN, 3, 2, 5, 4}, {2, 3});
  EXPECT_TRUE(std::isnan(max(x).item<float>()));
  EXPECT_TRUE(std::isnan(min(x).item<float>()));
  Tensor rows = amax(x, {1});
  EXPECT_TRUE(std::isnan(rows.at<float>({0})));
  EXPECT_EQ(rows.at<float>({1}), 5.0f);
  Tensor cols = amin(x, {0});
  EXPECT_EQ(cols.at<float>({0}), 1.0f);
  EXPECT_TRUE(std::isnan(cols.at<float>({1})));
  // Long contiguous runs take the SIMD path: NaN anywhere, including the tail.
  for (int64_t pos : {0, 5, 31, 4000, 4095, 9000, 9999}) {
    std::vector<float> v(10000, 1.0f);
    v[pos] = NAN;
    EXPECT_TRUE(std::isnan(max(from_vector<float>(v)).item<float>())) << pos;
    EXPECT_TRUE(std::isnan(min(from_vector<float>(v)).item<float>())) << pos;
  }
}

TEST(Reduce, MaxMinWithIndicesTiesTakeFirst) {
  Tensor x = from_vector<float>({1, 3, 3, 2, 5, 5, 1, 5}, {2, 4});
  ValuesIndices mx = max(x, 1);
  EXPECT_EQ(mx.indices.dtype(), DType::Int64);
  EXPECT_EQ(mx.values.at<float>({0}), 3.0f);
  EXPECT_EQ(mx.indices.at<int64_t>({0}), 1);
  EXPECT_EQ(mx.values.at<float>({1}), 5.0f);
  EXPECT_EQ(mx.indices.at<int64_t>({1}), 0);
  ValuesIndices mn = min(x, -1, true);
  EXPECT_EQ(mn.values.shape(), (Shape{2, 1}));
  EXPECT_EQ(mn.indices.at<int64_t>({0, 0}), 0);
  EXPECT_EQ(mn.indices.at<int64_t>({1, 0}), 2);
  // Along dim 0 of the same values.
  ValuesIndices m0 = max(x, 0);
  std::vector<int64_t> want0{1, 1, 0, 1};
  for (int j = 0; j < 4; ++j) EXPECT_EQ(m0.indices.at<int64_t>({j}), want0[j]) << j;

  Tensor n = from_vector<float>({1, NAN, 3, NAN}, {4});
  EXPECT_EQ(max(n, 0).indices.item<int64_t>(), 1);
  EXPECT_TRUE(std::isnan(max(n, 0).values.item<float>()));
  EXPECT_EQ(min(n, 0).indices.item<int64_t>(), 1);
  EXPECT_EQ(argmax(n).item<int64_t>(), 1);
}

TEST(Reduce, MaxWithIndicesAlongOuterDimMatchesReference) {
  // (7, 40) reduced over dim 0: rows read whole, 40 columns tracked at once.
  // Values are small integers so that ties are common; a few NaNs.
  std::vector<double> v = pseudo_random(7 * 40, 0, 4);
  for (double& x : v) x = std::floor(x);
  v[3 * 40 + 5] = kNaN;
  v[5 * 40 + 5] = kNaN;
  v[6 * 40 + 39] = kNaN;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int32, DType::Float16}) {
    bool floating = is_floating(dtype);
    std::vector<double> w = v;
    if (!floating) {
      for (double& a : w) a = std::isnan(a) ? 0 : a;  // NaN has no integer value
    }
    Tensor x = make<double>(w, {7, 40}).to(dtype);
    for (bool is_max : {true, false}) {
      ValuesIndices got = is_max ? max(x, 0) : min(x, 0);
      std::vector<double> xv = values_of(x);
      for (int j = 0; j < 40; ++j) {
        int64_t best = 0;
        for (int i = 1; i < 7; ++i) {
          double a = xv[i * 40 + j], b = xv[best * 40 + j];
          bool wins = is_max ? a > b : a < b;
          if (wins || (std::isnan(a) && !std::isnan(b))) best = i;
        }
        EXPECT_EQ(got.indices.at<int64_t>({j}), best) << dtype << " column " << j;
        double want = xv[best * 40 + j];
        double have = got.values.at<double>({j});
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(have) && floating);
        else EXPECT_EQ(have, want);
      }
    }
  }
  // The same through a transposed view takes the strided path.
  Tensor x = make<double>(v, {7, 40}).t().contiguous().t();
  EXPECT_TRUE(equal(max(x, 0).indices, max(make<double>(v, {7, 40}), 0).indices));
}

TEST(Reduce, ArgmaxFlattensWithoutDim) {
  Tensor x = from_vector<float>({3, 9, 2, 9, 1, 0}, {2, 3});
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 5);
  EXPECT_EQ(argmax(x, std::nullopt, true).shape(), (Shape{1, 1}));
  // Flattened in the logical (row-major) order of a transposed view: x.t() is
  // [[3, 9], [9, 1], [2, 0]], whose first 9 is at flat index 1 and min at 5.
  EXPECT_EQ(argmax(x.t()).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x.t()).item<int64_t>(), 5);
  Tensor per_row = argmax(x, 1);
  EXPECT_EQ(per_row.at<int64_t>({0}), 1);
  EXPECT_EQ(per_row.at<int64_t>({1}), 0);
}

TEST(Reduce, ArgmaxOfLongRowIsThreadCountIndependent) {
  // 200000 elements: pieces scanned in parallel; the max appears twice and a
  // later piece must not win the tie.
  std::vector<double> v = pseudo_random(200000, -1, 1);
  v[70001] = 5;
  v[150000] = 5;
  v[120000] = -5;
  v[190000] = -5;
  Tensor x = make<float>(v, {200000});
  int previous = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    EXPECT_EQ(argmax(x).item<int64_t>(), 70001) << threads;
    EXPECT_EQ(argmin(x).item<int64_t>(), 120000) << threads;
    v[180000] = kNaN;
    EXPECT_EQ(argmax(make<float>(v, {200000})).item<int64_t>(), 180000) << threads;
    v[180000] = 0;
  }
  set_num_threads(previous);
}

TEST(Reduce, VarStdWithCorrection) {
  for (auto& [layout, x] : layouts(DType::Float64, -3, 3)) {
    std::vector<double> xv = values_of(x);
    // var over dims {1, 3}: 15 elements per output.
    std::vector<bool> reduced{false, true, false, true};
    std::vector<double> m = reference(xv, {2, 3, 4, 5}, reduced, Ref::Mean);
    std::vector<double> squares(m.size(), 0.0);
    std::vector<int64_t> index(4, 0);
    for (double v : xv) {
      int64_t o = index[0] * 4 + index[2];
      squares[o] += (v - m[o]) * (v - m[o]);
      for (int d = 3; d >= 0; --d) {
        if (++index[d] < Shape{2, 3, 4, 5}[d]) break;
        index[d] = 0;
      }
    }
    for (int64_t correction : {0, 1}) {
      std::vector<double> want_var(m.size()), want_std(m.size());
      for (size_t o = 0; o < m.size(); ++o) {
        want_var[o] = squares[o] / static_cast<double>(15 - correction);
        want_std[o] = std::sqrt(want_var[o]);
      }
      std::string what = layout + " correction " + std::to_string(correction);
      Tensor v = var(x, {1, 3}, correction);
      EXPECT_EQ(v.shape(), (Shape{2, 4}));
      expect_close(values_of(v), want_var, 1e-12, 0, "var " + what);
      expect_close(values_of(ops::std(x, {1, -1}, correction, true)), want_std, 1e-12, 0, "std " + what);
      EXPECT_EQ(ops::std(x, {1, -1}, correction, true).shape(), (Shape{2, 1, 4, 1}));
    }
  }
  // A large mean against a small spread: two passes keep float32 accurate.
  Tensor offset = from_vector<float>({10000.5f, 10001.5f, 10002.5f, 10003.5f});
  EXPECT_NEAR(var(offset).item<double>(), 5.0 / 3.0, 1e-5);
  EXPECT_NEAR(var(offset, {}, 0).item<double>(), 1.25, 1e-5);
  // N <= correction: divides by zero as torch (0/0 = NaN for one element).
  EXPECT_TRUE(std::isnan(var(from_vector<float>({3.0f}, {1})).item<float>()));
  EXPECT_EQ(var(from_vector<float>({3.0f}, {1}), {}, 0).item<float>(), 0.0f);
  EXPECT_TRUE(std::isinf(var(from_vector<float>({1.0f, 2.0f}), {}, 2).item<float>()));
}

TEST(Reduce, SixteenMillionFloatSumIsAccurate) {
  const int64_t n = int64_t{1} << 24;
  Tensor x = Tensor::empty({n});
  float* p = x.data<float>();
  uint64_t s = 12345;
  double want = 0, want_max = -1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(s >> 40) / static_cast<float>(1 << 24);  // [0, 1)
    want += p[i];
    want_max = std::max(want_max, static_cast<double>(p[i]));
  }
  int previous = get_num_threads();
  std::vector<float> sums;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    float got = sum(x).item<float>();
    EXPECT_LT(std::abs(got - want) / want, 1e-6) << threads << " threads";
    EXPECT_LT(std::abs(mean(x).item<float>() - want / n) / (want / n), 1e-6);
    EXPECT_EQ(amax(x).item<float>(), want_max);
    sums.push_back(got);
    // As (2^20, 16) reduced over dim 0: the vertical layout.
    Tensor cols = sum(x.view({1 << 20, 16}), {0});
    for (int j = 0; j < 16; ++j) {
      double col = 0;
      for (int64_t i = 0; i < (1 << 20); ++i) col += p[i * 16 + j];
      ASSERT_LT(std::abs(cols.at<float>({j}) - col) / col, 1e-6) << "column " << j;
    }
  }
  set_num_threads(previous);
  // Units are fixed, threads only share them: bit-identical results.
  EXPECT_EQ(sums[0], sums[1]);
}

TEST(Reduce, ThreadCountDoesNotChangeResults) {
  // Row sums of a (3, 300000) tensor and column sums of (3000, 600): the
  // few-outputs and vertical parallel paths.
  Tensor wide = make<float>(pseudo_random(3 * 300000, -1, 1), {3, 300000});
  Tensor tall = make<float>(pseudo_random(3000 * 600, -1, 1), {3000, 600});
  int previous = get_num_threads();
  set_num_threads(1);
  Tensor wide1 = sum(wide, {1}), tall1 = sum(tall, {0}), tall_t1 = sum(tall.t(), {1});
  set_num_threads(2);
  EXPECT_TRUE(equal(sum(wide, {1}), wide1));
  EXPECT_TRUE(equal(sum(tall, {0}), tall1));
  EXPECT_TRUE(equal(sum(tall.t(), {1}), tall_t1));
  set_num_threads(previous);
  expect_close(values_of(tall1), reference(values_of(tall), {3000, 600}, {true, false}, Ref::Sum), 1e-5, 1e-4,
               "tall");
  expect_close(values_of(tall_t1), values_of(tall1), 0, 0, "transposed tall");
}

struct FloatKernels {
  const char* name;
  float (*sum)(const float*, int64_t);
  float (*max)(const float*, int64_t);
  float (*min)(const float*, int64_t);
};

// The SIMD kernel sets this CPU can run.
std::vector<FloatKernels> simd_kernels() {
  std::vector<FloatKernels> sets;
  if (cpu::simd_level() >= cpu::SimdLevel::Avx2) {
    sets.push_back({"avx2", cpu::sum_f32_avx2, cpu::max_f32_avx2, cpu::min_f32_avx2});
  }
  if (cpu::simd_level() >= cpu::SimdLevel::Avx512) {
    sets.push_back({"avx512", cpu::sum_f32_avx512, cpu::max_f32_avx512, cpu::min_f32_avx512});
  }
  return sets;
}

TEST(Reduce, SimdKernelsMatchScalarReference) {
  if (simd_kernels().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (const FloatKernels& k : simd_kernels()) {
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4096}) {
      std::vector<double> v = pseudo_random(n, -10, 10, n);
      std::vector<float> f(v.begin(), v.end());
      double exact = 0, magnitude = 0;
      for (float x : f) {
        exact += x;
        magnitude += std::abs(x);
      }
      // A few float32 roundings of partial sums no larger than the magnitude.
      EXPECT_NEAR(k.sum(f.data(), n), exact, 1e-6 * magnitude) << k.name << " " << n;
      EXPECT_NEAR(cpu::sum_f32_scalar(f.data(), n), exact, 1e-6 * magnitude) << n;
      EXPECT_EQ(k.max(f.data(), n), cpu::max_f32_scalar(f.data(), n)) << k.name << " " << n;
      EXPECT_EQ(k.min(f.data(), n), cpu::min_f32_scalar(f.data(), n)) << k.name << " " << n;
      for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> g = f;
        g[pos] = NAN;
        EXPECT_TRUE(std::isnan(k.max(g.data(), n))) << k.name << " " << n << " " << pos;
        EXPECT_TRUE(std::isnan(k.min(g.data(), n))) << k.name << " " << n << " " << pos;
        EXPECT_TRUE(std::isnan(cpu::max_f32_scalar(g.data(), n))) << n << " " << pos;
      }
    }
  }
}

TEST(Reduce, ErrorMessages) {
  Tensor x = Tensor::empty({2, 3, 4, 5});
  expect_error([&] { sum(x, {4}); }, "sum: dim 4 is out of range for a tensor of 4 dimensions");
  expect_error([&] { amax(x, {-5}); }, "amax: dim -5 is out of range for a tensor of 4 dimensions");
  expect_error([&] { sum(x, {1, -3}); }, "sum: dim 1 appears more than once in [1, -3]");
  expect_error([&] { mean(iota_tensor({3})); }, "mean: expected a floating point tensor, got int32");
  expect_error([&] { var(iota_tensor({3})); }, "var: expected a floating point tensor, got int32");
  expect_error([&] { ops::std(iota_tensor({3})); }, "std: expected a floating point tensor, got int32");
  expect_error([&] { logsumexp(iota_tensor({3}), {0}); }, "logsumexp: expected a floating point tensor, got int32");
  expect_error([&] { var(x, {}, -1); }, "var: correction must be non-negative, got -1");
  Tensor e = Tensor::empty({0, 3});
  expect_error([&] { amax(e, {0}); }, "amax: cannot reduce over a dim of size 0 (dim 0 of a tensor of shape [0, 3])");
  expect_error([&] { amin(e); }, "amin: cannot reduce over a dim of size 0");
  expect_error([&] { max(e); }, "max: cannot reduce over a dim of size 0");
  expect_error([&] { max(e, 0); }, "max: cannot reduce over a dim of size 0");
  expect_error([&] { argmin(e); }, "argmin: cannot reduce an empty tensor of shape [0, 3]");
  expect_error([&] { max(x, 4); }, "max: dim 4 is out of range for a tensor of 4 dimensions");
}

}  // namespace
}  // namespace kiln
