// AVX2 transposes of 1-, 4- and 8-byte elements (tensor/cpu/copy_simd.h).
// Compiled with -mavx2 -mfma; called only when simd_level() allows
// (Note [SIMD dispatch]). The elements are moved as float / double lanes, but
// only by shuffles, which never change bits (NaN payloads, integers survive).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tensor/cpu/copy_simd.h"

namespace kiln::cpu {
namespace {

// Edge of the cache block the register tiles are walked in. 16 rows of 16
// 4-byte elements are 16 whole 64-byte lines on each side, so every line of
// src and dst is finished as soon as it is touched. (An 8 x 8 tile would use
// half lines and revisit them after 8 more lines of the same L1 set had come
// in: the rows of a power-of-two matrix are a multiple of 4 KiB apart, see
// copy_tiled_2d in tensor/cpu/copy.cpp.)
constexpr int64_t kBlockBytes = 64;

// From this many bytes per call on, 4-byte transposes into 32-byte aligned
// rows write around the cache: dst is not read back soon, and skipping the
// read-for-ownership of each dst line saves a third of the memory traffic.
constexpr int64_t kStreamBytes = 1 << 20;

// dst (8, 8) = src (8, 8)^T, 4-byte elements. Stream: dst rows are 32-byte
// aligned and written with non-temporal stores.
template <bool Stream>
inline void transpose_8x8_32(char* dst, int64_t ld_dst, const char* src, int64_t ld_src) {
  __m256 r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + k * ld_src));
  // Interleave pairs of rows: t[2p] holds rows 2p, 2p+1 elements {0,1,4,5}
  // interleaved, t[2p+1] elements {2,3,6,7}.
  __m256 t[8];
  for (int p = 0; p < 4; ++p) {
    t[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);
  }
  // Gather 4-element columns within each 128-bit half.
  __m256 s[8];
  for (int q = 0; q < 2; ++q) {
    const __m256* u = t + 4 * q;
    s[4 * q + 0] = _mm256_shuffle_ps(u[0], u[2], 0x44);
    s[4 * q + 1] = _mm256_shuffle_ps(u[0], u[2], 0xEE);
    s[4 * q + 2] = _mm256_shuffle_ps(u[1], u[3], 0x44);
    s[4 * q + 3] = _mm256_shuffle_ps(u[1], u[3], 0xEE);
  }
  // Join the halves: rows 0..3 of src give the low half of each output row.
  auto store = [&](int k, __m256 v) {
    float* p = reinterpret_cast<float*>(dst + k * ld_dst);
    if constexpr (Stream) {
      _mm256_stream_ps(p, v);
    } else {
      _mm256_storeu_ps(p, v);
    }
  };
  for (int k = 0; k < 4; ++k) {
    store(k, _mm256_permute2f128_ps(s[k], s[k + 4], 0x20));
    store(k + 4, _mm256_permute2f128_ps(s[k], s[k + 4], 0x31));
  }
}

// dst (4, 4) = src (4, 4)^T, 8-byte elements.
inline void transpose_4x4_64(char* dst, int64_t ld_dst, const char* src, int64_t ld_src) {
  __m256d r[4];
  for (int k = 0; k < 4; ++k) r[k] = _mm256_loadu_pd(reinterpret_cast<const double*>(src + k * ld_src));
  __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  auto row = [&](int k) { return reinterpret_cast<double*>(dst + k * ld_dst); };
  _mm256_storeu_pd(row(0), _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(row(1), _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(row(2), _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(row(3), _mm256_permute2f128_pd(t1, t3, 0x31));
}

// dst (8, 8) = src (8, 8)^T, bytes: three rounds of unpacks pair rows, then
// pairs of pairs, then the halves, and each 128-bit result holds two output
// rows.
inline void transpose_8x8_8(char* dst, int64_t ld_dst, const char* src, int64_t ld_src) {
  __m128i r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + k * ld_src));
  __m128i a[4], b[4];
  for (int p = 0; p < 4; ++p) a[p] = _mm_unpacklo_epi8(r[2 * p], r[2 * p + 1]);  // rows 2p, 2p+1 interleaved
  b[0] = _mm_unpacklo_epi16(a[0], a[1]);  // columns 0..3 of rows 0..3
  b[1] = _mm_unpackhi_epi16(a[0], a[1]);  // columns 4..7 of rows 0..3
  b[2] = _mm_unpacklo_epi16(a[2], a[3]);  // columns 0..3 of rows 4..7
  b[3] = _mm_unpackhi_epi16(a[2], a[3]);
  const __m128i c[4] = {_mm_unpacklo_epi32(b[0], b[2]), _mm_unpackhi_epi32(b[0], b[2]),
                        _mm_unpacklo_epi32(b[1], b[3]), _mm_unpackhi_epi32(b[1], b[3])};  // columns 2q, 2q+1
  for (int q = 0; q < 4; ++q) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 2 * q * ld_dst), c[q]);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + (2 * q + 1) * ld_dst), _mm_unpackhi_epi64(c[q], c[q]));
  }
}

