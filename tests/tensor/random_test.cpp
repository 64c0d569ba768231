// Philox4x32-10 against the published answers, the stream layout of Note
// [Random streams], and the distributions the kernels derive from it. Every
// statistical test uses a fixed seed, so its outcome is fixed too: the bounds
// are 10+ standard errors wide so that a correct change of the stream layout
// still passes, while a wrong distribution fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <set>

#include "tensor/ops.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

// Restores the thread count a test changed, even when it fails.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(get_num_threads()) {}
  ~ThreadCountGuard() { set_num_threads(saved_); }

 private:
  int saved_;
};

double mean_of(const Tensor& t) {
  Tensor d = t.to(DType::Float64);
  const double* p = d.data<double>();
  double sum = 0.0;
  for (int64_t i = 0; i < d.numel(); ++i) sum += p[i];
  return sum / static_cast<double>(d.numel());
}

double std_of(const Tensor& t) {
  Tensor d = t.to(DType::Float64);
  const double* p = d.data<double>();
  double mean = mean_of(d), sum = 0.0;
  for (int64_t i = 0; i < d.numel(); ++i) sum += (p[i] - mean) * (p[i] - mean);
  return std::sqrt(sum / static_cast<double>(d.numel() - 1));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// The known-answer vectors of the Random123 distribution (kat_vectors,
// philox4x32_10), with the 128-bit counter and 64-bit key split into the
// words that block() takes: word 0 is the lowest.
TEST(Philox, KnownAnswerVectors) {
  EXPECT_EQ(Philox4x32::block(0, 0, 0), (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32::block(~0ull, ~0ull, ~0ull),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32::block(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Random, ElementIUsesCounterOffsetPlusI) {
  Generator g(42);
  g.advance(5);
  Tensor f32 = rand({3}, DType::Float32, &g);
  Tensor f64 = rand({3}, DType::Float64, &g);  // counters 8, 9, 10
  for (int64_t i = 0; i < 3; ++i) {
    auto w = Philox4x32::block(5 + i, 0, 42);
    EXPECT_EQ(f32.at<float>({i}), static_cast<float>(w[0] >> 8) / 16777216.0f);
    auto v = Philox4x32::block(8 + i, 0, 42);
    uint64_t bits = (static_cast<uint64_t>(v[1]) << 32 | v[0]) >> 11;
    EXPECT_EQ(f64.at<double>({i}), static_cast<double>(bits) / 9007199254740992.0);
  }
  // Seed 42, counter 0, word 0 is 0x9ceaf053 (computed by hand from the
  // algorithm), so the first float32 is 0x9ceaf0 / 2^24.
  Generator first(42);
  EXPECT_EQ(rand({1}, DType::Float32, &first).at<float>({0}), 0x9ceaf0 / 16777216.0f);
}

// randint maps x = (w1:w0) to low + floor(x * range / 2^64), so a range
// wider than 2^32 still reaches every value.
TEST(Random, RandIntIsMultiplyShiftOfTheBlock) {
  Generator g(9);
  int64_t low = -1000, range = 3000000000007;
  Tensor r = randint(low, low + range, {4}, DType::Int64, &g);
  for (int64_t i = 0; i < 4; ++i) {
    auto w = Philox4x32::block(i, 0, 9);
    unsigned __int128 x = static_cast<uint64_t>(w[1]) << 32 | w[0];
    auto expected = low + static_cast<int64_t>((x * static_cast<uint64_t>(range)) >> 64);
    EXPECT_EQ(r.at<int64_t>({i}), expected);
  }
}

TEST(Random, NormalIsBoxMullerOfTheBlock) {
  Generator g(7);
  Tensor z = randn({4}, DType::Float64, &g);
  for (int64_t i = 0; i < 4; ++i) {
    auto w = Philox4x32::block(i, 0, 7);
    double u1 = 1.0 - static_cast<double>((static_cast<uint64_t>(w[1]) << 32 | w[0]) >> 11) * 0x1p-53;
    double u2 = static_cast<double>((static_cast<uint64_t>(w[3]) << 32 | w[2]) >> 11) * 0x1p-53;
    double expected = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    EXPECT_NEAR(z.at<double>({i}), expected, 1e-15);
  }
}

TEST(Random, CounterCarriesIntoTheHighWord) {
  Generator g(3);
  g.advance(~0ull - 1);  // offset 2^64 - 2
  Tensor t = rand({4}, DType::Float32, &g);
  EXPECT_EQ(t.at<float>({1}), static_cast<float>(Philox4x32::block(~0ull, 0, 3)[0] >> 8) / 16777216.0f);
  EXPECT_EQ(t.at<float>({2}), static_cast<float>(Philox4x32::block(0, 1, 3)[0] >> 8) / 16777216.0f);
  EXPECT_EQ(t.at<float>({3}), static_cast<float>(Philox4x32::block(1, 1, 3)[0] >> 8) / 16777216.0f);
}

TEST(Random, SameValuesForAnyThreadCount) {
  ThreadCountGuard guard;
  auto draw_all = [] {
    Generator g(1234);
    return std::vector<Tensor>{rand({100003}, DType::Float32, &g), randn({70001}, DType::Float64, &g),
                               randint(-5, 9, {50000}, DType::Int64, &g), bernoulli({40000}, 0.25, DType::Bool, &g),
                               rand({30000}, DType::BFloat16, &g)};
  };
  set_num_threads(1);
  std::vector<Tensor> one = draw_all();
  set_num_threads(2);
  std::vector<Tensor> two = draw_all();
  for (size_t k = 0; k < one.size(); ++k) EXPECT_TRUE(same_bytes(one[k], two[k])) << "tensor " << k;
}

TEST(Random, OffsetAdvancesAndConsecutiveCallsContinueTheStream) {
  Generator g(99);
  Tensor a = rand({10}, DType::Float32, &g);
  EXPECT_EQ(g.offset(), 10u);
  Tensor b = rand({2, 5}, DType::Float32, &g);
  EXPECT_EQ(g.offset(), 20u);
  EXPECT_FALSE(same_bytes(a, b.view({10})));
  Generator fresh(99);
  Tensor both = rand({20}, DType::Float32, &fresh);
  EXPECT_TRUE(same_bytes(b.view({10}), both.slice(0, 10, 20).contiguous()));
}

TEST(Random, ManualSeedResetsTheDefaultGenerator) {
  manual_seed(2024);
  EXPECT_EQ(default_generator().seed(), 2024u);
  EXPECT_EQ(default_generator().offset(), 0u);
  Tensor a = randn({3, 4});
  EXPECT_EQ(default_generator().offset(), 12u);
  Tensor b = randn({3, 4});
  EXPECT_FALSE(same_bytes(a, b));
  manual_seed(2024);
  EXPECT_TRUE(same_bytes(a, randn({3, 4})));
  Generator other(2025);
  EXPECT_FALSE(same_bytes(a, randn({3, 4}, {}, &other)));
}

TEST(Random, UniformMomentsAndRange) {
  Generator g(11);
  Tensor u = rand({1000000}, DType::Float32, &g);
  EXPECT_NEAR(mean_of(u), 0.5, 0.005);
  EXPECT_NEAR(std_of(u), std::sqrt(1.0 / 12.0), 0.005);
  const float* p = u.data<float>();
  float lo = 1.0f, hi = 0.0f;
  for (int64_t i = 0; i < u.numel(); ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  EXPECT_GE(lo, 0.0f);
  EXPECT_LT(hi, 1.0f);
  EXPECT_LT(lo, 1e-5f);  // the whole interval is reached
  EXPECT_GT(hi, 1.0f - 1e-5f);

  Tensor w = Tensor::empty({200000}, DType::Float64);
  uniform_(w, -3.0, 5.0, &g);
  EXPECT_NEAR(mean_of(w), 1.0, 0.05);
  const double* q = w.data<double>();
  for (int64_t i = 0; i < w.numel(); ++i) ASSERT_TRUE(q[i] >= -3.0 && q[i] < 5.0) << q[i];
}

// 16-bit floats round u >= 1 - 2^-12 (float16) or 1 - 2^-9 (bfloat16) up
// to 1, which happens hundreds of times in 100000 draws: those must not
// leave [0, 1).
TEST(Random, SixteenBitUniformsStayBelowTheUpperBound) {
  Generator g(5);
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    Tensor u = rand({100000}, dtype, &g).to(DType::Float32);
    const float* p = u.data<float>();
    int64_t zeros = 0;
    for (int64_t i = 0; i < u.numel(); ++i) {
      ASSERT_TRUE(p[i] >= 0.0f && p[i] < 1.0f) << dtype_name(dtype) << " value " << p[i];
      zeros += p[i] == 0.0f;
    }
    EXPECT_GT(zeros, 0) << dtype_name(dtype);
  }
}

// With seed 0, counter 38471471 has word 0 = 0xffffffec, so u = 1 - 2^-24
// and 1 + u rounds to 2.0f: that value must become the lower bound.
TEST(Random, Float32ValueThatRoundsOntoTheUpperBoundBecomesTheLowerBound) {
  ASSERT_EQ(Philox4x32::block(38471471, 0, 0)[0] >> 8, 0xffffffu);
  Generator g(0);
  g.advance(38471471);
  Tensor t = Tensor::empty({2}, DType::Float32);
  uniform_(t, 1.0, 2.0, &g);
  EXPECT_EQ(t.at<float>({0}), 1.0f);
  EXPECT_GT(t.at<float>({1}), 1.0f);
  Generator h(0);
  h.advance(38471471);
  EXPECT_EQ(rand({1}, DType::Float32, &h).at<float>({0}), 1.0f - 0x1p-24f);
}

TEST(Random, NormalMoments) {
  Generator g(21);
  Tensor z = randn({1000000}, DType::Float32, &g);
  EXPECT_NEAR(mean_of(z), 0.0, 0.01);
  EXPECT_NEAR(std_of(z), 1.0, 0.01);
  // Both tails are reached: P(|z| > 4) * 1e6 is about 63.
  const float* p = z.data<float>();
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < z.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(p[i]));
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  EXPECT_LT(lo, -4.0f);
  EXPECT_GT(hi, 4.0f);

  Tensor n = Tensor::empty({400000}, DType::Float64);
  normal_(n, 3.0, 2.0, &g);
  EXPECT_NEAR(mean_of(n), 3.0, 0.02);
  EXPECT_NEAR(std_of(n), 2.0, 0.02);
}

TEST(Random, BernoulliFraction) {
  Generator g(8);
  Tensor b = bernoulli({1000000}, 0.3, {}, &g);
  EXPECT_EQ(b.dtype(), DType::Float32);
  EXPECT_NEAR(mean_of(b), 0.3, 0.005);
  const float* p = b.data<float>();
  for (int64_t i = 0; i < b.numel(); ++i) ASSERT_TRUE(p[i] == 0.0f || p[i] == 1.0f);
  Tensor mask = bernoulli({1000}, 1.0, DType::Bool, &g);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_TRUE(mask.at<bool>({i}));
  EXPECT_EQ(mean_of(bernoulli({1000}, 0.0, DType::Int32, &g)), 0.0);
}

TEST(Random, RandIntCoversTheRangeEvenly) {
  Generator g(13);
  Tensor r = randint(-3, 4, {700000}, DType::Int64, &g);
  EXPECT_EQ(r.dtype(), DType::Int64);
  std::array<int64_t, 7> counts{};
  const int64_t* p = r.data<int64_t>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    ASSERT_TRUE(p[i] >= -3 && p[i] < 4) << p[i];
    ++counts[p[i] + 3];
  }
  for (int64_t c : counts) EXPECT_NEAR(static_cast<double>(c) / 700000.0, 1.0 / 7.0, 0.005);

  // A range wider than 32 bits uses the high bits of the 64-bit value.
  Tensor wide = randint(0, int64_t{1} << 40, {10000}, DType::Int64, &g);
  const int64_t* q = wide.data<int64_t>();
  int64_t high = 0;
  for (int64_t i = 0; i < wide.numel(); ++i) {
    ASSERT_TRUE(q[i] >= 0 && q[i] < (int64_t{1} << 40));
    high += q[i] >= (int64_t{1} << 39);
  }
  EXPECT_NEAR(static_cast<double>(high) / 10000.0, 0.5, 0.05);

  Tensor small = randint(250, 256, {1000}, DType::UInt8, &g);
  std::set<int> seen;
  for (int64_t i = 0; i < 1000; ++i) seen.insert(small.at<int>({i}));
  EXPECT_EQ(seen, (std::set<int>{250, 251, 252, 253, 254, 255}));
  Tensor as_float = randint(0, 10, {1000}, DType::Float32, &g);
  for (int64_t i = 0; i < 1000; ++i) {
    float v = as_float.at<float>({i});
    ASSERT_TRUE(v == std::floor(v) && v >= 0.0f && v < 10.0f);
  }
}

TEST(Random, InPlaceFillOfATransposedViewIsRowMajorInTheView) {
  Generator g1(77), g2(77);
  Tensor base = zeros({3, 4}, DType::Float64);
  Tensor view = base.t();  // (4, 3), not contiguous
  uint64_t version = base.version();
  uniform_(view, 0.0, 1.0, &g1);
  EXPECT_GT(base.version(), version);
  Tensor expected = rand({4, 3}, DType::Float64, &g2);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(view.at<double>({i, j}), expected.at<double>({i, j}));
      EXPECT_EQ(base.at<double>({j, i}), expected.at<double>({i, j}));
    }
  }
  EXPECT_EQ(g1.offset(), 12u);
}

