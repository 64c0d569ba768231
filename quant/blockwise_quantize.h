// Block-wise dynamic 8-bit quantization: bitsandbytes' "dynamic" maps and
// the block-wise quantize / dequantize that 8-bit optimizers keep their
// state in (Note [Block-wise 8-bit optimizer state] in quant/adam8bit.h).
//
//   BlockwiseCodes q = quantize_blockwise(exp_avg, signed_dynamic_map(), 2048);
//   Tensor back = dequantize_blockwise(q, signed_dynamic_map(), 2048);   // |back - exp_avg| small per block
#pragma once

#include <array>
#include <cstdint>

#include "tensor/tensor.h"

namespace kiln::quant {

// A sorted table of 256 float32 values in [-1, 1] (or [0, 1]); a code is an
// index into it. `midpoints[i]` is (values[i] + values[i + 1]) * 0.5f in
// float32, and midpoints[255] is +infinity, so that the nearest entry is
// found by an 8-step branch-free search.
struct DynamicMap {
  std::array<float, 256> values;
  std::array<float, 256> midpoints;

  // The index of the entry nearest x: the number of midpoints below x, so a
  // value on a midpoint goes to the lower entry, values beyond the ends go
  // to the end entries, and NaN goes to code 0.
  uint8_t nearest(float x) const {
    int index = 0;
    for (int step = 128; step > 0; step >>= 1)
      if (midpoints[index + step - 1] < x) index += step;
    return static_cast<uint8_t>(index);
  }
};

// bitsandbytes' create_dynamic_map(signed=True): for each decade
// i = 0..6 the 2^i means of adjacent points of linspace(0.1, 1, 2^i + 1),
// times 10^(i-6), with either sign; then 0 and 1. So 127 negative entries,
// 0 at index 127, and 128 positive ones ending in 1.0: the dynamic tree of
// Dettmers (2016), with relative precision that holds from 1e-6 to 1.
// Each entry is the float64 value rounded once to float32.
const DynamicMap& signed_dynamic_map();

// create_dynamic_map(signed=False): for each decade the 2^(i+1) means of
// linspace(0.1, 1, 2^(i+1) + 1), times 10^(i-6), then 0 and 1. The bit
// that held the sign doubles the entries of every decade: 0 at index 0,
// 1.0 at index 255. For values that are never negative (Adam's second
// moment).
const DynamicMap& unsigned_dynamic_map();

// A tensor quantized block by block: element k is
// map.values[codes[k]] * absmax[k / block_size].
struct BlockwiseCodes {
  Tensor codes;   // uint8, the source's shape
  Tensor absmax;  // float32 (ceil(numel / block_size),): each block's largest |value|
};

// Quantizes a float32 CPU tensor: each block of `block_size` consecutive
// elements (in row-major order; the last may be shorter) is divided by its
// largest absolute value and each quotient mapped to the nearest entry of
// `map`. A block of zeros gets absmax 0 and the code of 0 (a map without
// an entry 0 is refused). Requires block_size >= 1 and finite values.
BlockwiseCodes quantize_blockwise(const Tensor& x, const DynamicMap& map, int64_t block_size);

// The float32 tensor the codes stand for (the codes' shape).
Tensor dequantize_blockwise(const BlockwiseCodes& q, const DynamicMap& map, int64_t block_size);

// One block, for the kernels that update state in place (Adam8bit's step):
// quantize_block writes the codes of x[0..n) and returns the block's absmax
// (0 for a block of zeros, whose codes are then the map's code of 0, which
// must exist); dequantize_block writes map.values[codes[k]] * absmax.
float quantize_block(const float* x, int64_t n, const DynamicMap& map, uint8_t* codes);
void dequantize_block(const uint8_t* codes, int64_t n, float absmax, const DynamicMap& map, float* out);

// The number of blocks of `block_size` that hold `numel` elements.
inline int64_t num_blocks(int64_t numel, int64_t block_size) { return (numel + block_size - 1) / block_size; }

}  // namespace kiln::quant
