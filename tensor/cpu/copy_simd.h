// Register-tile transposes for transposing copies (x.t().contiguous()).
//
// dst (cols, rows) = src (rows, cols)^T for elements of 1, 4 or 8 bytes; both
// operands have unit column stride and the given row strides in bytes
// (ld_src >= cols * size, ld_dst >= rows * size). Pointers need no alignment.
// Any rows, cols >= 0: edges the register tiles do not cover are copied one
// element at a time. The _avx2 versions (tensor/cpu/copy_avx2.cpp) run only
// when simd_level() allows (Note [SIMD dispatch]); AVX-512 machines use them
// too, since a wider register does not make a memory-bound transpose faster.
// The portable reference is copy_tiled_2d in tensor/cpu/copy.cpp.
//
//   // b: (n, m) contiguous, a: (m, n) contiguous
//   transpose_32_avx2(b, m * 4, a, n * 4, m, n);
#pragma once

#include <cstdint>

namespace kiln::cpu {

void transpose_32_avx2(char* dst, int64_t ld_dst, const char* src, int64_t ld_src, int64_t rows, int64_t cols);
void transpose_64_avx2(char* dst, int64_t ld_dst, const char* src, int64_t ld_src, int64_t rows, int64_t cols);
// Bytes: a channels-last uint8 activation made NCHW (LeNet's flatten
// before fc1), 8 x 8 tiles.
void transpose_8_avx2(char* dst, int64_t ld_dst, const char* src, int64_t ld_src, int64_t rows, int64_t cols);

}  // namespace kiln::cpu

namespace kiln::cpu {

// Interleaves `planes` byte planes into pixels: dst[x * planes + c] =
// src[c * plane_stride + x] for x < n, c < planes, with planes <= 16; dst is
// contiguous and written only there. This is an (planes, n) -> (n, planes)
// transpose of bytes, as an NCHW uint8 image becomes channels-last
// (tensor/cpu/quantized_conv.cpp). AVX-512 VBMI (copy_avx512vbmi.cpp): each
// step masked-loads 16 bytes of every plane (8 above 8 planes) into two
// registers and one or two vpermt2b pick the pixels' bytes in order.
// AVX2 (copy_avx2.cpp), planes <= 8 only: a byte transpose of 8 planes (the
// missing ones zero) by 16 pixels in three rounds of unpacks, each pixel's
// 8 bytes stored where its `planes` go, the next pixels' stores overwriting
// the rest; the last step or two go through a buffer.
void interleave_planes_u8_avx2(uint8_t* dst, const uint8_t* src, int64_t plane_stride, int64_t planes, int64_t n);
void interleave_planes_u8_avx512vbmi(uint8_t* dst, const uint8_t* src, int64_t plane_stride, int64_t planes,
                                     int64_t n);
// The same with each plane's row given on its own: dst[x * planes + c] =
// rows[c][x] (planes <= 16). The stacked kernel rows of the implicit
// convolution (quantized_conv_implicit.h) interleave rows of several planes
// and image rows at once.
void interleave_rows_u8_avx512vbmi(uint8_t* dst, const uint8_t* const* rows, int64_t planes, int64_t n);

}  // namespace kiln::cpu