TEST(Random, EmptyTensorsDrawNothing) {
  Generator g(1);
  Tensor e = rand({0, 5}, DType::Float32, &g);
  EXPECT_EQ(e.shape(), (Shape{0, 5}));
  EXPECT_EQ(g.offset(), 0u);
}

TEST(Random, Errors) {
  expect_error([] { rand({2}, DType::Int64); }, "rand: expected a floating point dtype, got int64");
  expect_error([] { randn({2}, DType::Bool); }, "randn: expected a floating point dtype, got bool");
  expect_error([] { randint(5, 5, {2}); }, "randint: expected low < high, got low 5 and high 5");
  expect_error([] { randint(0, 300, {2}, DType::Int8); },
               "randint: the range [0, 300) does not fit in int8 (-128 to 127)");
  expect_error([] { randint(0, int64_t{1} << 60, {2}); }, "randint: bounds must lie within +-2^53");
  expect_error([] { bernoulli({2}, 1.5); }, "bernoulli: p must be in [0, 1], got 1.5");
  Tensor t = zeros({2});
  expect_error([&] { uniform_(t, 2.0, 1.0); }, "uniform_: expected low <= high, got low 2 and high 1");
  expect_error([&] { normal_(t, 0.0, -1.0); }, "normal_: expected std >= 0, got -1");
  Tensor i = zeros({2}, DType::Int32);
  expect_error([&] { normal_(i); }, "normal_: expected a floating point dtype, got int32");
}

}  // namespace
}  // namespace kiln
