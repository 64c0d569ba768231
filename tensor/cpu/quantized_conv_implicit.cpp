// Packing and planning for the implicit int8 convolution (Note [Implicit
// int8 convolution on AMX tiles] in quantized_conv_implicit.h); the kernel
// is quantized_conv_implicit_amx.cpp.
#include "tensor/cpu/quantized_conv_implicit.h"

#include <algorithm>
#include <cstring>

#include "tensor/cpu/copy_simd.h"
#include "tensor/cpu/cpu_features.h"

namespace kiln::cpu {
namespace {

// The paths whose kernels broadcast A's bytes as they are (Note [Implicit
// int8 convolution on the VNNI paths]).
bool reads_bytes(QGemmPath path) {
  return path == QGemmPath::Avx2 || path == QGemmPath::AvxVnni || path == QGemmPath::Avx512Vnni;
}

// R: a kernel row of kw*C bytes rounded up to what the path reads at once,
// a tile's 64-byte row on Amx, a broadcast's 4 bytes on the VNNI paths.
int64_t row_bytes_for(QGemmPath path, int64_t channels, int64_t kw) {
  const int64_t granule = path == QGemmPath::Amx ? 64 : 4;
  return (kw * channels + granule - 1) / granule * granule;
}

}  // namespace

bool implicit_qconv_packable(QGemmPath path, int64_t channels, int64_t kh, int64_t kw) {
  if (reads_bytes(path)) return kw * channels % 4 != 0;
  return path == QGemmPath::Amx && (row_bytes_for(path, channels, kw) <= 3 * kw * channels || (kh == 1 && kw == 1));
}

std::shared_ptr<const ImplicitQConvWeight> pack_implicit_qconv(const int8_t* reordered, int64_t out_channels,
                                                               int64_t channels, int64_t kh, int64_t kw,
                                                               QGemmPath path) {
  auto w = std::make_shared<ImplicitQConvWeight>();
  w->out_channels = out_channels;
  w->channels = channels;
  w->kh = kh;
  w->kw = kw;
  w->row_bytes = row_bytes_for(path, channels, kw);
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

bool stacked_qconv_packable(QGemmPath path, int64_t channels, int64_t kh, int64_t kw) {
  const int64_t run = kw * kh * channels;
  return path == QGemmPath::Amx && kh > 1 && !implicit_qconv_packable(path, channels, kh, kw) && kh * channels <= 16 &&
         row_bytes_for(path, kh * channels, kw) <= 3 * run;
}

std::shared_ptr<const ImplicitQConvWeight> pack_stacked_qconv(const int8_t* reordered, int64_t out_channels,
                                                              int64_t channels, int64_t kh, int64_t kw,
                                                              QGemmPath path) {
  // (O, kh, kw, C) -> (O, kw, kh, C): a stacked pixel's kh*C bytes are in
  // (ky, c) order, and a run is kw such pixels.
  std::vector<int8_t> stacked(static_cast<size_t>(out_channels * kh * kw * channels));
  for (int64_t o = 0; o < out_channels; ++o)
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t kx = 0; kx < kw; ++kx)
        std::memcpy(stacked.data() + ((o * kw + kx) * kh + ky) * channels,
                    reordered + ((o * kh + ky) * kw + kx) * channels, static_cast<size_t>(channels));
  auto packed = pack_implicit_qconv(stacked.data(), out_channels, kh * channels, 1, kw, path);
  auto w = std::make_shared<ImplicitQConvWeight>(*packed);
  w->stacked_kh = kh;
  return w;
}

StackedQConvCall stacked_qconv_call(const ImplicitQConvWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
  Conv2dParams stacked_p;
  stacked_p.stride = Size2d(1, p.stride.w);
  const Conv2dShape stacked_s{w.channels, Size2d(s.output.h, s.input.w + 2 * p.padding.w), Size2d(1, s.kernel.w),
                              s.output};
  return {stacked_p, stacked_s};
}

void stack_kernel_rows(const uint8_t* image, int64_t stride_c, int64_t stride_h, int64_t stride_w,
                       const Conv2dParams& p, const Conv2dShape& s, uint8_t zero_point, uint8_t* stacked) {
  const int64_t c = s.channels, kh = s.kernel.h, planes = kh * c;
  const int64_t padded_w = s.input.w + 2 * p.padding.w, row_bytes = padded_w * planes;
  const bool vbmi = simd_level() == SimdLevel::Avx512 && int8_features().avx512vbmi && stride_w == 1;
  // The source row of each (ky, c) plane of an output row: an image row, or
  // a row of zero points above or below the image.
  std::vector<uint8_t> border(static_cast<size_t>(s.input.w) * static_cast<size_t>(std::max<int64_t>(stride_w, 1)),
                              zero_point);
  const uint8_t* rows[16];
  // The horizontal border at once (one call, not two a row), the interiors
  // written over it.
  std::memset(stacked, zero_point, static_cast<size_t>(s.output.h * row_bytes));
  for (int64_t y = 0; y < s.output.h; ++y) {
    uint8_t* dst = stacked + y * row_bytes;
    for (int64_t ky = 0; ky < kh; ++ky) {
      const int64_t iy = y * p.stride.h + ky * p.dilation.h - p.padding.h;
      for (int64_t ch = 0; ch < c; ++ch)
        rows[ky * c + ch] = iy >= 0 && iy < s.input.h ? image + ch * stride_c + iy * stride_h : border.data();
    }
    uint8_t* interior = dst + p.padding.w * planes;
    if (vbmi) {
      interleave_rows_u8_avx512vbmi(interior, rows, planes, s.input.w);
    } else {
      for (int64_t x = 0; x < s.input.w; ++x)
        for (int64_t i = 0; i < planes; ++i) interior[x * planes + i] = rows[i][x * stride_w];
    }
  }
}

bool implicit_qconv_pays(const ImplicitQConvWeight* w, const Conv2dParams& p) {
  return w != nullptr && p.groups == 1 && p.dilation.w == 1;
}

bool implicit_blocks_half_empty(const Conv2dParams& p, const Conv2dShape& s) {
  return s.kernel == Size2d(1) && p.stride != Size2d(1) && s.output.w <= 8;
}

namespace {

// The bytes of one run of a patch row (the second Note): a kernel row, or
// one tap with dilation_w > 1.
int64_t run_bytes(const Conv2dParams& p, const Conv2dShape& s) {
  return p.dilation.w == 1 ? s.kernel.w * s.channels : s.channels;
}

}  // namespace

bool implicit_runs_pay(QGemmPath path, const ImplicitQConvWeight* w, const Conv2dParams& p, const Conv2dShape& s) {
  const bool pointwise = s.kernel == Size2d(1) && p.stride == Size2d(1) && p.padding == Size2d(0);
  if (!reads_bytes(path) || pointwise) return false;
  return run_bytes(p, s) % 4 == 0 || (w != nullptr && p.groups == 1 && p.dilation.w == 1);
}

ImplicitQConvRuns implicit_qconv_runs(const ImplicitQConvWeight* w, const Conv2dParams& p, const Conv2dShape& s,
                                      int64_t padded_w) {
  ImplicitQConvRuns runs;
  const int64_t bytes = run_bytes(p, s), c = s.channels;
  if (bytes % 4 == 0) {
    runs.groups = bytes / 4;
  } else if (w != nullptr && p.groups == 1 && p.dilation.w == 1) {
    // The weight's rows of R bytes: each run reads R - kw*C bytes more.
    runs.groups = w->row_bytes / 4;
    runs.padded_rows = true;
    runs.overread = w->row_bytes - bytes;
  } else {
    return runs;
  }
  for (int64_t ky = 0; ky < s.kernel.h; ++ky) {
    const int64_t row = ky * p.dilation.h * padded_w * c;
    if (p.dilation.w == 1) {
      runs.offsets.push_back(row);
    } else {
      for (int64_t kx = 0; kx < s.kernel.w; ++kx) runs.offsets.push_back(row + kx * p.dilation.w * c);
    }
  }
  return runs;
}

KernelRowSkip kernel_rows_in_padding(const Conv2dParams& p, const Conv2dShape& s, int64_t y, int64_t runs_per_row) {
  const int64_t kh = s.kernel.h;
  auto inside = [&](int64_t ky) {
    const int64_t row = y * p.stride.h + ky * p.dilation.h - p.padding.h;  // in the unpadded input
    return row >= 0 && row < s.input.h;
  };
  int64_t above = 0, below = 0;
  while (above < kh && !inside(above)) ++above;
  while (above + below < kh && !inside(kh - 1 - below)) ++below;
  return KernelRowSkip{static_cast<int>(above * runs_per_row), static_cast<int>(below * runs_per_row)};
}

ImplicitQConvPlan plan_implicit_qconv(const ImplicitQConvWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
  ImplicitQConvPlan plan;
  const int64_t c = w.channels, chunks = w.row_bytes / 64;
  const int64_t padded_h = s.input.h + 2 * p.padding.h, padded_w = s.input.w + 2 * p.padding.w;
  const int64_t out_h = s.output.h, out_w = s.output.w;
  for (int64_t ky = 0; ky < w.kh; ++ky)
    for (int64_t j = 0; j < chunks; ++j) plan.koff.push_back(ky * p.dilation.h * padded_w * c + 64 * j);
  plan.pitched = p.stride == Size2d(1);
  if (plan.pitched) {
    // 16 consecutive pixels y * padded_w + x of the padded grid per block,
    // up to the last output pixel.
    const int64_t span = (out_h - 1) * padded_w + out_w;
    int64_t y = 0, x = 0;
    for (int64_t first = 0; first < span; first += 16) {
      ImplicitQConvBlock block{first * c, c, {}};
      for (int i = 0; i < 16; ++i) {
        block.position[i] = y < out_h && x < out_w ? y * out_w + x : -1;
        if (++x == padded_w) x = 0, ++y;
      }
      plan.blocks.push_back(block);
    }
  } else {
    // Up to 16 pixels of one output row per block.
    for (int64_t y = 0; y < out_h; ++y) {
      for (int64_t x0 = 0; x0 < out_w; x0 += 16) {
        ImplicitQConvBlock block{(y * p.stride.h * padded_w + x0 * p.stride.w) * c, p.stride.w * c, {}};
        for (int i = 0; i < 16; ++i) block.position[i] = x0 + i < out_w ? y * out_w + x0 + i : -1;
        plan.blocks.push_back(block);
      }
    }
  }
  // What the last block's 16 rows read past its first pixel.
  const int64_t last_read =
      plan.blocks.empty() ? 0 : plan.blocks.back().base + 15 * plan.blocks.back().lda + plan.koff.back() + 64;
  plan.image_bytes = std::max(padded_h * padded_w * c, last_read);
  return plan;
}

}  // namespace kiln::cpu
