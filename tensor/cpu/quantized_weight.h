// The CPU's packed conv/linear weight and the pieces its two users (the
// linear kernels in quantized_linear.cpp and the conv kernels in
// quantized_conv.cpp) share: the per-call output stage and thread-local
// scratch.
//
// Note [Quantized convolution on the int8 GEMM]
// A quantized conv2d is one int8 GEMM per image and group, with the
// activations as the uint8 A operand (qgemm.h fixes the signs: A unsigned,
// W signed), so A's rows are output positions and its columns the patch:
//   A (P = oh*ow, K = kh*kw*C/groups) x W^T (K, O/groups) -> out (P, O/groups)
// and the GEMM writes out[p][o] at p * O + o: one output pixel's channels
// together, channels-last (Note [Channels-last quantized activations] in
// tensor/memory_layout.h; an NCHW output, p + o * (oh*ow), works too and is
// what the dynamic form's float output gets).
// - The input image is first copied into a padded, channels-last buffer
//   (groups, H + 2*pad_h, W + 2*pad_w, C/groups), its border filled with the
//   input's zero point: a padded tap then contributes (zx - zx) * w = 0, as
//   float zero padding does, and building A needs no bounds checks. A
//   channels-last input (the previous convolution's output) is copied a row
//   at a time; an NCHW one is transposed byte by byte.
// - On the Amx path with one group, and on the VNNI paths where kernel rows
//   are whole groups of 4 bytes, the padded buffer is A itself: the implicit
//   form (the two Notes in quantized_conv_implicit.h) reads it in place, and
//   no patch rows below are built.
// - Channels last, one patch row is kh runs of kw*C/groups contiguous bytes
//   (dilation 1), where the NCHW order (c, ky, kx) would be C*kh runs of kw
//   bytes: three times fewer, longer copies for a 3-channel input. The weight
//   is reordered once, at packing, to the same (ky, kx, c) order of K.
// - Runs are copied in 16-byte pieces rounded up, left to right: the bytes
//   written past a run's end are overwritten by the next run, and the
//   buffers carry kCopySlack bytes of tail room for the last one, which
//   makes a short run one unaligned load and store instead of a memcpy call.
// - A 1x1 kernel with stride 1 and no padding needs no A at all: the
//   channels-last buffer is A.
// - Images are spread over threads; with fewer images than threads (batch 1)
//   each image's rows of A are split instead, every thread building and
//   multiplying its own block of positions.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "tensor/cpu/qgemm.h"
#include "tensor/cpu/quantized_conv_direct.h"
#include "tensor/cpu/quantized_conv_implicit.h"
#include "tensor/quant_math.h"
#include "tensor/quantized_kernels.h"

namespace kiln::cpu {

// A qint8 weight packed for one int8 GEMM path: (N, K) for linear, or
// (O, C/groups, kh, kw) for conv, reordered to (O, kh, kw, C/groups) per
// group (Note [Quantized convolution on the int8 GEMM]).
class CpuPackedQuantizedWeight final : public PackedQuantizedWeight {
 public:
  // weight: qint8, symmetric, 2-d or 4-d, per tensor or per channel along
  // axis 0 (checked by the front-end, ops::pack_quantized_weight).
  CpuPackedQuantizedWeight(const Tensor& weight, QGemmPath path);

  const Tensor& weight() const override { return weight_; }
  int64_t out_channels() const { return weight_.size(0); }
  // float32 scale of each output channel (a per-tensor scale repeated).
  const std::vector<float>& scales() const { return scales_; }
  QGemmPath path() const { return path_; }

