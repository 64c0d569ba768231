// The int8 GEMM's register tiles (Note [Int8 GEMM packing] in
// qgemm_kernels.h), written once against an instruction set's traits, and
// the vectorized output stage. Include only from qgemm_avx2.cpp,
// qgemm_avxvnni.cpp, qgemm_avx512vnni.cpp, qgemm_amx.cpp and
// quantized_conv_direct_avx512vbmi.cpp (which stores through
// store_column_zmm): everything here uses intrinsics and is compiled with
// those files' instruction sets.
//
// An Isa (each file defines its own) provides:
//   V, kLanes (columns per vector), kGroup (k values per lane), kGroupBytes
//   (bytes of one group across the lanes in a packed panel), AElem (what A
//   holds: uint8_t, or int16_t for Avx2's kernel that widens A first);
//   load_i32(p), add_i32(x, y), store_i32(p, v), load_w(p) (64-byte-aligned
//   panel data),
//   broadcast(p) (kGroup values of A at p, in every lane),
//   broadcast_tail(p, count) (count < kGroup values, the rest zero),
//   dot(acc, a, w) (acc + the lane-wise kGroup-term dot products);
//   kMaxNV (vectors per tile row), rows(nv) (tile rows for nv vectors), and
//   finish(c, rows, nv, m0, n0, e): the output stage of a tile of
//   accumulators c (rows x nv*kLanes int32, row-major).
// YmmBytes below has all but rows and dot for the 8-lane byte kernels.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "tensor/cpu/qgemm_kernels.h"

namespace kiln::cpu::qgemm_detail {
// Unnamed: each including file gets its own copy compiled for its
// instruction set, so no instantiation is shared between the objects.
namespace {

// Writes a tile's finished values, held row-major in tmp (rows x cols of T,
// row stride cols), to out through the output strides. Columns outer and
// rows inner: with stride_m = 1 (a convolution's NCHW plane) each column's
// rows are adjacent in out.
template <class T>
void scatter_tile(const T* tmp, int rows, int cols, int64_t m0, int64_t n0, const Epilogue& e) {
  T* out = static_cast<T*>(e.out) + m0 * e.stride_m + n0 * e.stride_n;
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) out[i * e.stride_m + j * e.stride_n] = tmp[i * cols + j];
}

#if defined(__AVX512F__)
// The output stage of up to 16 outputs of one column n, one per lane (the
// float operations of store_scalar and quant_math::requantize_value, one
// instruction each), stored under `mask` at out + at onwards: a column of
// an NCHW plane, whose outputs are adjacent. The direct int8 convolution
// (quantized_conv_direct_avx512vbmi.cpp) stores through it too.
inline void store_column_zmm(const Epilogue& e, int64_t n, int64_t at, __mmask16 mask, __m512i acc) {
  switch (e.kind) {
    case QGemmOutput::Kind::Int32: _mm512_mask_storeu_epi32(static_cast<int32_t*>(e.out) + at, mask, acc); break;
    case QGemmOutput::Kind::Float: {
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(e.scale[n]));
      if (e.float_bias) f = _mm512_add_ps(f, _mm512_set1_ps(e.float_bias[n]));
      _mm512_mask_storeu_ps(static_cast<float*>(e.out) + at, mask, f);
      break;
    }
    case QGemmOutput::Kind::UInt8: {
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(e.scale[n]));
      f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      f = _mm512_add_ps(f, _mm512_set1_ps(e.zero_point));
      f = _mm512_max_ps(f, _mm512_set1_ps(e.lo));  // NaN -> lo, as fmax(NaN, lo)
      f = _mm512_min_ps(f, _mm512_set1_ps(e.hi));
      const __m128i q = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(f));  // in [0, 255]: exact
      _mm_mask_storeu_epi8(static_cast<uint8_t*>(e.out) + at, mask, q);
      break;
    }
  }
}

