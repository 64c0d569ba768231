// Kiln's GEMM (tensor/cpu/gemm.h) on raw pointers: every micro-kernel this
// CPU can run, the scalar one included, against a float64 triple loop, over
// odd sizes, every layout of A, B and C, alpha/beta, threads and batches.
#include "tensor/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensor/cpu/parallel.h"
#include "tensor/error.h"

namespace kiln::cpu {


namespace {

// How a matrix is laid out in its buffer.
enum class Layout { RowMajor, ColMajor, Strided };

struct Matrix {
  int64_t rows, cols, rs, cs;
  int64_t span;  // elements the buffer needs
};

Matrix make_matrix(int64_t rows, int64_t cols, Layout layout) {
  switch (layout) {
    case Layout::RowMajor: return {rows, cols, cols, 1, rows * cols};
    case Layout::ColMajor: return {rows, cols, 1, rows, rows * cols};
    case Layout::Strided: break;
  }
  // Neither stride is 1, and rows are padded: the generic packing paths.
  return {rows, cols, 2 * cols + 3, 2, (2 * cols + 3) * rows + 1};
}

template <class T>
std::vector<T> random_values(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// Float64 reference, written here rather than trusting gemm_reference.
template <class T>
double reference_element(const GemmArgs<T>& g, int64_t bi, int64_t i, int64_t j, double c_old) {
  double sum = 0;
  for (int64_t p = 0; p < g.k; ++p) {
    sum += double(g.a[bi * g.bsa + i * g.rsa + p * g.csa]) * double(g.b[bi * g.bsb + p * g.rsb + j * g.csb]);
  }
  return double(g.alpha) * sum + (g.beta == T(0) ? 0.0 : double(g.beta) * c_old);
}

template <class T>
double tolerance(int64_t k) {
  return (std::is_same_v<T, float> ? 4e-6 : 1e-14) * double(k + 4);
}

std::vector<SimdLevel> runnable_levels() {
  std::vector<SimdLevel> levels{SimdLevel::Scalar};
  if (simd_level() >= SimdLevel::Avx2) levels.push_back(SimdLevel::Avx2);
  if (simd_level() >= SimdLevel::Avx512) levels.push_back(SimdLevel::Avx512);
  return levels;
}

// Runs one (batched) product on `level` and checks every element of C.
template <class T>
void check_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, Layout la, Layout lb, Layout lc, T alpha, T beta,
                SimdLevel level, int threads, bool broadcast_a = false, std::mt19937::result_type seed = 7) {
  std::mt19937 rng(seed);
  Matrix ma = make_matrix(m, k, la), mb = make_matrix(k, n, lb), mc = make_matrix(m, n, lc);
  int64_t a_batches = broadcast_a ? 1 : batch;
  std::vector<T> a = random_values<T>(ma.span * a_batches + 1, rng);
  std::vector<T> b = random_values<T>(mb.span * batch + 1, rng);
  std::vector<T> c = random_values<T>(mc.span * batch + 1, rng);
  const std::vector<T> c_old = c;
  GemmArgs<T> g{batch, m, n, k, alpha, beta,
                a.data(), broadcast_a ? 0 : ma.span, ma.rs, ma.cs,
                b.data(), mb.span, mb.rs, mb.cs,
                c.data(), mc.span, mc.rs, mc.cs};
  gemm_at_level(g, level, threads);

  std::string where = "level " + std::string(simd_level_name(level)) + " batch " + std::to_string(batch) + " m " +
                      std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) + " layouts " +
                      std::to_string(int(la)) + std::to_string(int(lb)) + std::to_string(int(lc)) + " threads " +
                      std::to_string(threads);
  GemmArgs<T> ref = g;  // reads A and B only
  int failures = 0;
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t at = bi * mc.span + i * mc.rs + j * mc.cs;
        double want = reference_element(ref, bi, i, j, double(c_old[at]));
        if (std::fabs(double(c[at]) - want) > tolerance<T>(k) && ++failures <= 3) {
          ADD_FAILURE() << where << ": C[" << bi << "][" << i << "][" << j << "] = " << c[at] << ", want " << want;
        }
      }
    }
  }
  // Nothing outside C's elements was touched (the strided layout leaves gaps).
  std::vector<bool> in_c(c.size(), false);
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) in_c[bi * mc.span + i * mc.rs + j * mc.cs] = true;
    }
  }
  for (size_t x = 0; x < c.size(); ++x) {
    if (!in_c[x] && c[x] != c_old[x] && ++failures <= 3) ADD_FAILURE() << where << ": wrote outside C at " << x;
  }
}

constexpr Layout kLayouts[] = {Layout::RowMajor, Layout::ColMajor, Layout::Strided};

struct Size {
  int64_t m, n, k;
};

// Odd sizes around the tiles (6x16, 4x8, 12x32), the cache blocks (KC 256,
// MC 144) and the in-place-B route (M <= 3 tiles).
const Size kSizes[] = {{1, 1, 1},    {7, 17, 33},  {17, 33, 7},   {33, 7, 17},   {100, 257, 33},
                       {257, 100, 17}, {6, 16, 256}, {12, 32, 300}, {13, 29, 257}, {18, 49, 70},
                       {19, 40, 5},  {150, 50, 600}, {5, 1, 9},    {1, 100, 3}};

