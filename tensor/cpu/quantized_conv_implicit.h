// The implicit int8 convolution on AMX tiles: the GEMM of Note [Quantized
// convolution on the int8 GEMM] with its A operand read straight from the
// padded channels-last image, so that no patch rows are built.
//
// Note [Implicit int8 convolution on AMX tiles]
// An AMX tile load takes 16 rows of 64 bytes at any one stride. In a padded
// channels-last image (hp, wp, C), the inputs of output pixel (y, x) under
// kernel row ky are one run of kw*C bytes,
//   image[((y*stride_h + ky*dil_h) * wp + x*stride_w) * C ...],
// and the runs of 16 neighbouring pixels of an output row are stride_w*C
// bytes apart. So if K is laid out per kernel row as that run rounded up to
// whole 64-byte blocks (R bytes, the weight zero past kw*C), block j of
// kernel row ky for 16 pixels is one tile load at
//   base(pixel 0) + ky*dil_h*wp*C + 64*j,  rows stride_w*C apart,
// and the whole convolution is the GEMM's tile loop over kh*R/64 blocks
// with the A tile loaded from the image. The bytes a row reads past its run
// belong to the next pixels (or to the buffer's tail room) and meet zero
// weights. The weight is packed once into these rows: (O, kh*R), the
// (ky, kx, c) order of the GEMM form with each kernel row zero-padded.
// - Blocks of pixels: with stride 1 the runs of consecutive pixels of the
//   padded grid are C bytes apart across row ends too, so a block is 16
//   consecutive pixels of the padded width (y*wp + x); the wp - ow pixels of
//   each row past the output's width are computed and not stored ("pitched"
//   blocks, 6% extra work for a 32x32 image with padding 1, 20% for 8x8).
//   With a larger stride a block is up to 16 pixels of one output row.
// - The price is the zero tail of each kernel row: for 3x3 kernels 25% of
//   the multiplies at 16 or 32 channels, none at 64. Tile multiplies are
//   cheap beside building patch rows, so the form is used
//   (implicit_qconv_pays) where a kernel row padded to 64-byte blocks is at
//   most three times the run (R <= 3*kw*C: a 6-channel 5-wide row, 30 bytes
//   in 64, still gains; a 3-channel 3x3 row, 9 bytes in 64, is stacked
//   instead: Note [Stacked kernel rows] below), or the kernel is 1x1 (the
//   GEMM form pads its K = C to 64-byte blocks as well, after copying each
//   pixel), with groups 1 and dilation_w 1, on the Amx path; but a strided
//   1x1 onto an output at most 8 wide, whose blocks (one output row each)
//   would be half empty, takes the GEMM form's full rows
//   (implicit_blocks_half_empty).
// - The output stage of one step (16 or 32 pixels by 16 or 32 columns)
//   runs while the next step's tiles compute: the kernel keeps two buffers
//   of accumulators, so the vector work of one and the tile work of the
//   other overlap (8-10% of ResNet-20's 16-channel layers).
// The accumulators meet the GEMM's offsets and output stage (finish_zmm), so
// every byte equals the GEMM form's and the scalar reference's.
//
// Note [Implicit int8 convolution on the VNNI paths]
// The VNNI kernels (qgemm_simd.h) need no tiles: they broadcast 4 bytes of
// one A row at a time to every lane. So the same idea needs no padding of
// the kernel rows at all, only that no group of 4 values of K straddles two
// runs: with K in the GEMM form's (ky, kx, c) order, row p of A is the kh
// runs of kw*C bytes at
//   plane + ((y*stride_h + ky*dil_h) * wp + x*stride_w) * C,   ky = 0..kh-1
// (kh*kw runs of C bytes with dilation_w > 1), and the pixels of one output
// row are stride_w*C bytes apart. qgemm_runs (qgemm.h) takes the runs'
// offsets from a pixel's first byte and multiplies an output row's pixels
// as rows of A lda = stride_w*C apart, on the GEMM form's packed weight.
// - It runs (implicit_runs_pay) on the Avx2, AvxVnni and Avx512Vnni paths
//   where kw*C (or C, with dilation_w > 1) is a multiple of 4: every 3x3
//   layer with 4k channels. A 1x1 with stride 1 and no padding needs neither
//   form: the plane is A already.
// - Where kw*C is not (LeNet's conv2: 5*6 = 30 bytes), the kernel rows are
//   padded as on AMX, but only to a multiple of 4 (R = 32 for LeNet's):
//   the weight is packed once more as (O, kh*R) with zeros past each row's
//   kw*C (pack_implicit_qconv), and each run is read as R bytes. The last
//   group of a run reads up to 3 bytes of the next pixel, which meet the
//   zero weights; past the last pixel of the plane that is up to 3 bytes of
//   tail room (ImplicitQConvRuns::overread). K grows by under 4/(kw*C) per
//   row (7% for LeNet's), where patch rows would copy every byte of A. With
//   dilation_w > 1 and taps of C % 4 != 0 bytes, the patch rows stay.
// - The Amx path keeps its tiles (above). The Avx2 path reads the runs as
//   the VNNI paths do where vpmaddubsw cannot saturate on the plane's bytes
//   (Note [Int8 GEMM on AVX2 without VNNI] in qgemm_kernels.h), and else
//   gathers each row's runs into int16 patch rows as it widens them.
// - Broadcasts read only inside the runs: no tail room is needed, and the
//   bytes equal the GEMM form's, whose rows are copies of the same runs.
//
// Note [Kernel rows in the padding]
// In the top and bottom output rows of a padded convolution some kernel
// rows read only the padding: for a 3x3 with padding 1, output row 0's
// first and the last row's third. Their bytes are all the input's zero
// point z, so their part of every sum is z times the sum of those kernel
// rows' weights, the same for every pixel of the row. The in-place form of
// the VNNI paths leaves such runs out (ARunsSkip in qgemm.h) and starts
// the accumulators at z * (their weights' sum) more instead, per output
// channel from kernel_row_sum (quantized_weight.h), in the wrapping int32
// of the GEMM's offsets: the sums are exactly those of the full K, and the
// output's bytes the same. The multiplies saved are 2 of 3*out_h kernel
// rows: 8% of an 8x8 layer, 4% at 16x16, 2% at 32x32.
// Only whole kernel rows go: a pixel of the left or right column has its
// padded taps inside a run shared with the other pixels of its row.
//
// Note [Stacked kernel rows]
// With few channels a kernel row is too short for a 64-byte tile row: a
// 3-channel 3x3 layer (an image's first convolution) has runs of 9 bytes,
// 7x padding, and so takes patch rows of 27 bytes. There the image is
// copied once more with its kernel rows stacked into each pixel: pixel
// (y, x) of the stacked image holds the kh pixels (y*stride_h + ky*dil_h,
// x) of the padded image, kh*C bytes in (ky, c) order. The convolution is
// then a 1 x kw one over kh*C channels with stride (1, stride_w) and no
// padding (the stacked image keeps the horizontal padding, out_h rows of
// padded_w pixels), whose run of kw*kh*C bytes is one tile row: 27 bytes in
// 64 and one k block per 16 pixels, where the form above would take three
// blocks of 9 bytes each. The weight is packed as such a layer's, in (kx,
// ky, c) order. It is used (stacked_qconv_packable) on the Amx path where
// the plain rows are not packable, kh*C <= 16 (the byte interleave that
// builds the stacked rows from NCHW planes), and the stacked run at most
// triples in 64-byte padding; the copy costs kh bytes per input byte, small
// beside the patch rows' kh*kw.
// With one k block and at most 16 output channels the weight is one tile,
// kept in place for the whole call (Note [Weight tile kept in place] in
// quantized_conv_implicit_amx.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/conv.h"
#include "tensor/cpu/qgemm.h"