// Four vectors of rounded outputs less their zero point, already clamped
// to at most hi - zero_point (below that anything, INT32_MIN included), to
// 64 bytes in order: saturating packs to int16, the zero point added there
// (saturating), packs to bytes, the dwords put back in order (after the
// packs, dword 4l + j holds lanes 4l..4l+3 of vector j), and the bytes
// clamped to [lo, hi]. Half the operations of narrowing one vector at a
// time (finish_zmm_uint8).
struct NarrowU8Zmm {
  __m512i zero_point16, lo8, hi8, order;
  NarrowU8Zmm(float zero_point, float lo, float hi)
      : zero_point16(_mm512_set1_epi16(static_cast<int16_t>(zero_point))),
        lo8(_mm512_set1_epi8(static_cast<char>(static_cast<uint8_t>(lo)))),
        hi8(_mm512_set1_epi8(static_cast<char>(static_cast<uint8_t>(hi)))),
        order(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)) {}
  __m512i operator()(const __m512i* q) const {
    const __m512i q01 = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[1]), zero_point16);
    const __m512i q23 = _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[3]), zero_point16);
    const __m512i bytes = _mm512_permutexvar_epi32(order, _mm512_packus_epi16(q01, q23));
    return _mm512_min_epu8(_mm512_max_epu8(bytes, lo8), hi8);
  }
};

// Whether a tile of nv vectors a row, columns from n0, takes the packed
// narrowing 4 / nv rows at a time: its vectors whole, and the 64 bytes of
// 4 / nv rows stored whole (rows of 64, two stores of 32, or four rows of 16
// that follow one another).
inline bool packs_rows(int nv, int64_t n0, const Epilogue& e) {
  return e.n - n0 >= nv * 16 && (nv == 4 || nv == 2 || (nv == 1 && e.stride_m == 16));
}

// The scales of the four vectors of such a group: columns n0 + (j % nv) * 16.
inline void group_scales(const float* scale, int64_t n0, int nv, __m512* column_scale) {
  for (int j = 0; j < 4; ++j) column_scale[j] = _mm512_loadu_ps(scale + n0 + (j % nv) * 16);
}

// Stores the 64 bytes of 4 / nv rows from `row`, rows stride_m apart.
inline void store_packed_rows(uint8_t* row, int64_t stride_m, int nv, __m512i bytes) {
  if (nv == 2) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row), _mm512_castsi512_si256(bytes));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + stride_m), _mm512_extracti64x4_epi64(bytes, 1));
  } else {
    _mm512_storeu_si512(row, bytes);  // one row of 64, or four contiguous rows of 16
  }
}

// The UInt8 stage with the residual add (Note [Residual add in the output
// stage] in qgemm.h) of a register tile on 16 lanes, columns adjacent
// (stride_n 1). The conv's value enters the add as q - zero_point, which is
// what the clamp gives when its bounds are shifted instead (see the Note).
inline void finish_zmm_residual(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
  // The Epilogue in locals, as finish_zmm_uint8 below.
  const AddLanesZmm add(e.residual_add);
  const __m512 lo = _mm512_set1_ps(e.lo - e.zero_point), hi = _mm512_set1_ps(e.hi - e.zero_point);
  const float* scale = e.scale;
  const int64_t stride_m = e.stride_m;
  uint8_t* out = static_cast<uint8_t*>(e.out) + m0 * stride_m;
  const uint8_t* residual = e.residual + m0 * stride_m;
  int i0 = 0;
  if (packs_rows(nv, n0, e)) {
    const NarrowU8Zmm narrow(e.residual_add.zero_point_out, e.residual_add.lo, e.residual_add.hi);
    const int group = 4 / nv;
    __m512 column_scale[4];
    group_scales(scale, n0, nv, column_scale);
    for (; i0 + group <= rows; i0 += group) {
      __m512i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m512i acc = _mm512_load_si512(c + (i0 * nv + j) * 16);
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), column_scale[j]);
        f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);  // q - zero_point; NaN -> lo, as fmax(NaN, lo)
        const int64_t at = (i0 + j / nv) * stride_m + n0 + (j % nv) * 16;
        const __m512i r = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(residual + at)));
        q[j] = add_lanes_rounded(f, r, add);
      }
      store_packed_rows(out + i0 * stride_m + n0, stride_m, nv, narrow(q));
    }
  }
  // The rest one vector at a time.
  const int valid_vectors = static_cast<int>(std::min<int64_t>(nv, (e.n - n0 + 15) / 16));
  for (int v = 0; v < valid_vectors; ++v) {
    const int64_t n = n0 + v * 16;
    const int valid = static_cast<int>(std::min<int64_t>(16, e.n - n));
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
    const __m512 column_scale = _mm512_loadu_ps(scale + n);
    for (int i = i0; i < rows; ++i) {
      const __m512i acc = _mm512_load_si512(c + (i * nv + v) * 16);
      const int64_t at = i * stride_m + n;
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), column_scale);
      f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);  // q - zero_point; NaN -> lo, as fmax(NaN, lo)
      const __m512i r = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, residual + at));
      const __m512i q = add_lanes_shifted(f, r, add);  // in [0, 255]: narrowed exactly
      _mm_mask_storeu_epi8(out + at, mask, _mm512_cvtepi32_epi8(q));
    }
  }
}

