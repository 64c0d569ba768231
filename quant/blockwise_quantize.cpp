// The dynamic maps and block-wise quantization (Note [Block-wise 8-bit
// optimizer state] in quant/adam8bit.h).
#include "quant/blockwise_quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/parallel.h"

namespace kiln::quant {

namespace {

// bitsandbytes' create_dynamic_map with max_exponent_bits = 7 and
// total_bits = 8: decade i has `per_decade(i)` entries of each sign.
DynamicMap make_dynamic_map(bool is_signed) {
  std::vector<double> data;
  for (int i = 0; i < 7; ++i) {
    const int n = is_signed ? (1 << i) : (1 << (i + 1));
    const double scale = std::pow(10.0, i - 6);
    for (int j = 0; j < n; ++j) {
      // The mean of linspace(0.1, 1, n + 1)'s points j and j + 1.
      const double mean = 0.1 + 0.9 * (j + 0.5) / n;
      data.push_back(scale * mean);
      if (is_signed) data.push_back(-scale * mean);
    }
  }
  data.push_back(0.0);
  data.push_back(1.0);
  std::sort(data.begin(), data.end());
  KILN_CHECK(data.size() == 256, "dynamic map: construction gave ", data.size(), " entries instead of 256");

  DynamicMap map;
  for (size_t k = 0; k < 256; ++k) map.values[k] = static_cast<float>(data[k]);
  for (size_t k = 0; k + 1 < 256; ++k) map.midpoints[k] = (map.values[k] + map.values[k + 1]) * 0.5f;
  map.midpoints[255] = std::numeric_limits<float>::infinity();
  return map;
}

// Blocks handed to one thread at a time: a parallel region only pays for
// itself above some tens of thousands of elements.
int64_t block_grain(int64_t block_size) { return std::max<int64_t>(1, 32768 / block_size); }

void check_block_size(int64_t block_size, const char* op) {
  KILN_CHECK(block_size >= 1, op, ": block_size must be >= 1, got ", block_size);
}

}  // namespace

float quantize_block(const float* x, int64_t n, const DynamicMap& map, uint8_t* codes) {
  float absmax = 0.0f;
  for (int64_t k = 0; k < n; ++k) absmax = std::max(absmax, std::fabs(x[k]));
  if (absmax > 0.0f) {
    for (int64_t k = 0; k < n; ++k) codes[k] = map.nearest(x[k] / absmax);
  } else {
    std::fill(codes, codes + n, map.nearest(0.0f));
  }
  return absmax;
}

void dequantize_block(const uint8_t* codes, int64_t n, float absmax, const DynamicMap& map, float* out) {
  for (int64_t k = 0; k < n; ++k) out[k] = map.values[codes[k]] * absmax;
}

const DynamicMap& signed_dynamic_map() {
  static const DynamicMap map = make_dynamic_map(/*is_signed=*/true);
  return map;
}

const DynamicMap& unsigned_dynamic_map() {
  static const DynamicMap map = make_dynamic_map(/*is_signed=*/false);
  return map;
}

BlockwiseCodes quantize_blockwise(const Tensor& x, const DynamicMap& map, int64_t block_size) {
  check_block_size(block_size, "quantize_blockwise");
  KILN_CHECK(x.dtype() == DType::Float32, "quantize_blockwise: expected a float32 tensor, got ", x.dtype());
  KILN_CHECK(x.device().is_cpu(), "quantize_blockwise: expected a CPU tensor, got one on ", x.device());
  const uint8_t zero_code = map.nearest(0.0f);
  KILN_CHECK(map.values[zero_code] == 0.0f, "quantize_blockwise: the map has no entry 0 (nearest is ",
             map.values[zero_code], "), so a block of zeros cannot be represented");
  const Tensor src = x.contiguous();
  const int64_t n = src.numel();
  const int64_t blocks = num_blocks(n, block_size);
  BlockwiseCodes q{Tensor::empty(x.shape(), DType::UInt8), Tensor::empty({blocks}, DType::Float32)};
  const float* in = src.data<float>();     // in: (n,)
  uint8_t* codes = q.codes.data<uint8_t>();  // codes: (n,)
  float* absmax = q.absmax.data<float>();    // absmax: (blocks,)
  cpu::parallel_for(0, blocks, block_grain(block_size), [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * block_size;
      const int64_t len = std::min(n, begin + block_size) - begin;
      for (int64_t k = begin; k < begin + len; ++k)
        KILN_CHECK(std::isfinite(in[k]), "quantize_blockwise: element ", k, " is ", in[k], "; only finite values can be quantized");
      absmax[b] = quantize_block(in + begin, len, map, codes + begin);
    }
  });
  return q;
}

Tensor dequantize_blockwise(const BlockwiseCodes& q, const DynamicMap& map, int64_t block_size) {
  check_block_size(block_size, "dequantize_blockwise");
  KILN_CHECK(q.codes.dtype() == DType::UInt8 && q.absmax.dtype() == DType::Float32,
             "dequantize_blockwise: expected uint8 codes and float32 absmax, got ", q.codes.dtype(), " and ",
             q.absmax.dtype());
  KILN_CHECK(q.codes.device().is_cpu() && q.absmax.device().is_cpu(),
             "dequantize_blockwise: expected CPU tensors, got codes on ", q.codes.device(), " and absmax on ",
             q.absmax.device());
  const Tensor codes_c = q.codes.contiguous();
  const Tensor absmax_c = q.absmax.contiguous();
  const int64_t n = codes_c.numel();
  const int64_t blocks = num_blocks(n, block_size);
  KILN_CHECK(absmax_c.numel() == blocks, "dequantize_blockwise: ", n, " codes in blocks of ", block_size, " need ",
             blocks, " absmax values, got ", absmax_c.numel());
  Tensor out = Tensor::empty(q.codes.shape(), DType::Float32);
  const uint8_t* codes = codes_c.data<uint8_t>();  // codes: (n,)
  const float* absmax = absmax_c.data<float>();    // absmax: (blocks,)
  float* dst = out.data<float>();                  // dst: (n,)
  cpu::parallel_for(0, blocks, block_grain(block_size), [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t begin = b * block_size;
      const int64_t len = std::min(n, begin + block_size) - begin;
      dequantize_block(codes + begin, len, absmax[b], map, dst + begin);
    }
  });
  return out;
}

}  // namespace kiln::quant
