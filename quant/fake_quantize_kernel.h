// The elementwise loop of fake quantization, shared by fake_quantize.cpp
// (baseline x86-64) and fake_quantize_avx2.cpp (the same loop compiled for
// AVX2, where nearbyint is one roundps instead of a libm call and the loop
// vectorises). Internal to quant/.
//
// The loop body is in an unnamed namespace so that each of the two files
// gets its own copy compiled for its own instruction set (an inline function
// compiled twice with different flags would be one symbol, and the linker
// would keep either).
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/quant_math.h"

namespace kiln::quant::detail {

// rows of `inner` contiguous floats; row r uses channel r % channels.
struct FakeQuantizeArgs {
  const float* x;        // (rows, inner)
  float* out;            // (rows, inner)
  bool* mask;            // (rows, inner), or null: no straight-through mask wanted
  int64_t rows, inner, channels;
  const float* scales;   // (channels), float32 scales
  const float* inv_scales;
  const int32_t* zero_points;
  float lo, hi;          // quant_min, quant_max
};

// The AVX2 build of the loop; call only where the CPU has AVX2.
void fake_quantize_rows_avx2(const FakeQuantizeArgs& a, int64_t row_begin, int64_t row_end);

namespace {

// out = dequantize(quantize(x)) per Note [Quantization arithmetic]; mask =
// the unclamped quantized value lies in [lo, hi] (false at NaN).
inline void fake_quantize_rows(const FakeQuantizeArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t c = row % a.channels;
    const float scale = a.scales[c], inv = a.inv_scales[c];
    const int32_t zp = a.zero_points[c];
    const auto zpf = static_cast<float>(zp);
    const float lo = a.lo, hi = a.hi;
    const float* x = a.x + row * a.inner;
    float* y = a.out + row * a.inner;
    if (a.mask == nullptr) {
      for (int64_t i = 0; i < a.inner; ++i) {
        const float q = quant_math::quantize_value(x[i], inv, zpf, lo, hi);
        y[i] = quant_math::dequantize_value(static_cast<int32_t>(q), zp, scale);
      }
    } else {
      bool* m = a.mask + row * a.inner;
      for (int64_t i = 0; i < a.inner; ++i) {
        const float q = quant_math::quantize_value(x[i], inv, zpf, lo, hi);
        y[i] = quant_math::dequantize_value(static_cast<int32_t>(q), zp, scale);
        const float r = std::nearbyint(x[i] * inv) + zpf;  // q before the clamp
        m[i] = r >= lo && r <= hi;
      }
    }
  }
}

}  // namespace

}  // namespace kiln::quant::detail
