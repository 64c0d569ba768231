// The contiguous loop of the quantized add (quantized_binary.cpp), one
// version per SIMD level (Note [SIMD dispatch] in cpu_features.h): each
// element is quant_math::add_value's sequence, so every version gives the
// scalar one's bytes.
//   out[i] = clamp(nearbyint((float(a[i] - zp_a) * scale_a + float(b[i] - zp_b) * scale_b) * inv_scale_out)
//                  + zero_point_out, lo, hi)
// lo already holds max(lo, zero_point_out) when relu is fused. The vector
// form of that sequence is written once below (add_lanes), for these loops
// and for the int8 GEMM's output stage, which runs the same add on a conv's
// uint8 outputs before they are stored (Note [Residual add in the output
// stage] in qgemm.h).
#pragma once

#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

struct QuantizedAddGrids {
  int32_t zero_point_a;
  float scale_a;
  int32_t zero_point_b;
  float scale_b;
  float inv_scale_out;
  float zero_point_out;
  float lo, hi;
};

void quantized_add_u8_scalar(uint8_t* out, const uint8_t* a, const uint8_t* b, int64_t n, const QuantizedAddGrids& g);
void quantized_add_s8_scalar(int8_t* out, const int8_t* a, const int8_t* b, int64_t n, const QuantizedAddGrids& g);
// quantized_binary_avx2.cpp
void quantized_add_u8_avx2(uint8_t* out, const uint8_t* a, const uint8_t* b, int64_t n, const QuantizedAddGrids& g);
void quantized_add_s8_avx2(int8_t* out, const int8_t* a, const int8_t* b, int64_t n, const QuantizedAddGrids& g);
// quantized_binary_avx512.cpp
void quantized_add_u8_avx512(uint8_t* out, const uint8_t* a, const uint8_t* b, int64_t n, const QuantizedAddGrids& g);
void quantized_add_s8_avx512(int8_t* out, const int8_t* a, const int8_t* b, int64_t n, const QuantizedAddGrids& g);

// add_value on int32 lanes (8-bit values widened), for files compiled with
// AVX2 or AVX-512 and -ffp-contract=off. NaN cannot occur (finite scales);
// the result lies in [lo, hi], so a narrowing store keeps it exactly.
// Unnamed, as qgemm_simd.h's kernels: each including file gets its own copy
// compiled for its instruction set.
namespace {
#if defined(__AVX2__)
struct AddLanesYmm {
  __m256i zp_a, zp_b;
  __m256 scale_a, scale_b, inv_out, zp_out, lo, hi;
  explicit AddLanesYmm(const QuantizedAddGrids& g)
      : zp_a(_mm256_set1_epi32(g.zero_point_a)), zp_b(_mm256_set1_epi32(g.zero_point_b)),
        scale_a(_mm256_set1_ps(g.scale_a)), scale_b(_mm256_set1_ps(g.scale_b)), inv_out(_mm256_set1_ps(g.inv_scale_out)),
        zp_out(_mm256_set1_ps(g.zero_point_out)), lo(_mm256_set1_ps(g.lo)), hi(_mm256_set1_ps(g.hi)) {}
};

// a_minus_zp: float(a - zero_point_a), the first operand already shifted.
inline __m256i add_lanes_shifted(__m256 a_minus_zp, __m256i b, const AddLanesYmm& v) {
  __m256 da = _mm256_mul_ps(a_minus_zp, v.scale_a);
  __m256 db = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(b, v.zp_b)), v.scale_b);
  __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_add_ps(da, db), v.inv_out),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_add_ps(r, v.zp_out);
  r = _mm256_min_ps(_mm256_max_ps(r, v.lo), v.hi);
  return _mm256_cvtps_epi32(r);
}

inline __m256i add_lanes(__m256i a, __m256i b, const AddLanesYmm& v) {
  return add_lanes_shifted(_mm256_cvtepi32_ps(_mm256_sub_epi32(a, v.zp_a)), b, v);
}
#endif

#if defined(__AVX512F__)
// On 16 lanes the output is clamped before it is rounded, with bounds
// shifted by its zero point, and the zero point added as an integer: the
// bounds are integers, so clamping and rounding commute, and the rounding
// rides in the conversion (one operation where three were).
struct AddLanesZmm {
  __m512i zp_a, zp_b, zp_out;
  __m512 scale_a, scale_b, inv_out, lo, hi;  // lo and hi less zero_point_out
  explicit AddLanesZmm(const QuantizedAddGrids& g)
      : zp_a(_mm512_set1_epi32(g.zero_point_a)), zp_b(_mm512_set1_epi32(g.zero_point_b)),
        zp_out(_mm512_set1_epi32(static_cast<int32_t>(g.zero_point_out))), scale_a(_mm512_set1_ps(g.scale_a)),
        scale_b(_mm512_set1_ps(g.scale_b)), inv_out(_mm512_set1_ps(g.inv_scale_out)),
        lo(_mm512_set1_ps(g.lo - g.zero_point_out)), hi(_mm512_set1_ps(g.hi - g.zero_point_out)) {}
};

inline __m512i add_lanes_shifted(__m512 a_minus_zp, __m512i b, const AddLanesZmm& v) {
  __m512 da = _mm512_mul_ps(a_minus_zp, v.scale_a);
  __m512 db = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(b, v.zp_b)), v.scale_b);
  __m512 r = _mm512_mul_ps(_mm512_add_ps(da, db), v.inv_out);
  r = _mm512_min_ps(_mm512_max_ps(r, v.lo), v.hi);  // NaN -> lo, as fmax(NaN, lo)
  return _mm512_add_epi32(_mm512_cvt_roundps_epi32(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), v.zp_out);
}

// The same sum rounded, less the output's zero point and clamped to at most
// hi - zero_point_out only (NaN stays, and converts to INT32_MIN): the
// packed narrowing of the output stage (NarrowU8Zmm in qgemm_simd.h) adds
// the zero point and clamps below.
inline __m512i add_lanes_rounded(__m512 a_minus_zp, __m512i b, const AddLanesZmm& v) {
  __m512 da = _mm512_mul_ps(a_minus_zp, v.scale_a);
  __m512 db = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(b, v.zp_b)), v.scale_b);
  __m512 r = _mm512_min_ps(v.hi, _mm512_mul_ps(_mm512_add_ps(da, db), v.inv_out));
  return _mm512_cvt_roundps_epi32(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

inline __m512i add_lanes(__m512i a, __m512i b, const AddLanesZmm& v) {
  return add_lanes_shifted(_mm512_cvtepi32_ps(_mm512_sub_epi32(a, v.zp_a)), b, v);
}
#endif
}  // namespace

}  // namespace kiln::cpu
