// AVX2 products of the direct convolution (Note [Direct convolution over a
// wide output] in conv2d_direct.h). Only called when direct_conv_applies()
// says the CPU has AVX2.
#include <immintrin.h>

#include <algorithm>

#include "tensor/cpu/conv2d_direct.h"
#include "tensor/error.h"

namespace kiln::cpu {

namespace {

// ---- forward: out_wide (rows, Q) = W block (rows, CKK) @ cols (CKK, Q) ----

// One ROWS x 16 tile of out_wide at column j: for each tap k, two vectors
// of the image from offset off[k] + j, times ROWS broadcast weights. 2*ROWS
// accumulators stay in registers for the whole CKK loop.
template <int ROWS>
void forward_tile(const float* image, const int64_t* off, int64_t ckk, const float* packed, float* out,
                  int64_t out_stride, int64_t j) {
  __m256 acc[ROWS][2];
  for (int i = 0; i < ROWS; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const float* base = image + j;
  for (int64_t k = 0; k < ckk; ++k) {
    const float* b = base + off[k];
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    const float* a = packed + k * ROWS;
    for (int i = 0; i < ROWS; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < ROWS; ++i) {
    _mm256_storeu_ps(out + i * out_stride + j, acc[i][0]);
    _mm256_storeu_ps(out + i * out_stride + j + 8, acc[i][1]);
  }
}

template <int ROWS>
void forward_block(const DirectConvPlan& plan, const float* image, const float* packed, float* out) {
  const int64_t ckk = static_cast<int64_t>(plan.offsets.size());
  for (int64_t j = 0; j < plan.wide_stride; j += 16) {
    forward_tile<ROWS>(image, plan.offsets.data(), ckk, packed, out, plan.wide_stride, j);
  }
}

// ---- grad_weight: gW (rows, taps) += go_wide (rows, Q) . image windows ----

// ROWS x TAPS dot products of length `length` (a multiple of 8): row o of
// go_wide against the image window of tap r, added lane-wise to their
// partial sums in `lanes` (rows lanes_stride apart, 8 floats per tap). Per 8
// positions: TAPS image loads, ROWS gradient loads, ROWS*TAPS FMAs.
template <int ROWS, int TAPS>
void grad_weight_tile(const float* image, const int64_t* off, const float* go, int64_t go_stride, int64_t length,
                      float* lanes, int64_t lanes_stride) {
  __m256 acc[ROWS][TAPS];
  for (int o = 0; o < ROWS; ++o) {
    for (int t = 0; t < TAPS; ++t) acc[o][t] = _mm256_loadu_ps(lanes + o * lanes_stride + t * 8);
  }
  const float* window[TAPS];
  for (int t = 0; t < TAPS; ++t) window[t] = image + off[t];
  for (int64_t q = 0; q < length; q += 8) {
    __m256 x[TAPS];
    for (int t = 0; t < TAPS; ++t) x[t] = _mm256_loadu_ps(window[t] + q);
    for (int o = 0; o < ROWS; ++o) {
      const __m256 g = _mm256_loadu_ps(go + o * go_stride + q);
      for (int t = 0; t < TAPS; ++t) acc[o][t] = _mm256_fmadd_ps(g, x[t], acc[o][t]);
    }
  }
  for (int o = 0; o < ROWS; ++o) {
    for (int t = 0; t < TAPS; ++t) _mm256_storeu_ps(lanes + o * lanes_stride + t * 8, acc[o][t]);
  }
}

template <int ROWS>
void grad_weight_block(const DirectConvPlan& plan, const float* image, const float* go, int64_t length,
                       float* lanes, int64_t ckk) {
  int64_t r = 0;
  for (; r + 2 <= ckk; r += 2) {
    grad_weight_tile<ROWS, 2>(image, plan.offsets.data() + r, go, plan.wide_stride, length, lanes + r * 8, ckk * 8);
  }
  if (r < ckk) {
    grad_weight_tile<ROWS, 1>(image, plan.offsets.data() + r, go, plan.wide_stride, length, lanes + r * 8, ckk * 8);
  }
}

// ---- grad_input: padded gradient image += W^T (taps, OC) @ go_wide, scattered ----

// ROWS taps (one kernel position, ROWS channels) x 16 positions at column j:
// the accumulators sum over the output channels, then each row is added to
// the padded gradient image at its tap's offset.
template <int ROWS>
void grad_input_tile(const float* go, int64_t go_stride, int64_t out_channels, const float* packed,
                     const int64_t* off, float* grad_image, int64_t j) {
  __m256 acc[ROWS][2];
  for (int i = 0; i < ROWS; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t o = 0; o < out_channels; ++o) {
    const __m256 g0 = _mm256_loadu_ps(go + o * go_stride + j), g1 = _mm256_loadu_ps(go + o * go_stride + j + 8);
    const float* a = packed + o * ROWS;
    for (int i = 0; i < ROWS; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, g0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, g1, acc[i][1]);
    }
  }
  for (int i = 0; i < ROWS; ++i) {
    float* d = grad_image + off[i] + j;
    _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), acc[i][0]));
    _mm256_storeu_ps(d + 8, _mm256_add_ps(_mm256_loadu_ps(d + 8), acc[i][1]));
  }
}