// The walk shared by every width: cache blocks of kBlockBytes / sizeof(Bits)
// square, each covered by Tile x Tile register transposes where whole, and
// element by element at the right and bottom edges.
template <class Bits, int64_t Tile, class Kernel>
void transpose_blocked(char* dst, int64_t ld_dst, const char* src, int64_t ld_src, int64_t rows, int64_t cols,
                       Kernel tile) {
  constexpr int64_t size = sizeof(Bits);
  constexpr int64_t block = kBlockBytes / size;
  auto scalar = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = j0; j < j1; ++j) {
        *reinterpret_cast<Bits*>(dst + j * ld_dst + i * size) = *reinterpret_cast<const Bits*>(src + i * ld_src + j * size);
      }
    }
  };
  const int64_t rows_tiled = rows / Tile * Tile, cols_tiled = cols / Tile * Tile;
  for (int64_t i0 = 0; i0 < rows_tiled; i0 += block) {
    const int64_t i1 = std::min(rows_tiled, i0 + block);
    for (int64_t j0 = 0; j0 < cols_tiled; j0 += block) {
      const int64_t j1 = std::min(cols_tiled, j0 + block);
      for (int64_t j = j0; j < j1; j += Tile) {
        for (int64_t i = i0; i < i1; i += Tile) tile(dst + j * ld_dst + i * size, ld_dst, src + i * ld_src + j * size, ld_src);
      }
    }
    scalar(i0, i1, cols_tiled, cols);
  }
  scalar(rows_tiled, rows, 0, cols);
}

}  // namespace

void transpose_32_avx2(char* dst, int64_t ld_dst, const char* src, int64_t ld_src, int64_t rows, int64_t cols) {
  if (reinterpret_cast<uintptr_t>(dst) % 32 == 0 && ld_dst % 32 == 0 && rows * cols * 4 >= kStreamBytes) {
    transpose_blocked<uint32_t, 8>(dst, ld_dst, src, ld_src, rows, cols, transpose_8x8_32<true>);
    _mm_sfence();
  } else {
    transpose_blocked<uint32_t, 8>(dst, ld_dst, src, ld_src, rows, cols, transpose_8x8_32<false>);
  }
}

void transpose_64_avx2(char* dst, int64_t ld_dst, const char* src, int64_t ld_src, int64_t rows, int64_t cols) {
  transpose_blocked<uint64_t, 4>(dst, ld_dst, src, ld_src, rows, cols, transpose_4x4_64);
}

void transpose_8_avx2(char* dst, int64_t ld_dst, const char* src, int64_t ld_src, int64_t rows, int64_t cols) {
  transpose_blocked<uint8_t, 8>(dst, ld_dst, src, ld_src, rows, cols, transpose_8x8_8);
}

namespace {

// Pixels [0, 16) of 8 byte planes (p[c]: plane c's 16 bytes) as 16 pixels
// of 8 bytes: px[k] holds pixels 2k (low half) and 2k + 1.
void transpose_8x16_u8(const __m128i p[8], __m128i px[8]) {
  __m128i pairs[8], quads[8];  // planes (2c, 2c + 1) and (4c .. 4c + 3) side by side
  for (int c = 0; c < 4; ++c) {
    pairs[2 * c] = _mm_unpacklo_epi8(p[2 * c], p[2 * c + 1]);      // pixels 0..7
    pairs[2 * c + 1] = _mm_unpackhi_epi8(p[2 * c], p[2 * c + 1]);  // pixels 8..15
  }
  for (int c = 0; c < 2; ++c) {
    for (int half = 0; half < 2; ++half) {
      const __m128i a = pairs[4 * c + half], b = pairs[4 * c + 2 + half];
      quads[4 * c + 2 * half] = _mm_unpacklo_epi16(a, b);      // pixels 8*half + 0..3
      quads[4 * c + 2 * half + 1] = _mm_unpackhi_epi16(a, b);  // pixels 8*half + 4..7
    }
  }
  for (int k = 0; k < 4; ++k) {
    px[2 * k] = _mm_unpacklo_epi32(quads[k], quads[4 + k]);      // pixels 4k, 4k + 1
    px[2 * k + 1] = _mm_unpackhi_epi32(quads[k], quads[4 + k]);  // pixels 4k + 2, 4k + 3
  }
}

// 16 pixels' bytes to dst, 8 a pixel at dst + x * planes: bytes past a
// pixel's planes land on the next pixels', which their own stores rewrite;
// the last pixel's spill needs 8 - planes bytes of room after it.
void store_pixels(uint8_t* dst, const __m128i px[8], int64_t planes) {
  for (int k = 0; k < 8; ++k) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + (2 * k) * planes), px[k]);
    _mm_storeh_pd(reinterpret_cast<double*>(dst + (2 * k + 1) * planes), _mm_castsi128_pd(px[k]));
  }
}

}  // namespace

void interleave_planes_u8_avx2(uint8_t* dst, const uint8_t* src, int64_t plane_stride, int64_t planes, int64_t n) {
  __m128i p[8], px[8];
  for (int c = 0; c < 8; ++c) p[c] = _mm_setzero_si128();
  int64_t x = 0;
  // Whole steps whose last pixel's 8-byte store ends inside dst (its spill
  // is rewritten by the pixels after it).
  for (; x + 16 <= n && (x + 15) * planes + 8 <= n * planes; x += 16) {
    for (int64_t c = 0; c < planes; ++c)
      p[c] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c * plane_stride + x));
    transpose_8x16_u8(p, px);
    store_pixels(dst + x * planes, px, planes);
  }
  // The rest (up to 22 pixels), through buffers: nothing read or written
  // past the planes and dst.
  for (; x < n; x += 16) {
    const int64_t pixels = std::min<int64_t>(16, n - x);
    alignas(16) uint8_t in[16] = {}, out[16 * 8 + 8];
    for (int64_t c = 0; c < planes; ++c) {
      std::memcpy(in, src + c * plane_stride + x, static_cast<size_t>(pixels));
      p[c] = _mm_load_si128(reinterpret_cast<const __m128i*>(in));
    }
    transpose_8x16_u8(p, px);
    store_pixels(out, px, planes);
    std::memcpy(dst + x * planes, out, static_cast<size_t>(pixels * planes));
  }
}

}  // namespace kiln::cpu