// The UInt8 stage of a register tile into adjacent columns (stride_n 1,
// a channels-last output), the hot loop of every int8 convolution. The
// clamp is done before the rounding with its bounds shifted by the zero
// point (as finish_zmm_residual; the bounds are integers, so clamping and
// rounding commute), and the rounding rides in the conversion. Where four
// vectors in a row are whole they are narrowed together (NarrowU8Zmm),
// which leaves only the upper bound to clamp in float. The Epilogue is read
// into locals first: the byte stores may alias anything, and would make the
// compiler load it again after each one.
inline void finish_zmm_uint8(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
  const __m512 lo = _mm512_set1_ps(e.lo - e.zero_point), hi = _mm512_set1_ps(e.hi - e.zero_point);
  const __m512i zero_point = _mm512_set1_epi32(static_cast<int32_t>(e.zero_point));
  const float* scale = e.scale;
  const int64_t stride_m = e.stride_m;
  uint8_t* out = static_cast<uint8_t*>(e.out) + m0 * stride_m + n0;
  int i = 0;
  if (packs_rows(nv, n0, e)) {
    const NarrowU8Zmm narrow(e.zero_point, e.lo, e.hi);
    const int group = 4 / nv;
    __m512 column_scale[4];
    group_scales(scale, n0, nv, column_scale);
    for (; i + group <= rows; i += group) {
      __m512i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m512i acc = _mm512_load_si512(c + (i * nv + j) * 16);
        const __m512 f = _mm512_min_ps(hi, _mm512_mul_ps(_mm512_cvtepi32_ps(acc), column_scale[j]));  // NaN stays
        q[j] = _mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      }
      store_packed_rows(out + i * stride_m, stride_m, nv, narrow(q));
    }
  }
  // The rest one vector at a time.
  const int valid_vectors = static_cast<int>(std::min<int64_t>(nv, (e.n - n0 + 15) / 16));
  for (int v = 0; v < valid_vectors; ++v) {
    const int64_t n = n0 + v * 16;
    const int valid = static_cast<int>(std::min<int64_t>(16, e.n - n));
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
    const __m512 column_scale = _mm512_loadu_ps(scale + n);
    for (int r = i; r < rows; ++r) {
      const __m512i acc = _mm512_load_si512(c + (r * nv + v) * 16);
      __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), column_scale);
      f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);  // NaN -> lo, as fmax(NaN, lo)
      const __m512i q = _mm512_add_epi32(_mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                         zero_point);
      _mm_mask_storeu_epi8(out + r * stride_m + v * 16, mask, _mm512_cvtepi32_epi8(q));
    }
  }
}