// Calls body.template operator()<rows>() with rows a compile-time 1..6.
template <class Body>
void with_rows(int64_t rows, const Body& body) {
  switch (rows) {
    case 1: return body.template operator()<1>();
    case 2: return body.template operator()<2>();
    case 3: return body.template operator()<3>();
    case 4: return body.template operator()<4>();
    case 5: return body.template operator()<5>();
    case 6: return body.template operator()<6>();
  }
  KILN_FAIL("direct conv: row block of ", rows, " (expected 1..6)");
}

// ---- forward with channels in the vector (Note [Direct convolution with
// channels in the vector]): tile (ROWS positions, VEC*8 channels) ----

// Positions q[0 .. ROWS) x channels of one packed block (CKK, VEC*8): for
// each tap k, VEC weight vectors and ROWS broadcast image values. The tile
// is stored position-major at out, rows out_stride apart.
template <int ROWS, int VEC>
void forward_by_channel_tile(const float* image, const int64_t* off, int64_t ckk, const float* packed, const int64_t* q,
                             float* out, int64_t out_stride) {
  __m256 acc[ROWS][VEC];
  for (int r = 0; r < ROWS; ++r) {
    for (int v = 0; v < VEC; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  const float* at[ROWS];
  for (int r = 0; r < ROWS; ++r) at[r] = image + q[r];
  for (int64_t k = 0; k < ckk; ++k) {
    __m256 w[VEC];
    for (int v = 0; v < VEC; ++v) w[v] = _mm256_loadu_ps(packed + k * VEC * 8 + v * 8);
    const int64_t o = off[k];
    for (int r = 0; r < ROWS; ++r) {
      const __m256 x = _mm256_broadcast_ss(at[r] + o);
      for (int v = 0; v < VEC; ++v) acc[r][v] = _mm256_fmadd_ps(x, w[v], acc[r][v]);
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    for (int v = 0; v < VEC; ++v) _mm256_storeu_ps(out + r * out_stride + v * 8, acc[r][v]);
  }
}

void forward_image_by_channel(const DirectConvPlan& plan, const std::vector<float>& packed, const float* bias,
                              float* out, int64_t out_channel_stride, DirectConvScratch& scratch) {
  const int64_t ckk = static_cast<int64_t>(plan.offsets.size()), out_channels = plan.out_channels;
  const int64_t valid = static_cast<int64_t>(plan.positions.size());
  const float* image = scratch.image.data();
  float* tile = scratch.wide.data();  // (P, OC): fits, P * OC <= wide_stride * OC
  for (int64_t o0 = 0; o0 < out_channels; o0 += 16) {
    const int vec = out_channels - o0 >= 16 ? 2 : 1;
    const float* block = packed.data() + o0 * ckk;
    for (int64_t p0 = 0; p0 < valid; p0 += 6) {
      const int64_t rows = std::min<int64_t>(6, valid - p0);
      with_rows(rows, [&]<int ROWS>() {
        float* dst = tile + p0 * out_channels + o0;
        if (vec == 2) {
          forward_by_channel_tile<ROWS, 2>(image, plan.offsets.data(), ckk, block, plan.positions.data() + p0, dst,
                                           out_channels);
        } else {
          forward_by_channel_tile<ROWS, 1>(image, plan.offsets.data(), ckk, block, plan.positions.data() + p0, dst,
                                           out_channels);
        }
      });
    }
  }
  // out[o][p] = tile[p][o] + bias[o].
  for (int64_t o = 0; o < out_channels; ++o) {
    const float b = bias ? bias[o] : 0.f;
    float* dst = out + o * out_channel_stride;
    for (int64_t p = 0; p < valid; ++p) dst[p] = tile[p * out_channels + o] + b;
  }
}

}  // namespace

void direct_conv_forward_image(const DirectConvPlan& plan, const std::vector<float>& packed, const float* bias,
                               float* out, int64_t out_channel_stride, DirectConvScratch& scratch) {
  if (plan.forward_by_channel) return forward_image_by_channel(plan, packed, bias, out, out_channel_stride, scratch);
  const int64_t ckk = static_cast<int64_t>(plan.offsets.size()), out_channels = plan.out_channels;
  const float* image = scratch.image.data();
  float* wide = scratch.wide.data();  // (OC, wide_stride)
  for (int64_t o0 = 0; o0 < out_channels; o0 += 6) {
    const int64_t rows = std::min<int64_t>(6, out_channels - o0);
    with_rows(rows, [&]<int ROWS>() {
      forward_block<ROWS>(plan, image, packed.data() + o0 * ckk, wide + o0 * plan.wide_stride);
    });
  }
  // The valid positions q = oy*wp + ox, ox < ow, plus the bias.
  for (int64_t o = 0; o < out_channels; ++o) {
    const float b = bias ? bias[o] : 0.f;
    for (int64_t oy = 0; oy < plan.shape.output.h; ++oy) {
      const float* src = wide + o * plan.wide_stride + oy * plan.padded_w;  // (ow)
      float* dst = out + o * out_channel_stride + oy * plan.shape.output.w;  // (ow)
      for (int64_t ox = 0; ox < plan.shape.output.w; ++ox) dst[ox] = src[ox] + b;
    }
  }
}

void load_direct_conv_grad(const DirectConvPlan& plan, int64_t out_channels, const float* grad_out,
                           int64_t go_channel_stride, DirectConvScratch& scratch) {
  float* wide = scratch.wide.data();  // (OC, wide_stride): go at the valid positions, zeros elsewhere
  for (int64_t o = 0; o < out_channels; ++o) {
    for (int64_t oy = 0; oy < plan.shape.output.h; ++oy) {
      std::copy_n(grad_out + o * go_channel_stride + oy * plan.shape.output.w, plan.shape.output.w,
                  wide + o * plan.wide_stride + oy * plan.padded_w);
    }
  }
}

void direct_conv_grad_weight_image(const DirectConvPlan& plan, int64_t out_channels, DirectConvScratch& scratch) {
  const int64_t ckk = static_cast<int64_t>(plan.offsets.size());
  const float* wide = scratch.wide.data();
  // Dot products over whole vectors: the zero tail of go_wide past Q
  // meets image values (or the image's zero tail) and adds nothing.
  const int64_t length = (plan.wide + 7) / 8 * 8;
  for (int64_t o0 = 0; o0 < out_channels; o0 += 6) {
    const int64_t rows = std::min<int64_t>(6, out_channels - o0);
    with_rows(rows, [&]<int ROWS>() {
      grad_weight_block<ROWS>(plan, scratch.image.data(), wide + o0 * plan.wide_stride, length,
                              scratch.lanes.data() + o0 * ckk * 8, ckk);
    });
  }
}

void direct_conv_grad_input_image(const DirectConvPlan& plan, const std::vector<float>& packed, int64_t out_channels,
                                  float* grad_input, int64_t sc, int64_t sy, int64_t sx, DirectConvScratch& scratch) {
  const int64_t positions = plan.shape.kernel.h * plan.shape.kernel.w, plane = plan.padded_h * plan.padded_w;
  float* grad_image = scratch.grad_image.data();  // (C, hp, wp) + tail
  std::fill(scratch.grad_image.begin(), scratch.grad_image.end(), 0.f);
  const float* block = packed.data();
  for (int64_t kk = 0; kk < positions; ++kk) {
    const int64_t ki = kk / plan.shape.kernel.w, kj = kk % plan.shape.kernel.w;
    for (int64_t c0 = 0; c0 < plan.shape.channels; c0 += 6) {
      const int64_t rows = std::min<int64_t>(6, plan.shape.channels - c0);
      int64_t off[6];
      for (int64_t i = 0; i < rows; ++i) off[i] = (c0 + i) * plane + ki * plan.padded_w + kj;
      with_rows(rows, [&]<int ROWS>() {
        for (int64_t j = 0; j < plan.wide_stride; j += 16) {
          grad_input_tile<ROWS>(scratch.wide.data(), plan.wide_stride, out_channels, block, off, grad_image, j);
        }
      });
      block += out_channels * rows;
    }
  }
  // The interior of the padded image is grad_input; the border collected
  // the taps that fell in the padding.
  for (int64_t c = 0; c < plan.shape.channels; ++c) {
    for (int64_t y = 0; y < plan.shape.input.h; ++y) {
      const float* src = grad_image + c * plane + (plan.padding.h + y) * plan.padded_w + plan.padding.w;  // (W)
      float* dst = grad_input + c * sc + y * sy;
      for (int64_t x = 0; x < plan.shape.input.w; ++x) dst[x * sx] = src[x];
    }
  }
}

void direct_conv_grad_weight_sum(const DirectConvScratch& scratch, float* grad_weight) {
  const int64_t products = static_cast<int64_t>(scratch.lanes.size()) / 8;
  for (int64_t i = 0; i < products; ++i) {
    const float* l = scratch.lanes.data() + i * 8;
    // Pairwise, in a fixed order.
    grad_weight[i] += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  }
}

}  // namespace kiln::cpu
