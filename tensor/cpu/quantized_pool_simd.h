// The SIMD row loops of the int8 max pool (quantized_pool.cpp), one file per
// instruction set (Note [SIMD dispatch] in cpu_features.h); each gives the
// scalar loop's bytes.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// dst[x] = max(r0[2x], r0[2x+1], r1[2x], r1[2x+1]) for x < ow
// (quantized_pool_avx512.cpp, AVX-512BW).
void max_pool_2x2_row_u8_avx512(uint8_t* dst, const uint8_t* r0, const uint8_t* r1, int64_t ow);
void max_pool_2x2_row_s8_avx512(int8_t* dst, const int8_t* r0, const int8_t* r1, int64_t ow);

}  // namespace kiln::cpu
