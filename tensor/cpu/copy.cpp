// CPU copy (with dtype conversion) and fill.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "tensor/cpu/copy_simd.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/loops.h"
#include "tensor/numeric_cast.h"

namespace kiln::cpu {

CpuBackend& backend() {
  static CpuBackend instance;
  return instance;
}

// Below this many elements a copy stays on one thread.
static constexpr int64_t kCopyGrain = 1 << 15;

// Edge of the square tiles a transposing copy walks (see copy_tiled_2d).
static constexpr int64_t kTile = 8;

// A copy whose two inner merged dims are inner in one operand and outer in
// the other (dst = src.t().contiguous()) reads or writes a new cache line per
// element if walked row by row. Walking small tiles uses each line of both
// operands while it is in cache. The tile is 8 wide because the rows of a
// power-of-two matrix sit a multiple of 4 KiB apart and so share one L1 set:
// 8 of them fit the 8 ways, 16 or 32 evict each other (measured: 4096 x 4096
// float32 at 4.3 GB/s with 8, 3.4 with 16, 2.1 with 32).
//
// Any outer dims repeat the 2-d transpose: a batch of matrices, as a
// channels-last (N, C, H, W) made contiguous is N transposes of (H*W, C).
// Transposes holds where each matrix starts.
struct Transposes {
  int64_t rows, cols;                            // the loop's dims 1 and 0
  std::array<int64_t, 2> inner, outer;           // their byte strides in dst and src
  char* dst;
  const char* src;
  std::vector<std::array<int64_t, 2>> offsets;  // per matrix: byte offsets in dst and src

  explicit Transposes(const StridedLoop<2>& loop)
      : rows(loop.sizes()[1]), cols(loop.sizes()[0]), inner(loop.strides()[0]), outer(loop.strides()[1]),
        dst(loop.base(0)), src(loop.base(1)) {
    // Walk the outer dims (2 and up) as an odometer, innermost first.
    const int64_t ndim = loop.ndim();
    std::vector<int64_t> index(static_cast<size_t>(std::max<int64_t>(ndim - 2, 0)), 0);
    for (int64_t m = 0, count = loop.numel() / (rows * cols); m < count; ++m) {
      std::array<int64_t, 2> at{0, 0};
      for (int64_t d = 2; d < ndim; ++d) {
        for (size_t k = 0; k < 2; ++k) at[k] += index[d - 2] * loop.strides()[d][k];
      }
      offsets.push_back(at);
      for (int64_t d = 2; d < ndim && ++index[d - 2] == loop.sizes()[d]; ++d) index[d - 2] = 0;
    }
  }
};

// The portable path, and the reference for copy_transposed_simd below.
template <class Bits>
static void copy_tiled_2d(const Transposes& t) {
  const int64_t row_tiles = (t.rows + kTile - 1) / kTile;
  const int64_t tasks = row_tiles * static_cast<int64_t>(t.offsets.size());
  parallel_for(0, tasks, std::max<int64_t>(1, kCopyGrain / (kTile * t.cols)), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t it = task % row_tiles;
      const auto& at = t.offsets[static_cast<size_t>(task / row_tiles)];
      char* dst = t.dst + at[0];
      const char* src = t.src + at[1];
      int64_t i_end = std::min(t.rows, (it + 1) * kTile);
      for (int64_t j0 = 0; j0 < t.cols; j0 += kTile) {
        int64_t j_end = std::min(t.cols, j0 + kTile);
        for (int64_t i = it * kTile; i < i_end; ++i) {
          for (int64_t j = j0; j < j_end; ++j) {
            *reinterpret_cast<Bits*>(dst + i * t.outer[0] + j * t.inner[0]) =
                *reinterpret_cast<const Bits*>(src + i * t.outer[1] + j * t.inner[1]);
          }
        }
      }
    }
  });
}

// Rows of the source matrix one parallel_for task of copy_transposed_simd
// takes at a time: a whole number of the kernels' 16-row cache blocks.
static constexpr int64_t kSimdRows = 16;

