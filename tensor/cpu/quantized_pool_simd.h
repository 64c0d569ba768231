// The SIMD row loops of the int8 max pool (quantized_pool.cpp), one file per
// instruction set (Note [SIMD dispatch] in cpu_features.h); each gives the
// scalar loop's bytes.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// `rows` output rows of ow bytes, one after the other from dst: output row r
// is dst[r*ow + x] = max of src[(2r)*w + 2x], src[(2r)*w + 2x + 1] and the
// same two of input row 2r + 1, for x < ow (quantized_pool_avx512.cpp,
// AVX-512BW; quantized_pool_avx2.cpp, AVX2).
void max_pool_2x2_rows_u8_avx512(uint8_t* dst, const uint8_t* src, int64_t w, int64_t ow, int64_t rows);
void max_pool_2x2_rows_s8_avx512(int8_t* dst, const int8_t* src, int64_t w, int64_t ow, int64_t rows);
void max_pool_2x2_rows_u8_avx2(uint8_t* dst, const uint8_t* src, int64_t w, int64_t ow, int64_t rows);
void max_pool_2x2_rows_s8_avx2(int8_t* dst, const int8_t* src, int64_t w, int64_t ow, int64_t rows);

}  // namespace kiln::cpu