// The output stage of a register tile on 16 lanes.
inline void finish_zmm(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
  if (e.residual) return finish_zmm_residual(c, rows, nv, m0, n0, e);
  const int cols = static_cast<int>(std::min<int64_t>(nv * 16, e.n - n0));
  if (e.stride_m == 1 && e.stride_n != 1) {
    // A convolution's NCHW plane: each column's rows are adjacent in out.
    // Gather a column of the tile (up to 16 rows, one per lane) and store
    // it whole, instead of scattering the outputs one by one.
    const __m512i index = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(nv * 16));
    const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
    for (int j = 0; j < cols; ++j) {
      const int64_t n = n0 + j;
      const __m512i acc = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, index, c + j, 4);
      store_column_zmm(e, n, m0 + n * e.stride_n, mask, acc);
    }
    return;
  }
  const bool direct = e.stride_n == 1;
  if (direct && e.kind == QGemmOutput::Kind::UInt8) return finish_zmm_uint8(c, rows, nv, m0, n0, e);
  alignas(64) int32_t tmp32[16 * 64];  // rows <= 16, nv * 16 <= 64
  alignas(64) uint8_t tmp8[16 * 64];
  for (int i = 0; i < rows; ++i) {
    for (int v = 0; v < nv; ++v) {
      const int64_t n = n0 + v * 16;
      const int valid = static_cast<int>(std::min<int64_t>(16, e.n - n));
      if (valid <= 0) break;
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
      const __m512i acc = _mm512_load_si512(c + (i * nv + v) * 16);
      const int64_t at = (m0 + i) * e.stride_m + n;
      const int t = i * cols + v * 16;  // this vector's place in tmp
      switch (e.kind) {
        case QGemmOutput::Kind::Int32:
          if (direct) _mm512_mask_storeu_epi32(static_cast<int32_t*>(e.out) + at, mask, acc);
          else _mm512_mask_storeu_epi32(tmp32 + t, mask, acc);
          break;
        case QGemmOutput::Kind::Float: {
          __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(e.scale + n));
          if (e.float_bias) f = _mm512_add_ps(f, _mm512_loadu_ps(e.float_bias + n));
          if (direct) _mm512_mask_storeu_ps(static_cast<float*>(e.out) + at, mask, f);
          else _mm512_mask_storeu_ps(reinterpret_cast<float*>(tmp32) + t, mask, f);
          break;
        }
        case QGemmOutput::Kind::UInt8: {
          __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(e.scale + n));
          f = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          f = _mm512_add_ps(f, _mm512_set1_ps(e.zero_point));
          f = _mm512_max_ps(f, _mm512_set1_ps(e.lo));  // NaN -> lo, as fmax(NaN, lo)
          f = _mm512_min_ps(f, _mm512_set1_ps(e.hi));
          const __m128i q = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(f));  // in [0, 255]: exact
          if (direct) _mm_mask_storeu_epi8(static_cast<uint8_t*>(e.out) + at, mask, q);
          else _mm_mask_storeu_epi8(tmp8 + t, mask, q);
          break;
        }
      }
    }
  }
  if (direct) return;
  switch (e.kind) {
    case QGemmOutput::Kind::Int32: scatter_tile(tmp32, rows, cols, m0, n0, e); break;
    case QGemmOutput::Kind::Float: scatter_tile(reinterpret_cast<const float*>(tmp32), rows, cols, m0, n0, e); break;
    case QGemmOutput::Kind::UInt8: scatter_tile(tmp8, rows, cols, m0, n0, e); break;
  }
}
#endif

#if defined(__AVX2__)
// dst[0, n) = src[0, n) for a tile row, n <= 64 bytes, without a call to
// memcpy (whose size is not known here): whole 16-byte pieces, the last one
// overlapping the one before; under 16 bytes, two overlapping pieces of 8,
// 4 or 2 bytes, or one byte.
inline void copy_tile_row(uint8_t* dst, const uint8_t* src, int64_t n) {
  if (n >= 16) {
    for (int64_t i = 0; i + 16 < n; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + n - 16),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + n - 16)));
    return;
  }
  auto two = [&](auto piece) {
    constexpr int64_t size = sizeof(piece);
    std::memcpy(&piece, src, size);
    std::memcpy(dst, &piece, size);
    std::memcpy(&piece, src + n - size, size);
    std::memcpy(dst + n - size, &piece, size);
  };
  if (n >= 8) two(uint64_t{});
  else if (n >= 4) two(uint32_t{});
  else if (n >= 2) two(uint16_t{});
  else if (n == 1) dst[0] = src[0];
}

// finish_zmm_residual on 8 lanes. AVX2 has no byte-masked loads and
// stores: a vector past the last column goes through 8 bytes of its own.
inline void finish_ymm_residual(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
  const AddLanesYmm add(e.residual_add);
  const __m256 lo = _mm256_set1_ps(e.lo - e.zero_point), hi = _mm256_set1_ps(e.hi - e.zero_point);
  for (int i = 0; i < rows; ++i) {
    for (int v = 0; v < nv; ++v) {
      const int64_t n = n0 + v * 8;
      const int valid = static_cast<int>(std::min<int64_t>(8, e.n - n));
      if (valid <= 0) break;
      const __m256i acc = _mm256_load_si256(reinterpret_cast<const __m256i*>(c + (i * nv + v) * 8));
      const int64_t at = (m0 + i) * e.stride_m + n;
      __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(e.scale + n));
      f = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      f = _mm256_min_ps(_mm256_max_ps(f, lo), hi);  // q - zero_point; NaN -> lo, as fmax(NaN, lo)
      int64_t bytes = 0;
      std::memcpy(&bytes, e.residual + at, static_cast<size_t>(valid));
      const __m256i q = add_lanes_shifted(f, _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes)), add);
      const __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      bytes = _mm_cvtsi128_si64(_mm_packus_epi16(w16, w16));
      std::memcpy(static_cast<uint8_t*>(e.out) + at, &bytes, static_cast<size_t>(valid));
    }
  }
}

