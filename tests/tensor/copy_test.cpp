// Transposing copies (x.t().contiguous(), dst.t().copy_(x)): the register
// tile kernels of tensor/cpu/copy_simd.h called directly at every level this
// CPU supports, and the copy op end to end (which takes the SIMD kernels or,
// under KILN_SIMD=scalar, the tiled reference in tensor/cpu/copy.cpp),
// each against a plain element loop.
#include "tensor/cpu/copy_simd.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/ops.h"
#include "tensor/cpu/cpu_features.h"
#include "tests/tensor/test_util.h"

namespace kiln {

using namespace kiln::ops;
namespace {

using TransposeKernel = void (*)(char*, int64_t, const char*, int64_t, int64_t, int64_t);

// Distinct random bit patterns (NaN payloads included for float lanes), so
// that an element copied to the wrong place or with changed bits is caught.
std::vector<uint64_t> random_bits(int64_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> out(n);
  for (auto& v : out) v = rng();
  return out;
}

// Calls `kernel` on src (rows, cols) with row stride cols + 3 elements,
// starting one element into its buffer (so unaligned), and compares every
// byte of dst's buffer with a plain loop: the transposed elements, and the
// padding left untouched. dst (cols, rows) has row stride rows + 5 and starts
// one element in; or, when `aligned`, rows rounded up to 32 bytes and a
// 32-byte aligned start, which lets big 4-byte transposes stream their stores.
template <class Bits>
void check_kernel(TransposeKernel kernel, int64_t rows, int64_t cols, bool aligned = false) {
  constexpr int64_t size = sizeof(Bits), per32 = 32 / size;
  const int64_t ld_src = cols + 3, ld_dst = aligned ? (rows + per32 - 1) / per32 * per32 : rows + 5;
  std::vector<Bits> src(1 + rows * ld_src), dst(per32 + cols * ld_dst), expected;
  const int64_t start = aligned ? (32 - reinterpret_cast<uintptr_t>(dst.data()) % 32) % 32 / size : 1;
  auto bits = random_bits(static_cast<int64_t>(src.size() + dst.size()), static_cast<uint32_t>(rows * 131 + cols));
  for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<Bits>(bits[k]);
  for (size_t k = 0; k < dst.size(); ++k) dst[k] = static_cast<Bits>(bits[src.size() + k]);
  expected = dst;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) expected[start + j * ld_dst + i] = src[1 + i * ld_src + j];
  }
  kernel(reinterpret_cast<char*>(dst.data() + start), ld_dst * size, reinterpret_cast<const char*>(src.data() + 1),
         ld_src * size, rows, cols);
  ASSERT_EQ(std::memcmp(dst.data(), expected.data(), dst.size() * size), 0) << rows << " x " << cols;
}