// The transposing copy with register-tile kernels (tensor/cpu/copy_simd.h),
// when the elements are 1, 4 or 8 bytes, one operand is contiguous along the
// loop's inner dim and the other along its outer dim, and the CPU has AVX2.
// Returns false (having done nothing) otherwise.
static bool copy_transposed_simd(const Transposes& t, int64_t size) {
  if ((size != 1 && size != 4 && size != 8) || simd_level() < SimdLevel::Avx2) return false;
  // The kernels read src (m, n) row by row and write dst (n, m); name the
  // loop's dims so that src's unit stride is along n.
  int64_t m, n, ld_src, ld_dst;
  if (t.inner[0] == size && t.outer[1] == size) {  // dst[i, j] = src[j, i]
    m = t.cols, n = t.rows, ld_src = t.inner[1], ld_dst = t.outer[0];
  } else if (t.inner[1] == size && t.outer[0] == size) {  // dst[j, i] = src[i, j]
    m = t.rows, n = t.cols, ld_src = t.outer[1], ld_dst = t.inner[0];
  } else {
    return false;
  }
  auto kernel = size == 1 ? transpose_8_avx2 : size == 4 ? transpose_32_avx2 : transpose_64_avx2;
  const int64_t blocks = (m + kSimdRows - 1) / kSimdRows;
  const int64_t tasks = blocks * static_cast<int64_t>(t.offsets.size());
  parallel_for(0, tasks, std::max<int64_t>(1, kCopyGrain / (kSimdRows * n)), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const auto& at = t.offsets[static_cast<size_t>(task / blocks)];
      const int64_t i0 = task % blocks * kSimdRows, i1 = std::min(m, i0 + kSimdRows);
      kernel(t.dst + at[0] + i0 * size, ld_dst, t.src + at[1] + i0 * ld_src, ld_src, i1 - i0, n);
    }
  });
  return true;
}

// True when the loop's two inner dims are contiguous along different dims
// in the two operands (each matrix at least a tile): the transposing case
// copy_tiled_2d is for. Outer dims, if any, make it a batch of them.
static bool is_transposing(const StridedLoop<2>& loop, int64_t element_size) {
  if (loop.ndim() < 2 || loop.sizes()[0] * loop.sizes()[1] < kTile * kTile) return false;
  const auto& inner = loop.strides()[0];
  const auto& outer = loop.strides()[1];
  return (inner[0] == element_size) != (inner[1] == element_size) && inner[0] != 0 && inner[1] != 0 &&
         outer[0] != 0 && outer[1] != 0;
}

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "copy: the CPU backend cannot copy from ",
             src.device(), " to ", dst.device());
  StridedLoop<2> loop({&dst, &src});
  if (dst.dtype() == src.dtype()) {
    // Same dtype: move bits, typed by width so that strided runs compile to
    // plain loads and stores rather than a memcpy call per element.
    auto copy_bits = [&]<class Bits>() {
      if (is_transposing(loop, sizeof(Bits))) {
        const Transposes t(loop);
        if (copy_transposed_simd(t, sizeof(Bits))) return;
        return copy_tiled_2d<Bits>(t);
      }
      loop.run(kCopyGrain, [](char** p, const int64_t* s, int64_t n) {
        constexpr int64_t size = sizeof(Bits);
        if (s[0] == size && s[1] == size) {
          std::memcpy(p[0], p[1], n * size);
          return;
        }
        for (int64_t i = 0; i < n; ++i) {
          *reinterpret_cast<Bits*>(p[0] + i * s[0]) = *reinterpret_cast<const Bits*>(p[1] + i * s[1]);
        }
      });
    };
    switch (dst.element_size()) {
      case 1: copy_bits.operator()<uint8_t>(); return;
      case 2: copy_bits.operator()<uint16_t>(); return;
      case 4: copy_bits.operator()<uint32_t>(); return;
      default: copy_bits.operator()<uint64_t>(); return;
    }
  }
  visit_dtype(dst.dtype(), [&]<class D>() {
    visit_dtype(src.dtype(), [&]<class S>() {
      loop.run(kCopyGrain, [](char** p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          S value = *reinterpret_cast<const S*>(p[1] + i * s[1]);
          // Through the compute type so that 16-bit floats convert via float;
          // floats to integers as CUDA does (Note [Float to integer conversion]).
          *reinterpret_cast<D*>(p[0] + i * s[0]) = numeric_cast<D>(static_cast<ComputeType<S>>(value));
        }
      });
    });
  });
}

void CpuBackend::fill(const Tensor& out, Scalar value) {
  StridedLoop<1> loop({&out});
  visit_dtype(out.dtype(), [&]<class T>() {
    T v = value.to<T>();
    loop.run(kCopyGrain, [v](char** p, const int64_t* s, int64_t n) {
      if (s[0] == static_cast<int64_t>(sizeof(T))) {
        T* dst = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) dst[i] = v;
        return;
      }
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

}  // namespace kiln::cpu