template <class T>
void check_all_layouts(const Size& s, T alpha, T beta, int threads) {
  for (SimdLevel level : runnable_levels()) {
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        for (Layout lc : kLayouts) check_gemm<T>(1, s.m, s.n, s.k, la, lb, lc, alpha, beta, level, threads);
      }
    }
  }
}

TEST(Gemm, Float32AllSizesAndLayouts) {
  const float alphas[] = {1.f, -1.5f, 0.25f}, betas[] = {0.f, 1.f, -2.f};
  int i = 0;
  for (const Size& s : kSizes) {
    check_all_layouts<float>(s, alphas[i % 3], betas[(i / 3 + i) % 3], 1);
    ++i;
  }
}

TEST(Gemm, Float64AllSizesAndLayouts) {
  const double alphas[] = {1.0, 0.5, -3.0}, betas[] = {0.0, -1.0, 0.5};
  int i = 0;
  for (const Size& s : kSizes) {
    check_all_layouts<double>(s, alphas[i % 3], betas[(i / 3 + i) % 3], 1);
    ++i;
  }
}

// Threads start at 2^22 FLOPs each (kFlopsPerThread in gemm.cpp); the sizes
// below are chosen above that so that a second thread really runs.
TEST(Gemm, TwoThreadsSplitRowsOrColumns) {
  // Packed route split by rows (150 x 50) and by columns (30 x 700), and the
  // in-place-B route split by slivers (6 x 2000).
  for (SimdLevel level : runnable_levels()) {
    for (Layout lb : kLayouts) {
      check_gemm<float>(1, 150, 50, 600, Layout::RowMajor, lb, Layout::RowMajor, 1.f, 0.5f, level, 2);
      check_gemm<float>(1, 30, 700, 300, Layout::ColMajor, lb, Layout::RowMajor, 2.f, 0.f, level, 2);
      check_gemm<double>(1, 6, 2000, 400, Layout::RowMajor, lb, Layout::Strided, 1.0, 0.0, level, 2);
    }
  }
}

// K at least 4 times M and N and at least one K block (KC <= 256) per thread
// (split_k_pays in gemm.cpp): threads split K and sum their partial Cs, as
// for a linear layer's weight gradient g.t() @ x. M = 50 and 41 stay above
// the in-place-B route's 3 tiles; 2 * 50 * 37 * 2000 FLOPs start 3 threads,
// so two partials are added; K = 2000 and 1111 are not whole K blocks.
TEST(Gemm, TallKSplitsKAcrossThreads) {
  for (SimdLevel level : runnable_levels()) {
    for (Layout la : kLayouts) {
      for (Layout lc : kLayouts) {
        check_gemm<float>(1, 50, 37, 2000, la, Layout::RowMajor, lc, -1.5f, 0.5f, level, 2);
        check_gemm<float>(1, 50, 37, 2000, la, Layout::Strided, lc, 1.f, 0.f, level, 3);
        check_gemm<double>(1, 41, 64, 1111, la, Layout::ColMajor, lc, 0.5, -1.0, level, 2);
      }
    }
  }
}

// Inside another parallel region the GEMM runs on the calling thread alone,
// and a tall K product must then cover all of K itself.
TEST(Gemm, TallKInsideParallelRegion) {
  for (SimdLevel level : runnable_levels()) {
    parallel_region(2, [&](int tid, int) {
      if (tid == 0) {
        check_gemm<float>(1, 50, 37, 2000, Layout::ColMajor, Layout::RowMajor, Layout::RowMajor, 1.f, 1.f, level,
                          2);
      }
    });
  }
}

TEST(Gemm, LargeBlocksCrossNcAndKc) {
  // N > NC (4080) and K > 2 KC: several B panels and K blocks accumulate.
  for (SimdLevel level : runnable_levels()) {
    check_gemm<float>(1, 40, 4100, 530, Layout::RowMajor, Layout::RowMajor, Layout::RowMajor, 1.f, 1.f, level, 2);
    check_gemm<float>(1, 7, 4100, 20, Layout::RowMajor, Layout::RowMajor, Layout::RowMajor, 1.f, 0.f, level, 1);
  }
}

TEST(Gemm, BatchedWithBroadcastA) {
  for (SimdLevel level : runnable_levels()) {
    // Many small products, one thread each: conv1's weight (6, 75) shared by
    // every image's columns, A broadcast with batch stride 0.
    check_gemm<float>(128, 6, 100, 75, Layout::RowMajor, Layout::RowMajor, Layout::RowMajor, 1.f, 0.f, level, 2,
                      true);
    check_gemm<double>(64, 20, 64, 80, Layout::ColMajor, Layout::Strided, Layout::RowMajor, 1.0, 1.0, level, 2);
    // Products big enough to use both threads each, one after another.
    check_gemm<float>(2, 150, 100, 300, Layout::RowMajor, Layout::ColMajor, Layout::RowMajor, 1.f, 0.f, level, 2,
                      true);
  }
}

