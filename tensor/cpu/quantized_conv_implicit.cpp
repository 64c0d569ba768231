// Packing and planning for the implicit int8 convolution (Note [Implicit
// int8 convolution on AMX tiles] in quantized_conv_implicit.h); the kernel
// is quantized_conv_implicit_amx.cpp.
#include "tensor/cpu/quantized_conv_implicit.h"

#include <algorithm>
#include <cstring>

namespace kiln::cpu {
namespace {

int64_t row_bytes_for(int64_t channels, int64_t kw) { return (kw * channels + 63) / 64 * 64; }

}  // namespace

bool implicit_qconv_packable(QGemmPath path, int64_t channels, int64_t kw) {
  return path == QGemmPath::Amx && row_bytes_for(channels, kw) <= 2 * kw * channels;
}

std::shared_ptr<const ImplicitQConvWeight> pack_implicit_qconv(const int8_t* reordered, int64_t out_channels,
                                                               int64_t channels, int64_t kh, int64_t kw,
                                                               QGemmPath path) {
  auto w = std::make_shared<ImplicitQConvWeight>();
  w->out_channels = out_channels;
  w->channels = channels;
  w->kh = kh;
  w->kw = kw;
  w->row_bytes = row_bytes_for(channels, kw);
  const int64_t run = kw * channels, k = kh * w->row_bytes;
  std::vector<int8_t> rows(static_cast<size_t>(out_channels * k), 0);  // (O, kh*R)
  for (int64_t o = 0; o < out_channels; ++o) {
    for (int64_t ky = 0; ky < kh; ++ky) {
      std::memcpy(rows.data() + o * k + ky * w->row_bytes, reordered + (o * kh + ky) * run, static_cast<size_t>(run));
    }
  }
  w->packed = pack_qweight(rows.data(), out_channels, k, k, path);
  return w;
}

bool implicit_qconv_pays(const ImplicitQConvWeight* w, const Conv2dParams& p) {
  return w != nullptr && p.groups == 1 && p.dilation.w == 1;
}

ImplicitQConvPlan plan_implicit_qconv(const ImplicitQConvWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
  ImplicitQConvPlan plan;
  plan.channels = w.channels;
  plan.padded_h = s.input.h + 2 * p.padding.h;
  plan.padded_w = s.input.w + 2 * p.padding.w;
  plan.out_h = s.output.h;
  plan.out_w = s.output.w;
  plan.stride_h = p.stride.h;
  plan.stride_w = p.stride.w;
  const int64_t c = w.channels, chunks = w.row_bytes / 64;
  for (int64_t ky = 0; ky < w.kh; ++ky)
    for (int64_t j = 0; j < chunks; ++j) plan.koff.push_back(ky * p.dilation.h * plan.padded_w * c + 64 * j);
  // The last block's first pixel, from which its 16 rows are read.
  int64_t last_base = 0, lda = 0;
  plan.pitched = p.stride == Size2d(1);
  if (plan.pitched) {
    const int64_t span = (plan.out_h - 1) * plan.padded_w + plan.out_w;  // pixels of the padded grid to cover
    plan.blocks = (span + 15) / 16;
    last_base = (plan.blocks - 1) * 16 * c;
    lda = c;
  } else {
    plan.blocks_per_row = (plan.out_w + 15) / 16;
    plan.blocks = plan.out_h * plan.blocks_per_row;
    last_base = ((plan.out_h - 1) * p.stride.h * plan.padded_w + (plan.blocks_per_row - 1) * 16 * p.stride.w) * c;
    lda = p.stride.w * c;
  }
  const int64_t last_read = last_base + 15 * lda + plan.koff.back() + 64;
  plan.image_bytes = std::max(plan.padded_h * plan.padded_w * c, last_read);
  return plan;
}

}  // namespace kiln::cpu