TEST(CopyTranspose, KernelsMatchPlainLoopForAllSmallShapes) {
  if (cpu::simd_level() < cpu::SimdLevel::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  for (int64_t rows = 0; rows <= 70; ++rows) {
    for (int64_t cols = 0; cols <= 70; ++cols) {
      check_kernel<uint8_t>(cpu::transpose_8_avx2, rows, cols);
      check_kernel<uint32_t>(cpu::transpose_32_avx2, rows, cols);
      check_kernel<uint64_t>(cpu::transpose_64_avx2, rows, cols);
    }
  }
  check_kernel<uint8_t>(cpu::transpose_8_avx2, 259, 133);  // several 64 x 64 cache blocks
  // Larger than one 16 x 16 cache block in both dims, with ragged edges.
  check_kernel<uint32_t>(cpu::transpose_32_avx2, 259, 133);
  check_kernel<uint64_t>(cpu::transpose_64_avx2, 133, 259);
  // Over 1 MiB into aligned rows: the streaming-store path, ragged edges too.
  check_kernel<uint32_t>(cpu::transpose_32_avx2, 515, 603, /*aligned=*/true);
  check_kernel<uint32_t>(cpu::transpose_32_avx2, 512, 640, /*aligned=*/true);
  check_kernel<uint64_t>(cpu::transpose_64_avx2, 515, 603, /*aligned=*/true);
}

// The byte-plane interleave (NCHW uint8 -> channels-last) against the
// plain loop for every plane count it takes and every length through a few
// steps, planes strided apart, unaligned, with the bytes around dst's run
// left as they were.
using Interleave = void (*)(uint8_t*, const uint8_t*, int64_t, int64_t, int64_t);

// `interleave` for 1 to max_planes planes of 0 to 70 pixels. src ends one
// byte after the last plane's pixels (the VBMI kernel's masked loads may
// read nothing past it; ASan builds catch any other kernel's overread).
void expect_interleave_matches_plain_loop(Interleave interleave, int64_t max_planes, uint32_t seed) {
  for (int64_t planes = 1; planes <= max_planes; ++planes) {
    for (int64_t n = 0; n <= 70; ++n) {
      const int64_t stride = n + 3;
      auto bits = random_bits(planes * stride + planes * n + 9, static_cast<uint32_t>(planes * seed + n));
      std::vector<uint8_t> src(static_cast<size_t>((planes - 1) * stride + n + 2)),
          dst(static_cast<size_t>(planes * n + 8));
      for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<uint8_t>(bits[k]);
      for (size_t k = 0; k < dst.size(); ++k) dst[k] = static_cast<uint8_t>(bits[src.size() + k]);
      std::vector<uint8_t> expected = dst;
      for (int64_t x = 0; x < n; ++x) {
        for (int64_t c = 0; c < planes; ++c) expected[4 + x * planes + c] = src[1 + c * stride + x];
      }
      interleave(dst.data() + 4, src.data() + 1, stride, planes, n);
      ASSERT_EQ(dst, expected) << planes << " planes of " << n;
    }
  }
}

TEST(InterleavePlanes, MatchesPlainLoop) {
  if (cpu::simd_level() < cpu::SimdLevel::Avx512 || !cpu::int8_features().avx512vbmi) {
    GTEST_SKIP() << "no AVX-512 VBMI on this CPU";
  }
  expect_interleave_matches_plain_loop(cpu::interleave_planes_u8_avx512vbmi, 16, 101);
}

// The row-pointer form (the stacked kernel rows of the implicit
// convolution): each plane's row on its own, in any order, one row standing
// for several planes (the zero-point border), each ending where its n bytes
// do.
TEST(InterleavePlanes, RowsMatchPlainLoop) {
  if (cpu::simd_level() < cpu::SimdLevel::Avx512 || !cpu::int8_features().avx512vbmi) {
    GTEST_SKIP() << "no AVX-512 VBMI on this CPU";
  }
  for (int64_t planes = 1; planes <= 16; ++planes) {
    for (int64_t n = 0; n <= 70; ++n) {
      auto bits = random_bits(planes * (n + 1) + planes * n + 8, static_cast<uint32_t>(planes * 107 + n));
      // Row r of `distinct` rows, each its own allocation of n bytes.
      const int64_t distinct = (planes + 1) / 2;
      std::vector<std::vector<uint8_t>> rows(static_cast<size_t>(distinct));
      size_t k = 0;
      for (auto& row : rows) {
        row.resize(static_cast<size_t>(n));
        for (auto& b : row) b = static_cast<uint8_t>(bits[k++]);
      }
      const uint8_t* pointers[16];
      for (int64_t c = 0; c < planes; ++c) pointers[c] = rows[static_cast<size_t>((c * 5 + 3) % distinct)].data();
      std::vector<uint8_t> dst(static_cast<size_t>(planes * n + 8));
      for (auto& b : dst) b = static_cast<uint8_t>(bits[k++]);
      std::vector<uint8_t> expected = dst;
      for (int64_t x = 0; x < n; ++x) {
        for (int64_t c = 0; c < planes; ++c) expected[4 + x * planes + c] = pointers[c][x];
      }
      cpu::interleave_rows_u8_avx512vbmi(dst.data() + 4, pointers, planes, n);
      ASSERT_EQ(dst, expected) << planes << " planes of " << n;
    }
  }
}

// The AVX2 interleave (up to 8 planes), likewise: around its 16-pixel
// steps and the spill of its 8-byte stores, nothing written outside dst's
// pixels.
TEST(InterleavePlanes, Avx2MatchesPlainLoop) {
  if (cpu::simd_level() < cpu::SimdLevel::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  expect_interleave_matches_plain_loop(cpu::interleave_planes_u8_avx2, 8, 103);
}

// A (rows, cols) tensor of `dtype` with distinct values v(i, j) = bits of
// element i * cols + j of random_bits, truncated to the element size.
template <class T>
Tensor random_matrix(int64_t rows, int64_t cols, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty({rows, cols}, dtype);
  auto bits = random_bits(rows * cols, seed);
  T* p = t.data<T>();
  for (int64_t k = 0; k < rows * cols; ++k) std::memcpy(static_cast<void*>(&p[k]), &bits[k], sizeof(T));
  return t;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Views a (rows, cols) window at (1, 2) of a bigger matrix (so rows are
// strided and the first element unaligned), copies its transpose both ways
// (into a new contiguous tensor, and into a transposed window of a bigger
// destination) and checks every element, and that the destination's
// surroundings are untouched.
template <class T>
void check_copy(DType dtype, int64_t rows, int64_t cols) {
  Tensor big = random_matrix<T>(rows + 3, cols + 5, dtype, static_cast<uint32_t>(rows * 71 + cols));
  Tensor window = big.slice(0, 1, 1 + rows).slice(1, 2, 2 + cols);  // (rows, cols)
  const T* b = big.data<T>();
  auto source = [&](int64_t i, int64_t j) { return b[(1 + i) * (cols + 5) + 2 + j]; };

  Tensor out = window.t().contiguous();  // (cols, rows)
  ASSERT_EQ(out.shape(), (Shape{cols, rows}));
  ASSERT_TRUE(out.is_contiguous());
  const T* o = out.data<T>();
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) {
      ASSERT_TRUE(same_bits(o[j * rows + i], source(i, j))) << rows << " x " << cols << " at " << j << ", " << i;
    }
  }

  // dst: (cols + 4, rows + 6) of sentinels; its window at (3, 1) receives
  // the copy through a transposed view, so dst's unit stride is along the
  // source's rows.
  Tensor dst = random_matrix<T>(cols + 4, rows + 6, dtype, 7u);
  Tensor before = dst.clone();
  dst.slice(0, 3, 3 + cols).slice(1, 1, 1 + rows).t().copy_(window);
  const T* d = dst.data<T>();
  const T* d0 = before.data<T>();
  for (int64_t j = 0; j < cols + 4; ++j) {
    for (int64_t i = 0; i < rows + 6; ++i) {
      bool inside = j >= 3 && j < 3 + cols && i >= 1 && i < 1 + rows;
      T want = inside ? source(i - 1, j - 3) : d0[j * (rows + 6) + i];
      ASSERT_TRUE(same_bits(d[j * (rows + 6) + i], want)) << rows << " x " << cols << " at " << j << ", " << i;
    }
  }
}

class CopyTransposeThreads : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_ = get_num_threads();
    set_num_threads(GetParam());
  }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = 1;
};

