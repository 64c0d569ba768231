// The direct int8 convolution: output positions, not output channels, in
// the vector lanes, read straight from the padded image with byte permutes
// (AVX-512 VBMI) and multiplied with vpdpbusd (AVX-512 VNNI). No patch
// matrix is built.
//
// Note [Direct int8 convolution with positions in the lanes]
// The int8 GEMM (qgemm.h) keeps one output row's channels in the lanes, 16
// per vector, so a convolution with few output channels fills few of them:
// LeNet's first layer (3 -> 6 channels, 5x5) uses 6 of 16, and building its
// patch rows (Note [Quantized convolution on the int8 GEMM]) costs a third as
// much again. Turned around, 16 neighbouring output positions of one row fill
// a vector whatever the channel count, and their inputs lie side by side in
// the image:
//   acc[o][x + j] += sum over taps t of image[off(t) + j * stride_w] * w[o][t]
// for lanes j = 0..15, with off(t) = c*hp*wp + ky*dil_h*wp + kx*dil_w (+ the
// row's and block's start) in an NCHW copy of the image padded to hp x wp
// with the input's zero point, as the GEMM path pads (so a padded tap adds 0).
// vpdpbusd multiplies 4 u8 x s8 pairs per lane, so the taps go in quads, in
// the weight's own (c, ky, kx) order, and for each quad a lane needs the 4
// bytes image[off(t_e) + j * stride_w], e = 0..3:
// - A quad is cut from at most two runs of consecutive taps of one (c, ky)
//   row (the first quad of a 5-wide kernel: kx 0..3; the second: kx 4 of one
//   row and kx 0..2 of the next). Each run's bytes for all 16 lanes lie in a
//   64-byte window from the run's first tap (at most 3*dil_w + 15*stride_w
//   + 1 bytes), so two unaligned loads and one vpermt2b, whose 64-byte
//   index is built once per call from the offsets, give the quad's vector.
//   A quad that cannot take the next tap without a third run is closed with
//   zero weights (at most one quad per (c, ky) row for kernels 2 or more
//   wide; 75 taps of LeNet's first layer make 21 quads, not 19).
// - The weight is stored per quad as one int32 (4 int8) per output channel:
//   a tile of OT channels x PB blocks of 16 positions does, per quad, PB
//   permutes and OT * PB vpdpbusd, each weight broadcast from memory.
// - Blocks are 16 positions of one output row (the last of a row masked),
//   so each channel's block is a single masked store into the NCHW output.
//   Accumulators start at bias - zx * colsum, and leave through the GEMM's
//   own output stage (store_column_zmm in qgemm_simd.h): the int32 sums and
//   so every output byte equal the GEMM path's, which the tests check
//   against the scalar reference on every shape.
// - On AMX the quads' vectors are not multiplied at once but stored: 16 of
//   them are the 16 rows of a B tile (16 positions x 4 bytes each), and one
//   tdpbsud (weights signed in A, activations unsigned in B) does 16 quads
//   for up to 16 channels, the A and C tiles configured with as many rows as
//   there are channels. C's rows are the VNNI kernel's accumulators.
// It is used (direct_qconv_pays) where the GEMM's lanes would go unfilled:
// fewer than 16 output channels per group, on the Avx512Vnni and Amx paths
// of a CPU with VBMI (Zen 4 and later, Ice Lake and later); elsewhere the
// GEMM path runs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/conv.h"
#include "tensor/cpu/qgemm.h"