TEST(Gemm, ZeroSizes) {
  for (SimdLevel level : runnable_levels()) {
    for (int threads : {1, 2}) {
      check_gemm<float>(1, 0, 5, 3, Layout::RowMajor, Layout::RowMajor, Layout::RowMajor, 1.f, 0.f, level, threads);
      check_gemm<float>(1, 5, 0, 3, Layout::RowMajor, Layout::RowMajor, Layout::RowMajor, 1.f, 0.f, level, threads);
      check_gemm<float>(0, 5, 5, 3, Layout::RowMajor, Layout::RowMajor, Layout::RowMajor, 1.f, 0.f, level, threads);
      // K = 0: C = beta * C.
      check_gemm<float>(1, 9, 20, 0, Layout::RowMajor, Layout::RowMajor, Layout::ColMajor, 1.f, 0.5f, level, threads);
      check_gemm<double>(2, 9, 20, 0, Layout::Strided, Layout::RowMajor, Layout::RowMajor, 1.0, 0.0, level, threads);
    }
  }
}

TEST(Gemm, AlphaZeroScalesC) {
  for (SimdLevel level : runnable_levels()) {
    check_gemm<float>(1, 20, 30, 10, Layout::RowMajor, Layout::RowMajor, Layout::RowMajor, 0.f, -2.f, level, 1);
  }
}

// beta == 0 must not read C: NaN there would otherwise survive as 0 * NaN.
template <class T>
void check_beta_zero_ignores_nan(SimdLevel level, int64_t m, int64_t n, int64_t k, int64_t ldc_pad, int threads) {
  std::mt19937 rng(3);
  std::vector<T> a = random_values<T>(m * k, rng), b = random_values<T>(k * n, rng);
  const int64_t ldc = n + ldc_pad;
  std::vector<T> c(m * ldc, std::numeric_limits<T>::quiet_NaN());
  gemm_at_level<T>({1, m, n, k, T(1), T(0), a.data(), 0, k, 1, b.data(), 0, n, 1, c.data(), 0, ldc, 1}, level,
                   threads);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p) want += double(a[i * k + p]) * double(b[p * n + j]);
      ASSERT_NEAR(double(c[i * ldc + j]), want, tolerance<T>(k))
          << simd_level_name(level) << " m " << m << " n " << n << " k " << k << " at " << i << ", " << j;
    }
    for (int64_t j = n; j < ldc; ++j) EXPECT_TRUE(std::isnan(c[i * ldc + j])) << "padding overwritten";
  }
}

TEST(Gemm, BetaZeroIgnoresNanInC) {
  for (SimdLevel level : runnable_levels()) {
    check_beta_zero_ignores_nan<float>(level, 37, 45, 29, 3, 1);   // packed route, edge tiles
    check_beta_zero_ignores_nan<float>(level, 12, 64, 300, 0, 1);  // in-place B, full tiles
    check_beta_zero_ignores_nan<float>(level, 200, 90, 400, 1, 2);
    check_beta_zero_ignores_nan<double>(level, 25, 19, 8, 2, 1);
    check_beta_zero_ignores_nan<double>(level, 25, 19, 0, 2, 1);   // K = 0 writes zeros
  }
}

TEST(Gemm, PublicEntryPointsTransposedB) {
  // c = a @ w.t() through sgemm / dgemm with the default level and threads.
  const int64_t m = 23, n = 41, k = 57;
  std::mt19937 rng(11);
  std::vector<float> a = random_values<float>(m * k, rng), w = random_values<float>(n * k, rng);
  std::vector<float> c(m * n);
  sgemm(m, n, k, 1.f, a.data(), k, 1, w.data(), 1, k, 0.f, c.data(), n, 1);
  std::vector<double> ad(a.begin(), a.end()), wd(w.begin(), w.end()), cd(m * n);
  dgemm(m, n, k, 1.0, ad.data(), k, 1, wd.data(), 1, k, 0.0, cd.data(), n, 1);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p) want += double(a[i * k + p]) * double(w[j * k + p]);
      EXPECT_NEAR(c[i * n + j], want, tolerance<float>(k));
      EXPECT_NEAR(cd[i * n + j], want, tolerance<double>(k));
    }
  }
}

TEST(Gemm, ReferenceLoopHandComputed) {
  // [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]]; alpha 2, beta 1 onto C = 1.
  std::vector<double> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c{1, 1, 1, 1};
  gemm_reference<double>({1, 2, 2, 2, 2.0, 1.0, a.data(), 0, 2, 1, b.data(), 0, 2, 1, c.data(), 0, 2, 1});
  EXPECT_EQ(c, (std::vector<double>{39, 45, 87, 101}));
}

TEST(Gemm, NegativeSizeThrows) {
  std::vector<float> x(4);
  try {
    gemm_at_level<float>({1, -1, 2, 2, 1.f, 0.f, x.data(), 0, 2, 1, x.data(), 0, 2, 1, x.data(), 0, 2, 1},
                         SimdLevel::Scalar, 1);
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("gemm: negative size: batch 1, m -1, n 2, k 2"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace kiln::cpu
