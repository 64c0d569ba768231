// The contiguous per-tensor loops of quantize and dequantize, one version per
// SIMD level (Note [SIMD dispatch] in cpu_features.h), for the 8-bit dtypes.
//
// Each computes exactly Note [Quantization arithmetic]'s sequence
// (tensor/quant_math.h), so every version gives the same bytes as the
// scalar one for every input, NaN and infinities included:
//   quantize:   out[i] = clamp(nearbyint(in[i] * inv_scale) + zero_point, lo, hi)
//   dequantize: out[i] = float(in[i] - zero_point) * scale
// lo and hi are the clamp bounds as floats (the dtype's range, or a
// narrower one); pointers need no alignment; n >= 0. The scalar versions
// live in quantize.cpp, the others in quantize_avx2.cpp and
// quantize_avx512.cpp, which only run when simd_level() allows.
//
//   quantize_u8_avx2(out, x, n, 1.0f / 0.05f, 128.0f, 0.0f, 255.0f);
#pragma once

#include <cstdint>

namespace kiln::cpu {

void quantize_u8_scalar(uint8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                        float hi);
void quantize_s8_scalar(int8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                        float hi);
void dequantize_u8_scalar(float* out, const uint8_t* in, int64_t n, int32_t zero_point, float scale);
void dequantize_s8_scalar(float* out, const int8_t* in, int64_t n, int32_t zero_point, float scale);

void quantize_u8_avx2(uint8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                      float hi);
void quantize_s8_avx2(int8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                      float hi);
void dequantize_u8_avx2(float* out, const uint8_t* in, int64_t n, int32_t zero_point, float scale);
void dequantize_s8_avx2(float* out, const int8_t* in, int64_t n, int32_t zero_point, float scale);

void quantize_u8_avx512(uint8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                        float hi);
void quantize_s8_avx512(int8_t* out, const float* in, int64_t n, float inv_scale, float zero_point, float lo,
                        float hi);
void dequantize_u8_avx512(float* out, const uint8_t* in, int64_t n, int32_t zero_point, float scale);
void dequantize_s8_avx512(float* out, const int8_t* in, int64_t n, int32_t zero_point, float scale);

}  // namespace kiln::cpu