namespace kiln::cpu {

// A conv weight's taps in quads (the Note), for one group count.
struct DirectQConvWeight {
  struct Tap {
    int16_t c = 0, ky = 0, kx = 0;
    int8_t run = 0;  // 0 or 1: which of the quad's two runs (windows) it is read from
  };
  struct Quad {
    int count = 0;  // taps used, 1..4; the rest have zero weights
    Tap taps[4];
  };
  int64_t groups = 1, group_out = 0;  // O/groups output channels per group
  int64_t channels = 0, kh = 0, kw = 0;  // C/groups input channels per group; the kernel
  std::vector<Quad> quads;
  // (groups, quads, O/groups): the quad's 4 weights as one int32, byte e
  // the weight of taps[e] (0 past count).
  std::vector<int32_t> weight;
  // The same weights as AMX A tiles, for the Amx path: (groups, ceil(O/groups
  // / 16) channel tiles, ceil(quads / 16) k blocks, 16 channels, 16 quads),
  // zero past the channels and the quads.
  std::vector<int32_t> amx_weight;
  std::vector<int32_t> colsum;  // (O): sum of every tap's weight, per output channel
};

// weight: the qint8 conv weight (O, C/groups, kh, kw), any strides.
std::shared_ptr<const DirectQConvWeight> pack_direct_qconv(const Tensor& weight, int64_t groups);

// Whether this CPU and path have the direct convolution: AVX-512 VNNI and
// VBMI, on the Avx512Vnni and Amx paths.
bool direct_qconv_available(QGemmPath path);
// Whether they can run it for these params: available, and each run's
// window inside 64 bytes.
bool direct_qconv_supported(QGemmPath path, const Conv2dParams& p, const Conv2dShape& s);
// Whether it should: supported, and fewer than 16 output channels per group
// (the Note).
bool direct_qconv_pays(QGemmPath path, const Conv2dParams& p, const Conv2dShape& s, int64_t group_out);

// Which algorithm the CPU's quantized conv2d runs: Auto is the direct form
// where direct_qconv_pays, else the implicit form (quantized_conv_implicit.h)
// where implicit_qconv_pays, else the GEMM over patch rows; Gemm, Direct and
// Implicit force one, for the tests (Direct and Implicit throw where they
// cannot run). Process-wide.
enum class QConvAlgorithm { Auto, Gemm, Direct, Implicit };
QConvAlgorithm qconv_algorithm();
class ForceQConvAlgorithm {  // sets it for a scope
 public:
  explicit ForceQConvAlgorithm(QConvAlgorithm algorithm);
  ~ForceQConvAlgorithm();
  ForceQConvAlgorithm(const ForceQConvAlgorithm&) = delete;
  ForceQConvAlgorithm& operator=(const ForceQConvAlgorithm&) = delete;

 private:
  QConvAlgorithm saved_;
};

// ---- one call, as the kernel sees it ---------------------------------------

// A quad's two windows (offsets from a block's first input byte) and the
// vpermt2b index that makes its lanes.
struct alignas(64) DirectQConvQuadCall {
  uint8_t index[64];
  int64_t window[2];
};
// 16 positions (or fewer, `valid`) of one output row.
struct DirectQConvBlock {
  int64_t input;   // offset of its first position's (c = 0, ky = 0, kx = 0) tap in the padded planes
  int64_t output;  // offset of its first position in an output plane
  int valid;       // 1..16 lanes
};
// The call's tables for one input size: `quads` parallel to the weight's.
struct DirectQConvPlan {
  DirectQConvPlan(const Conv2dParams& params, const Conv2dShape& shape) : p(params), s(shape) {}
  Conv2dParams p;
  Conv2dShape s;
  int64_t padded_h = 0, padded_w = 0;
  int64_t group_bytes = 0;  // C/groups * hp * wp: one group's padded planes
  std::vector<DirectQConvQuadCall> quads;
  std::vector<DirectQConvBlock> blocks;
};
DirectQConvPlan plan_direct_qconv(const DirectQConvWeight& w, const Conv2dParams& p, const Conv2dShape& s);

namespace qgemm_detail {
struct Epilogue;
}
// Blocks [b0, b1) of one image and group. image: the group's padded planes
// (plan.group_bytes and 64 bytes of slack past them, for the windows);
// e: the group's output stage, n = O/groups, with out at the group's first
// output plane and stride_n between planes. Compiled with VBMI; call only
// when direct_qconv_supported.
void qconv_direct_avx512vbmi(const DirectQConvPlan& plan, const DirectQConvWeight& w, int64_t group,
                             const uint8_t* image, int64_t b0, int64_t b1, const qgemm_detail::Epilogue& e);
// The same on AMX tiles (quantized_conv_direct_amxvbmi.cpp): 16 quads of a
// block of 16 positions are one B tile, and tdpbsud multiplies it by up to
// 16 channels' weights (w.amx_weight) at once. Call only on the Amx path
// when direct_qconv_supported.
void qconv_direct_amx(const DirectQConvPlan& plan, const DirectQConvWeight& w, int64_t group, const uint8_t* image,
                      int64_t b0, int64_t b1, const qgemm_detail::Epilogue& e);
// Bytes of slack past the padded planes that the windows may read.
constexpr int64_t kDirectQConvSlack = 64;

}  // namespace kiln::cpu
