// Direct float32 convolution for stride 1 and dilation 1 (AVX2): no im2col.
//
// Note [Direct convolution over a wide output]
// im2col copies every input pixel kh*kw times into a (CKK, P) matrix; for
// LeNet's first layer that copy takes longer than the GEMM that reads it
// (1.06 against 0.57 ms per batch of 64 on one core). It can be avoided
// because, with stride and dilation 1, the columns of that matrix are
// shifted windows of one image. Pad the image into a scratch plane of
// width wp = W + 2*pad_w (height hp likewise) and number output positions
// along that wider row, q = oy*wp + ox; then
//   cols[r][q] = image[off(r) + q],   off(r) = c*hp*wp + ki*wp + kj,
// for tap r = (c*kh + ki)*kw + kj. Row r of the column matrix is the
// image itself, read from offset off(r): the GEMM's inner loop loads B
// vectors straight from the padded image through a table of CKK offsets
// (an "indirect" GEMM, as XNNPACK's). Positions with ox >= ow (the last
// wp - ow of each wide row) are computed too and thrown away: for LeNet
// 32/28 and 14/10 times the useful work, far less than im2col costs.
//
// The three products of a convolution use it as follows:
//   forward      out_wide (OC, Q) = W (OC, CKK) @ cols (CKK, Q), then the
//                valid positions (plus bias) are copied out;
//   grad_weight  gW (OC, CKK) += go_wide (OC, Q) @ cols^T: element (o, r) is
//                a dot product of go_wide row o with the image from off(r),
//                so it is computed as dot products, several (o, r) pairs at
//                once; go_wide holds zeros at the thrown-away positions, so
//                they add nothing;
//   grad_input   cols_grad (CKK, Q) = W^T (CKK, OC) @ go_wide (OC, Q), and
//                each row r of it is added into a padded gradient image at
//                off(r), a contiguous run (col2im's scatter, without the
//                columns ever being stored); the interior is then copied
//                out. A register tile takes the taps of one kernel position
//                (ki, kj) in up to 6 channels, whose runs lie a plane apart:
//                adjacent taps of one channel would overlap by one float,
//                and reading back a vector just stored half over it stalls.
// Thrown-away positions still multiply: a non-finite input value meets a
// zero gradient there in grad_weight, and a non-finite weight meets one in
// grad_input (0 * inf = NaN), where im2col would not look. Such a gradient
// is not finite either way, but may read NaN where im2col gives inf.
//
// The scratch planes (padded image, wide output or gradient) belong to one
// thread during one call and are zeroed once; each image then writes only
// the valid positions, so the borders and gaps stay zero.
//
// Note [Direct convolution with channels in the vector]
// The wide output wastes (wp - ow) / wp of the forward's work, and more on
// small planes: LeNet's second layer computes 144 wide positions for 100
// valid ones. When the output channels come in multiples of 8 the forward
// can turn the product around and put 8 output channels, not 8 positions,
// in a vector: a register tile is 6 positions x 16 channels,
//   acc[p][v] += broadcast(image[off(r) + q_p]) * W^T[r][8v .. 8v + 7],
// so the positions need not be neighbours and only the valid ones (their
// wide offsets q_p listed in the plan) are computed. The tile comes out
// position-major, (P, OC), and the output pass transposes it into the
// (OC, P) planes while it adds the bias. The plan picks this form when OC
// is a multiple of 8 and the wide form would waste more than an eighth of
// its work (P < 7/8 of wide_stride).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "tensor/conv.h"