  // The weight packed for one group count: one GEMM weight per group,
  // (O/groups, K) each, and for a conv weight on a path that has them the
  // direct convolution's quads (quantized_conv_direct.h) and, for one group,
  // the implicit convolution's kernel rows (quantized_conv_implicit.h), else
  // null.
  struct Groups {
    std::vector<std::shared_ptr<const PackedQWeight>> gemm;
    std::shared_ptr<const DirectQConvWeight> direct;
    std::shared_ptr<const ImplicitQConvWeight> implicit;
    // A conv weight's sum over each kernel row, (groups, kh, O/groups):
    // kernel_row_sum[(g * kh + ky) * O/groups + o] = sum over kx, c of
    // w[g * O/groups + o][c][ky][kx] (Note [Kernel rows in the padding] in
    // quantized_conv_implicit.h). Empty for a linear weight.
    std::vector<int32_t> kernel_row_sum;
  };
  // groups = 1 is packed up front, other counts on first use (a conv's
  // groups is known only from its input's channels).
  const Groups& groups(int64_t groups) const;

 private:
  Groups pack_groups(int64_t groups) const;

  Tensor weight_;  // as given, for weight()
  std::vector<float> scales_;
  QGemmPath path_;
  Groups one_group_;
  mutable std::mutex mutex_;
  mutable std::list<std::pair<int64_t, Groups>> other_groups_;
};

// Packs for a given path; CpuQuantizedKernels::pack_weight packs for
// qgemm_path(). Tests use this to run every path the CPU has.
std::shared_ptr<const CpuPackedQuantizedWeight> pack_quantized_weight(const Tensor& weight, QGemmPath path);

// `w` as the CPU's packed weight; throws naming `op` if it was packed by
// another backend.
const CpuPackedQuantizedWeight& cpu_packed_weight(const PackedQuantizedWeight& w, std::string_view op);

// The per-channel numbers of one conv or linear call's output stage, for
// input scale sx and the weight's channel scales sw[n] (Note [Quantization
// arithmetic] in tensor/quant_math.h).
struct QuantizedOutputStage {
  const int32_t* bias = nullptr;    // static: quantize_bias(bias[n], sx, sw[n]); nullptr without bias
  const float* scale = nullptr;     // static: requantize_multiplier(sx, sw[n], sy); dynamic: sx * sw[n]
  const float* float_bias = nullptr;  // dynamic: bias[n] as given; nullptr without bias
};
// Static: bias float32 (N) or undefined. The arrays live in the calling
// thread's scratch until its next call.
QuantizedOutputStage static_output_stage(const CpuPackedQuantizedWeight& w, const Tensor& bias, float scale_x,
                                         float scale_y);
QuantizedOutputStage dynamic_output_stage(const CpuPackedQuantizedWeight& w, const Tensor& bias, float scale_x);

// The scale and zero point that dynamic quantization gives a float tensor
// with this min and max (PyTorch's MinMaxObserver for affine quint8,
// Note [Dynamic quantization parameters] in quantized_linear.cpp).
struct DynamicQParams {
  float scale;
  int32_t zero_point;
};
DynamicQParams dynamic_qparams(float min, float max, bool reduce_range);
// x: float32, any shape and strides -> a quint8 tensor of x's shape on x's
// grid from dynamic_qparams of its own min and max (0 included).
Tensor quantize_dynamic_input(const Tensor& x, bool reduce_range);

// The float32 scale and the zero point of a per-tensor quantized activation.
struct PerTensorParams {
  float scale;
  int32_t zero_point;
};
inline PerTensorParams per_tensor(const Tensor& t) {
  const QuantParams& p = *t.impl()->quant_params();
  return {quant_math::scale_as_float(p.scales[0]), static_cast<int32_t>(p.zero_points[0])};
}

// Bytes past every scratch buffer's end that copies may write and read
// (Note [Quantized convolution on the int8 GEMM]).
constexpr int64_t kCopySlack = 32;
// The calling thread's scratch buffer number `slot` (0..3), at least `bytes`
// long plus kCopySlack; kept between calls, so a steady model allocates
// nothing.
uint8_t* thread_scratch(int slot, int64_t bytes);

// How many threads `macs` multiply-adds are worth (at least 1, at most the
// CPU threads and `items`).
int threads_for_macs(double macs, int64_t items);

}  // namespace kiln::cpu