TEST_P(CopyTransposeThreads, AllSmallShapesEveryWidth) {
  for (int64_t rows = 1; rows <= 70; ++rows) {
    for (int64_t cols = 1; cols <= 70; ++cols) {
      check_copy<float>(DType::Float32, rows, cols);
      check_copy<int32_t>(DType::Int32, rows, cols);
      check_copy<double>(DType::Float64, rows, cols);
      if (HasFatalFailure()) return;
    }
  }
}

// Big enough that parallel_for splits the work across threads.
TEST_P(CopyTransposeThreads, LargeAndPowerOfTwoShapes) {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{512, 512}, {1000, 333}, {257, 1029}, {64, 2048}}) {
    check_copy<float>(DType::Float32, rows, cols);
    check_copy<int32_t>(DType::Int32, rows, cols);
    check_copy<double>(DType::Float64, rows, cols);
    check_copy<Half>(DType::Float16, rows, cols);  // 2-byte: always the tiled reference
  }
}

// Neither operand contiguous along a loop dim (every other column): no
// kernel applies; the copy must still be right.
TEST_P(CopyTransposeThreads, StridedBothWaysFallsBackCorrectly) {
  Tensor big = random_matrix<float>(90, 140, DType::Float32, 3u);
  Tensor view = big.slice(1, 0, 140, 2);  // (90, 70), column stride 2
  Tensor out = view.t().contiguous();     // (70, 90)
  const float* b = big.data<float>();
  const float* o = out.data<float>();
  for (int64_t j = 0; j < 70; ++j) {
    for (int64_t i = 0; i < 90; ++i) ASSERT_TRUE(same_bits(o[j * 90 + i], b[i * 140 + 2 * j]));
  }
}

