// The portable half of the direct convolution (Note [Direct convolution over
// a wide output] in conv2d_direct.h): the plan, weight packing and the
// scratch planes. The AVX2 products are in conv2d_direct_avx2.cpp.
#include "tensor/cpu/conv2d_direct.h"

#include <algorithm>

#include "tensor/cpu/cpu_features.h"

namespace kiln::cpu {

namespace {

// Output channels per register block of the forward kernel (6 rows x 16
// columns of accumulators fill 12 of AVX2's 16 vector registers).
constexpr int64_t kForwardRows = 6;
// Output channels per register block with channels in the vector (6
// positions x 2 vectors of 8 channels).
constexpr int64_t kChannelBlock = 16;

// Above this many floats in the padded image the columns no longer stay in
// L2 while the kernel walks them, and im2col + the blocked GEMM is the
// better plan (it packs what it reuses).
constexpr int64_t kMaxImageFloats = int64_t{1} << 15;

}  // namespace

bool direct_conv_applies(const Conv2dParams& p, const Conv2dShape& s) {
  if (simd_level() < SimdLevel::Avx2) return false;
  if (p.stride.h != 1 || p.stride.w != 1 || p.dilation.h != 1 || p.dilation.w != 1) return false;
  const int64_t padded = s.channels * (s.input.h + 2 * p.padding.h) * (s.input.w + 2 * p.padding.w);
  return padded <= kMaxImageFloats;
}

DirectConvPlan make_direct_conv_plan(const Conv2dParams& p, const Conv2dShape& s, int64_t out_channels) {
  DirectConvPlan plan{s, p.padding};
  plan.padded_h = s.input.h + 2 * p.padding.h, plan.padded_w = s.input.w + 2 * p.padding.w;
  plan.wide = (s.output.h - 1) * plan.padded_w + s.output.w;
  plan.wide_stride = (plan.wide + 15) / 16 * 16;
  // The last tap's window ends at the plane's last element (see the header);
  // the kernels load whole vectors up to wide_stride, 15 floats further.
  plan.image_floats = s.channels * plan.padded_h * plan.padded_w + 16;
  plan.offsets.reserve(s.channels * s.kernel.h * s.kernel.w);
  for (int64_t c = 0; c < s.channels; ++c) {
    for (int64_t ki = 0; ki < s.kernel.h; ++ki) {
      for (int64_t kj = 0; kj < s.kernel.w; ++kj) {
        plan.offsets.push_back((c * plan.padded_h + ki) * plan.padded_w + kj);
      }
    }
  }
  plan.out_channels = out_channels;
  const int64_t valid = s.output.h * s.output.w;
  // The transposing output pass costs something too: the wide form keeps
  // the work when it wastes less than an eighth.
  plan.forward_by_channel = out_channels % 8 == 0 && 8 * valid < 7 * plan.wide_stride;
  if (plan.forward_by_channel) {
    plan.positions.reserve(valid);
    for (int64_t oy = 0; oy < s.output.h; ++oy) {
      for (int64_t ox = 0; ox < s.output.w; ++ox) plan.positions.push_back(oy * plan.padded_w + ox);
    }
  }
  return plan;
}

std::vector<float> pack_direct_conv_weight(const DirectConvPlan& plan, const float* weight, int64_t row_stride) {
  const int64_t out_channels = plan.out_channels, ckk = static_cast<int64_t>(plan.offsets.size());
  // Block b (rows o0 .. o0 + rows - 1) starts at o0 * ckk and holds
  // packed[o0 * ckk + k * rows + i] = weight[o0 + i][k].
  const int64_t block_rows = plan.forward_by_channel ? kChannelBlock : kForwardRows;
  std::vector<float> packed(out_channels * ckk);
  for (int64_t o0 = 0; o0 < out_channels; o0 += block_rows) {
    const int64_t rows = std::min(block_rows, out_channels - o0);
    float* block = packed.data() + o0 * ckk;
    for (int64_t k = 0; k < ckk; ++k) {
      for (int64_t i = 0; i < rows; ++i) block[k * rows + i] = weight[(o0 + i) * row_stride + k];
    }
  }
  return packed;
}

std::vector<float> pack_direct_conv_weight_for_grad_input(const DirectConvPlan& plan, const float* weight,
                                                          int64_t out_channels, int64_t row_stride) {
  const int64_t positions = plan.shape.kernel.h * plan.shape.kernel.w;
  std::vector<float> packed;
  packed.reserve(out_channels * plan.shape.channels * positions);
  for (int64_t kk = 0; kk < positions; ++kk) {
    for (int64_t c0 = 0; c0 < plan.shape.channels; c0 += kForwardRows) {
      const int64_t rows = std::min(kForwardRows, plan.shape.channels - c0);
      for (int64_t o = 0; o < out_channels; ++o) {
        for (int64_t i = 0; i < rows; ++i) packed.push_back(weight[o * row_stride + (c0 + i) * positions + kk]);
      }
    }
  }
  return packed;
}

void load_direct_conv_image(const DirectConvPlan& plan, const float* x, int64_t sc, int64_t sy, int64_t sx,
                            DirectConvScratch& scratch) {
  for (int64_t c = 0; c < plan.shape.channels; ++c) {
    for (int64_t y = 0; y < plan.shape.input.h; ++y) {
      // padded plane row pad_h + y, from column pad_w: (W)
      float* dst = scratch.image.data() + (c * plan.padded_h + plan.padding.h + y) * plan.padded_w + plan.padding.w;
      const float* src = x + c * sc + y * sy;
      if (sx == 1) {
        std::copy_n(src, plan.shape.input.w, dst);
      } else {
        for (int64_t i = 0; i < plan.shape.input.w; ++i) dst[i] = src[i * sx];
      }
    }
  }
}

}  // namespace kiln::cpu