// The output stage on 8 lanes, as finish_zmm.
inline void finish_ymm(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
  if (e.residual) return finish_ymm_residual(c, rows, nv, m0, n0, e);
  const int cols = static_cast<int>(std::min<int64_t>(nv * 8, e.n - n0));
  if (e.stride_m == 1 && e.stride_n != 1 && rows <= 8 && cols >= 8) {
    // An NCHW plane: a tile's column at a time, as finish_zmm (for a tile
    // narrower than a vector the scattered stores below are as quick).
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i index = _mm256_mullo_epi32(lane, _mm256_set1_epi32(nv * 8));
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), lane);
    for (int j = 0; j < cols; ++j) {
      const int64_t n = n0 + j;
      const __m256i acc = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), c + j, index, mask, 4);
      const int64_t at = m0 + n * e.stride_n;
      switch (e.kind) {
        case QGemmOutput::Kind::Int32: _mm256_maskstore_epi32(static_cast<int32_t*>(e.out) + at, mask, acc); break;
        case QGemmOutput::Kind::Float: {
          __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(e.scale[n]));
          if (e.float_bias) f = _mm256_add_ps(f, _mm256_set1_ps(e.float_bias[n]));
          _mm256_maskstore_ps(static_cast<float*>(e.out) + at, mask, f);
          break;
        }
        case QGemmOutput::Kind::UInt8: {
          __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(e.scale[n]));
          f = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          f = _mm256_add_ps(f, _mm256_set1_ps(e.zero_point));
          f = _mm256_max_ps(f, _mm256_set1_ps(e.lo));
          f = _mm256_min_ps(f, _mm256_set1_ps(e.hi));
          const __m256i q = _mm256_cvttps_epi32(f);
          const __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
          const __m128i b = _mm_packus_epi16(w16, w16);
          uint8_t* dst = static_cast<uint8_t*>(e.out) + at;
          if (rows == 8) {
            _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), b);
          } else {
            alignas(16) uint8_t bytes[16];
            _mm_store_si128(reinterpret_cast<__m128i*>(bytes), b);
            std::memcpy(dst, bytes, rows);
          }
          break;
        }
      }
    }
    return;
  }
  alignas(32) int32_t tmp32[16 * 16];  // rows <= 16, nv * 8 <= 16
  alignas(32) uint8_t tmp8[16 * 16 + 8];
  for (int i = 0; i < rows; ++i) {
    for (int v = 0; v < nv; ++v) {
      const int64_t n = n0 + v * 8;
      if (n >= e.n) break;
      const __m256i acc = _mm256_load_si256(reinterpret_cast<const __m256i*>(c + (i * nv + v) * 8));
      // Whole vectors go to tmp (padded), and from there to out.
      const int t = i * nv * 8 + v * 8;
      switch (e.kind) {
        case QGemmOutput::Kind::Int32: _mm256_store_si256(reinterpret_cast<__m256i*>(tmp32 + t), acc); break;
        case QGemmOutput::Kind::Float: {
          __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(e.scale + n));
          if (e.float_bias) f = _mm256_add_ps(f, _mm256_loadu_ps(e.float_bias + n));
          _mm256_store_ps(reinterpret_cast<float*>(tmp32) + t, f);
          break;
        }
        case QGemmOutput::Kind::UInt8: {
          __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(e.scale + n));
          f = _mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          f = _mm256_add_ps(f, _mm256_set1_ps(e.zero_point));
          f = _mm256_max_ps(f, _mm256_set1_ps(e.lo));  // NaN -> lo, as fmax(NaN, lo)
          f = _mm256_min_ps(f, _mm256_set1_ps(e.hi));
          const __m256i q = _mm256_cvttps_epi32(f);  // in [0, 255]
          const __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
          _mm_storel_epi64(reinterpret_cast<__m128i*>(tmp8 + t), _mm_packus_epi16(w16, w16));
          break;
        }
      }
    }
  }
  const int stride = nv * 8;
  if (e.stride_n == 1) {
    const size_t eb = e.kind == QGemmOutput::Kind::UInt8 ? 1 : 4;
    const auto* src = e.kind == QGemmOutput::Kind::UInt8 ? tmp8 : reinterpret_cast<const uint8_t*>(tmp32);
    for (int i = 0; i < rows; ++i)
      copy_tile_row(static_cast<uint8_t*>(e.out) + ((m0 + i) * e.stride_m + n0) * eb, src + i * stride * eb,
                    cols * eb);
    return;
  }
  // scatter_tile wants rows cols apart: tmp rows are stride apart, so
  // scatter column by column through a view with that stride.
  switch (e.kind) {
    case QGemmOutput::Kind::Int32:
    case QGemmOutput::Kind::Float: {
      int32_t* out = static_cast<int32_t*>(e.out) + m0 * e.stride_m + n0 * e.stride_n;
      for (int j = 0; j < cols; ++j)
        for (int i = 0; i < rows; ++i) out[i * e.stride_m + j * e.stride_n] = tmp32[i * stride + j];
      break;
    }
    case QGemmOutput::Kind::UInt8: {
      uint8_t* out = static_cast<uint8_t*>(e.out) + m0 * e.stride_m + n0 * e.stride_n;
      for (int j = 0; j < cols; ++j)
        for (int i = 0; i < rows; ++i) out[i * e.stride_m + j * e.stride_n] = tmp8[i * stride + j];
      break;
    }
  }
}