namespace kiln::cpu {

// The weight in kernel rows of R bytes (the Notes): for the Amx path's
// tiles, and for the VNNI paths' runs where a row is not 4k bytes.
struct ImplicitQConvWeight {
  int64_t out_channels = 0, channels = 0, kh = 0, kw = 0;
  int64_t row_bytes = 0;  // R: kw*C rounded up to a multiple of 64 (Amx) or 4 (the VNNI paths)
  std::shared_ptr<const PackedQWeight> packed;  // (O, kh*R)
  // Note [Stacked kernel rows]: above 0, the layer's kh kernel rows stacked
  // into its channels (channels = stacked_kh * C, kh = 1), read from the
  // stacked image.
  int64_t stacked_kh = 0;
};

// Whether a (O, C, kh, kw) weight is worth packing this way on `path`: on
// Amx, kernel rows that 64-byte padding at most triples (R <= 3*kw*C), and
// any 1x1 (whose GEMM form pads K = C to 64-byte blocks just the same, and
// copies each strided or padded pixel into a patch row first); on Avx2,
// AvxVnni and Avx512Vnni, rows of kw*C % 4 != 0 bytes (the others are read
// on the GEMM form's own weight).
bool implicit_qconv_packable(QGemmPath path, int64_t channels, int64_t kh, int64_t kw);
// reordered: (O, kh, kw, C) int8, the GEMM form's order of K.
std::shared_ptr<const ImplicitQConvWeight> pack_implicit_qconv(const int8_t* reordered, int64_t out_channels,
                                                               int64_t channels, int64_t kh, int64_t kw,
                                                               QGemmPath path);
// Note [Stacked kernel rows]: whether a (O, C, kh, kw) weight is packed with
// its kernel rows stacked into its channels, and the packing (reordered as
// for pack_implicit_qconv).
bool stacked_qconv_packable(QGemmPath path, int64_t channels, int64_t kh, int64_t kw);
std::shared_ptr<const ImplicitQConvWeight> pack_stacked_qconv(const int8_t* reordered, int64_t out_channels,
                                                              int64_t channels, int64_t kh, int64_t kw,
                                                              QGemmPath path);
// The 1 x kw convolution over the stacked image that a call (p, s) becomes
// on a stacked weight w, and the stacked image itself: image (C, H, W), any
// strides -> (s.output.h, padded_w, kh*C), the horizontal border and the
// rows above and below the image at zero_point.
struct StackedQConvCall {
  Conv2dParams p;
  Conv2dShape s;
};
StackedQConvCall stacked_qconv_call(const ImplicitQConvWeight& w, const Conv2dParams& p, const Conv2dShape& s);
void stack_kernel_rows(const uint8_t* image, int64_t stride_c, int64_t stride_h, int64_t stride_w,
                       const Conv2dParams& p, const Conv2dShape& s, uint8_t zero_point, uint8_t* stacked);

// Whether a call can run on the packed weight w (which may be null): groups
// 1 and dilation_w 1.
bool implicit_qconv_pays(const ImplicitQConvWeight* w, const Conv2dParams& p);
// Whether a 1x1 call has a stride, so that each block is up to 16 pixels
// of one output row, onto an output at most 8 pixels wide: every block at
// most half full. The GEMM form's rows are full there and it measured
// faster, so the library's own choice takes it; a 3x3 with a stride onto
// 8x8 did not gain, and stays on the tiles (docs/BENCHMARKS.md). A stacked
// weight is never 1x1 (its rows stack a kernel of kh > 1).
bool implicit_blocks_half_empty(const Conv2dParams& p, const Conv2dShape& s);

// The implicit form on the VNNI paths (the second Note): whether `path`
// runs it for this call, given the weight's padded rows w (null where it
// has none: groups > 1, or rows of 4k bytes).
bool implicit_runs_pay(QGemmPath path, const ImplicitQConvWeight* w, const Conv2dParams& p, const Conv2dShape& s);
// Note [Kernel rows in the padding]: the runs output row y leaves out, the
// kernel rows above and below the image (runs_per_row runs each, in the
// (ky, kx) order of implicit_qconv_runs).
struct KernelRowSkip {
  int first = 0, last = 0;
  bool operator==(const KernelRowSkip&) const = default;
};
KernelRowSkip kernel_rows_in_padding(const Conv2dParams& p, const Conv2dShape& s, int64_t y, int64_t runs_per_row);

// How a call's patch rows are read from a padded channels-last plane
// padded_w pixels wide: each run's start from a pixel's first byte, its
// groups of 4 bytes, and the weight they meet.
struct ImplicitQConvRuns {
  std::vector<int64_t> offsets;  // empty where the form cannot run
  int64_t groups = 0;
  bool padded_rows = false;      // read as w's rows of R bytes, on w.packed; else on the GEMM form's weight
  int64_t overread = 0;          // bytes read past the plane's end (tail room the buffer needs)
};
ImplicitQConvRuns implicit_qconv_runs(const ImplicitQConvWeight* w, const Conv2dParams& p, const Conv2dShape& s,
                                      int64_t padded_w);

// One block of 16 pixels: where its tile rows start and lie apart in the
// padded image, and which output position each row is (-1: a pixel past the
// output's width, or past its end).
struct ImplicitQConvBlock {
  int64_t base, lda;
  int64_t position[16];
};

// One call's blocks of pixels and where their tiles are read (the Note);
// the same for every image of the call.
struct ImplicitQConvPlan {
  bool pitched = false;                     // stride 1: blocks of 16 pixels of the padded width
  std::vector<ImplicitQConvBlock> blocks;   // per image
  std::vector<int64_t> koff;                // byte offset of each 64-byte k block from a pixel's base
  int64_t image_bytes = 0;                  // the padded image and the tail room its tile loads read
};
ImplicitQConvPlan plan_implicit_qconv(const ImplicitQConvWeight& w, const Conv2dParams& p, const Conv2dShape& s);

namespace qgemm_detail {
struct Epilogue;
// Blocks [b0, b1) of one padded channels-last image (padded_h, padded_w, C)
// with plan.image_bytes readable; e.out is the image's output, element
// (position, o) at position * e.stride_m + o * e.stride_n, position =
// y * out_w + x, on the tiles begin_implicit_amx configured. In
// quantized_conv_implicit_amx.cpp.
void qconv_implicit_amx(const ImplicitQConvPlan& plan, const ImplicitQConvWeight& w, const uint8_t* padded,
                        int64_t b0, int64_t b1, const Epilogue& e);
// The tile configuration qconv_implicit_amx runs on: set before the calls
// one thread makes in a row, released after them. Loading it waits for the
// stores before it (the last image's output among them), so not per call.
void begin_implicit_amx();
void end_implicit_amx();
}  // namespace qgemm_detail

}  // namespace kiln::cpu