// A batch of transposes: a channels-last (N, C, H, W) made contiguous (N
// matrices (H*W, C) -> (C, H*W)) and the reverse, and a 5-d permute whose two
// outer dims both repeat the transpose; every element against the index
// formula, for 1, 2, 4 and 8-byte elements.
template <class T>
void check_batched(DType dtype) {
  for (auto [n, c, h, w] : std::vector<std::array<int64_t, 4>>{{64, 16, 5, 5}, {3, 6, 14, 14}, {2, 33, 3, 7}}) {
    Tensor flat = random_matrix<T>(n, h * w * c, dtype, static_cast<uint32_t>(n * 7 + c));
    const T* f = flat.data<T>();
    // flat holds (N, H, W, C): the channels-last tensor is its permuted view.
    Tensor channels_last = flat.view({n, h, w, c}).permute({0, 3, 1, 2});  // (N, C, H, W)
    Tensor nchw = channels_last.contiguous();
    const T* o = nchw.data<T>();
    for (int64_t i = 0; i < n * c * h * w; ++i) {
      const int64_t x = i % w, y = i / w % h, ch = i / (w * h) % c, b = i / (w * h * c);
      ASSERT_TRUE(same_bits(o[i], f[((b * h + y) * w + x) * c + ch])) << n << "x" << c << "x" << h << "x" << w;
    }
    Tensor back = nchw.permute({0, 2, 3, 1}).contiguous();  // (N, H, W, C) again
    ASSERT_EQ(std::memcmp(back.data<T>(), f, static_cast<size_t>(flat.numel()) * sizeof(T)), 0);
  }
  Tensor five = random_matrix<T>(3 * 4, 9 * 10 * 2, dtype, 11u).view({3, 4, 9, 10, 2});
  Tensor out = five.permute({0, 1, 3, 2, 4}).select(4, 1).contiguous();  // (3, 4, 10, 9)
  const T* s5 = five.data<T>();
  const T* o5 = out.data<T>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t a = i % 9, b = i / 9 % 10, q = i / 90 % 4, p = i / 360;
    ASSERT_TRUE(same_bits(o5[i], s5[(((p * 4 + q) * 9 + a) * 10 + b) * 2 + 1])) << i;
  }
}

TEST_P(CopyTransposeThreads, BatchesOfTransposes) {
  check_batched<uint8_t>(DType::UInt8);
  check_batched<Half>(DType::Float16);
  check_batched<float>(DType::Float32);
  check_batched<double>(DType::Float64);
}

INSTANTIATE_TEST_SUITE_P(Threads, CopyTransposeThreads, ::testing::Values(1, 2));

}  // namespace
}  // namespace kiln