// What the 8-lane Isas whose A is bytes in groups of 4 share (AvxVnni's
// vpdpbusd, and Avx2's vpmaddubsw kernel): each adds rows(nv) and dot.
struct YmmBytes {
  using V = __m256i;
  using AElem = uint8_t;
  static constexpr int kLanes = 8, kGroup = 4, kGroupBytes = 32, kMaxNV = 2;
  static V load_i32(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static V add_i32(V x, V y) { return _mm256_add_epi32(x, y); }
  static void store_i32(int32_t* p, V v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
  static V load_w(const char* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static V broadcast(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  static V broadcast_tail(const uint8_t* p, int count) {
    int32_t v = 0;
    std::memcpy(&v, p, count);
    return _mm256_set1_epi32(v);
  }
  static void finish(const int32_t* c, int rows, int nv, int64_t m0, int64_t n0, const Epilogue& e) {
    finish_ymm(c, rows, nv, m0, n0, e);
  }
};
#endif

// One register tile: MR rows of A against NV panels (NV * kLanes columns),
// the whole K at once, then the output stage. Row i's K lies in runs (ARuns
// in qgemm.h) from a + i * lda; ktail values follow the last run.
template <class Isa, int MR, int NV>
void tile(const typename Isa::AElem* a, int64_t lda, const ARuns& runs, int ktail, const char* w,
          int64_t panel_bytes, int64_t m0, int64_t n0, const Epilogue& e) {
  using V = typename Isa::V;
  constexpr int L = Isa::kLanes;
  constexpr int G = Isa::kGroup;
  // acc[i][j]: row i, panel j; starts at the columns' offsets. The unroll
  // pragmas keep the array in registers.
  V acc[MR][NV];
#pragma GCC unroll 4
  for (int j = 0; j < NV; ++j) {
    V off = Isa::load_i32(e.offset + n0 + j * L);
    if (runs.skip.sum) off = Isa::add_i32(off, Isa::load_i32(runs.skip.sum + n0 + j * L));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][j] = off;
  }
  // Skipped runs (ARunsSkip) pass over their weights.
  const char* wp = w + runs.skip.first * runs.groups * Isa::kGroupBytes;
  const typename Isa::AElem* ar = a;
  for (int r = runs.skip.first; r < runs.count - runs.skip.last; ++r) {
    ar = a + runs.offset[r];
    for (int64_t g = 0; g < runs.groups; ++g, wp += Isa::kGroupBytes) {
      V wv[NV];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) wv[j] = Isa::load_w(wp + j * panel_bytes);
      // Rows 8 and on from a second base, so that the 8 offsets i * lda
      // serve both halves: with 16 offsets the compiler keeps some in
      // vector registers and moves one out per broadcast, a second uop on
      // the port the dot products need.
      const typename Isa::AElem* a0 = ar + g * G;
      const typename Isa::AElem* a8 = a0 + 8 * lda;
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const V ai = Isa::broadcast((i < 8 ? a0 : a8) + (i % 8) * lda);
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] = Isa::dot(acc[i][j], ai, wv[j]);
      }
    }
  }
  if (ktail) {
    V wv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) wv[j] = Isa::load_w(wp + j * panel_bytes);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V ai = Isa::broadcast_tail(ar + i * lda + runs.groups * G, ktail);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = Isa::dot(acc[i][j], ai, wv[j]);
    }
  }
  alignas(64) int32_t c[MR * NV * L];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) Isa::store_i32(c + (i * NV + j) * L, acc[i][j]);
  }
  Isa::finish(c, MR, NV, m0, n0, e);
}