namespace kiln::cpu {

// The offsets and sizes of Note [Direct convolution over a wide output] for
// one convolution.
struct DirectConvPlan {
  Conv2dShape shape;                   // the convolution's, as the front-end made it
  Size2d padding;                      // its Conv2dParams' (stride and dilation are 1)
  int64_t padded_h = 0, padded_w = 0;  // hp, wp
  int64_t wide = 0;                    // Q = (oh - 1) * wp + ow positions
  int64_t wide_stride = 0;             // Q rounded up to 16: the row stride of wide planes
  int64_t image_floats = 0;            // C*hp*wp and a zero tail the last vector loads read
  std::vector<int64_t> offsets;        // (CKK): off(r)
  int64_t out_channels = 0;            // OC
  // The forward's form: Note [Direct convolution with channels in the
  // vector] when true, with the wide offset q of each valid position.
  bool forward_by_channel = false;
  std::vector<int64_t> positions;  // (oh*ow) when forward_by_channel, else empty
};

// Whether the direct path serves this float32 convolution on this CPU.
bool direct_conv_applies(const Conv2dParams& p, const Conv2dShape& s);
DirectConvPlan make_direct_conv_plan(const Conv2dParams& p, const Conv2dShape& s, int64_t out_channels);

// Weight (OC, CKK) (rows `row_stride` apart, unit column stride) repacked
// for direct_conv_forward_image. Over the wide output: blocks of 6 output
// channels, each block (CKK, rows) k-major. With channels in the vector:
// blocks of 16 channels (8 for a last odd eight), each (CKK, 16 or 8).
std::vector<float> pack_direct_conv_weight(const DirectConvPlan& plan, const float* weight, int64_t row_stride);

// std::vector's allocator for 64-byte aligned buffers: rows of the wide
// planes start on a cache line (wide_stride is a multiple of 16 floats), so
// the kernels' loads of them never straddle two lines.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const CacheLineAllocator&) const = default;
};
using AlignedFloats = std::vector<float, CacheLineAllocator<float>>;

// One thread's scratch for one convolution call, zeroed on construction.
// grad_weight's dot products keep their 8 lanes apart across all the
// thread's images (`lanes`) and add them up once at the end
// (direct_conv_grad_weight_sum): a horizontal sum per product per image
// would cost as much as LeNet conv2's 17-step dot products themselves.
struct DirectConvScratch {
  DirectConvScratch(const DirectConvPlan& plan, int64_t out_channels, bool grad_weight, bool grad_input)
      : image(plan.image_floats, 0.f),
        wide(out_channels * plan.wide_stride, 0.f),
        lanes(grad_weight ? out_channels * static_cast<int64_t>(plan.offsets.size()) * 8 : 0, 0.f),
        grad_image(grad_input ? plan.image_floats : 0, 0.f) {}
  AlignedFloats image;       // (C, hp, wp) + tail
  AlignedFloats wide;        // (OC, wide_stride)
  AlignedFloats lanes;       // (OC, CKK, 8) partial sums of grad_weight
  AlignedFloats grad_image;  // (C, hp, wp) + tail: grad_input, padded
};

// Copies one image x (C, H, W), element (c, y, x) at x[c*sc + y*sy + x*sx],
// into scratch.image's interior.
void load_direct_conv_image(const DirectConvPlan& plan, const float* x, int64_t sc, int64_t sy, int64_t sx,
                            DirectConvScratch& scratch);

// out (OC, oh, ow), channel planes `out_channel_stride` apart and rows
// contiguous, = conv(image in scratch, weight) + bias (nullable, unit
// stride). `packed` is pack_direct_conv_weight's result.
void direct_conv_forward_image(const DirectConvPlan& plan, const std::vector<float>& packed, const float* bias,
                               float* out, int64_t out_channel_stride, DirectConvScratch& scratch);

// Copies one image's grad_out (OC, oh, ow), channel planes
// `go_channel_stride` apart and rows contiguous, into scratch.wide.
void load_direct_conv_grad(const DirectConvPlan& plan, int64_t out_channels, const float* grad_out,
                           int64_t go_channel_stride, DirectConvScratch& scratch);

// scratch.lanes += the gradient of the weight from one image: the image and
// the gradient loaded into scratch.
void direct_conv_grad_weight_image(const DirectConvPlan& plan, int64_t out_channels, DirectConvScratch& scratch);

// Weight (OC, CKK) repacked for direct_conv_grad_input_image: for each
// kernel position kk = ki*kw + kj and each block of up to 6 channels c0..,
// a block (OC, rows) holding weight[o][(c0 + i)*kh*kw + kk].
std::vector<float> pack_direct_conv_weight_for_grad_input(const DirectConvPlan& plan, const float* weight,
                                                          int64_t out_channels, int64_t row_stride);

// grad_input (C, H, W), element (c, y, x) at grad_input[c*sc + y*sy + x*sx],
// = the gradient from the grad_out loaded into scratch.
void direct_conv_grad_input_image(const DirectConvPlan& plan, const std::vector<float>& packed, int64_t out_channels,
                                  float* grad_input, int64_t sc, int64_t sy, int64_t sx, DirectConvScratch& scratch);
// grad_weight (OC, CKK) contiguous += the sums of scratch.lanes.
void direct_conv_grad_weight_sum(const DirectConvScratch& scratch, float* grad_weight);

}  // namespace kiln::cpu
