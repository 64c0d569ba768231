// The contiguous loop of the quantized add (quantized_binary.cpp), one
// version per SIMD level (Note [SIMD dispatch] in cpu_features.h): each
// element is quant_math::add_value's sequence, so every version gives the
// scalar one's bytes.
//   out[i] = clamp(nearbyint((float(a[i] - zp_a) * scale_a + float(b[i] - zp_b) * scale_b) * inv_scale_out)
//                  + zero_point_out, lo, hi)
// lo already holds max(lo, zero_point_out) when relu is fused.
#pragma once

#include <cstdint>

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

}  // namespace kiln::cpu