template <class Isa>
using TileFn = void (*)(const typename Isa::AElem*, int64_t, const ARuns&, int, const char*, int64_t, int64_t,
                        int64_t, const Epilogue&);

template <class Isa, int NV, size_t... R>
constexpr std::array<TileFn<Isa>, sizeof...(R)> tiles_for_rows(std::index_sequence<R...>) {
  return {&tile<Isa, static_cast<int>(R) + 1, NV>...};
}

// The tile of `rows` rows (1 .. Isa::rows(nv)) and nv panels.
template <class Isa>
TileFn<Isa> pick_tile(int nv, int rows) {
  static constexpr auto t1 = tiles_for_rows<Isa, 1>(std::make_index_sequence<Isa::rows(1)>{});
  if constexpr (Isa::kMaxNV >= 2) {
    static constexpr auto t2 = tiles_for_rows<Isa, 2>(std::make_index_sequence<Isa::rows(2)>{});
    if (nv == 2) return t2[rows - 1];
  }
  if constexpr (Isa::kMaxNV >= 3) {
    static constexpr auto t3 = tiles_for_rows<Isa, 3>(std::make_index_sequence<Isa::rows(3)>{});
    if (nv == 3) return t3[rows - 1];
  }
  if constexpr (Isa::kMaxNV >= 4) {
    static constexpr auto t4 = tiles_for_rows<Isa, 4>(std::make_index_sequence<Isa::rows(4)>{});
    if (nv == 4) return t4[rows - 1];
  }
  return t1[rows - 1];
}

// Rows [0, m) of A (each row's K in `runs`, then ktail values; rows lda
// apart) against every panel of w, written as output rows m_base + i. Panel
// blocks outer, so that the block of W stays in L1 while the rows stream
// past it.
template <class Isa>
void run_tiles(int64_t m, const typename Isa::AElem* a, int64_t lda, const ARuns& runs, int ktail,
               const PackedPanels& w, int64_t m_base, const Epilogue& e) {
  const char* wd = static_cast<const char*>(w.data());
  const int64_t panels = w.panels();
  for (int64_t p = 0; p < panels;) {
    // Spread the panels evenly over blocks of at most kMaxNV (6 panels as 3
    // + 3 rather than 4 + 2), and the rows evenly over tiles of at most
    // rows(nv) (16 rows as 8 + 8 rather than 12 + 4: a short tile loads
    // W's vectors for few rows).
    const int64_t blocks = (panels - p + Isa::kMaxNV - 1) / Isa::kMaxNV;
    const int nv = static_cast<int>((panels - p + blocks - 1) / blocks);
    const int64_t tiles = (m + Isa::rows(nv) - 1) / Isa::rows(nv);
    const int64_t mr = tiles > 0 ? (m + tiles - 1) / tiles : 1;
    for (int64_t i = 0; i < m; i += mr) {
      const int rows = static_cast<int>(std::min<int64_t>(mr, m - i));
      pick_tile<Isa>(nv, rows)(a + i * lda, lda, runs, ktail, wd + p * w.panel_bytes(), w.panel_bytes(),
                               m_base + i, p * Isa::kLanes, e);
    }
    p += nv;
  }
}

// The plain GEMM: each row of A is one run of k values; skipped_sum, where
// given, as ARunsSkip::sum.
template <class Isa>
void run_tiles(int64_t m, const typename Isa::AElem* a, int64_t lda, int64_t k, const PackedPanels& w,
               int64_t m_base, const Epilogue& e, const int32_t* skipped_sum = nullptr) {
  static constexpr int64_t kStart = 0;
  const ARuns one{&kStart, 1, k / Isa::kGroup, ARunsSkip{0, 0, skipped_sum}};
  run_tiles<Isa>(m, a, lda, one, static_cast<int>(k % Isa::kGroup), w, m_base, e);
}

}  // namespace
}  // namespace kiln::cpu::qgemm_detail
