// QuantizedKernels: the optional group of int8 kernels a backend may offer.
//
// Note [Quantized kernel group]
// The quantized kernels are a kernel group (Note [Kernel groups] in
// tensor/kernel_group.h) rather than more methods on Backend, so that a
// backend without them (CUDA today) needs no change: every quantized
// front-end asks quantized_kernels_for(device, op), which throws
//   "quantized linear: quantized kernels are not supported on cuda:0"
// naming the op and the device where none is registered. The CPU backend
// implements the group in tensor/cpu/ (cpu_quantized.h) on the int8 GEMM of
// tensor/cpu/qgemm.h.
//
// Conventions, beyond Note [Device dispatch]'s:
// - A quantized tensor is a UInt8 (quint8), Int8 (qint8) or Int32 (qint32)
//   tensor that carries QuantParams (Tensor::is_quantized()); its params are
//   read from the tensor, the output's included: the front-end allocates the
//   output with the params it must have, and the kernel writes values for them.
// - Activations into conv and linear are quint8 with one scale; weights are
//   qint8, symmetric (zero point 0), per tensor or per output channel.
// - Every rounding is one of Note [Quantization arithmetic]'s
//   (tensor/quant_math.h): kernels on every SIMD path agree with the scalar
//   reference bit for bit.
#pragma once

#include <memory>
#include <string_view>

#include "tensor/backend.h"
#include "tensor/kernel_group.h"

namespace kiln {

// A conv or linear weight prepared once for a backend's GEMM (packed into the
// layout its micro-kernel reads, with the per-channel sums that the input's
// zero point needs: sum_k (x - zx) * w = sum_k x * w - zx * sum_k w).
class PackedQuantizedWeight {
 public:
  virtual ~PackedQuantizedWeight() = default;
  // The qint8 weight it was packed from: (N, K) for linear, (O, C/groups, kh, kw) for conv.
  virtual const Tensor& weight() const = 0;
};

// The grid a static conv's own output has: its uint8 values stand for
// scale * (q - zero_point), clamped at zero_point when relu.
struct QuantizedConvGrid {
  double scale;
  int64_t zero_point;
  bool relu;
};

class QuantizedKernels : public KernelGroup {
 public:
  static constexpr std::string_view kName = "quantized";

  // ---- conversions (tensor/cpu/quantize.cpp) ----
  // out (quantized, any of the three dtypes, its own params) <- in (float32,
  // same shape), clamped to [lo, hi] (within the dtype's range).
  virtual void quantize(const Tensor& out, const Tensor& in, int64_t lo, int64_t hi) = 0;
  // out (float32) <- in (quantized).
  virtual void dequantize(const Tensor& out, const Tensor& in) = 0;
  // out (quantized) <- in (quantized, other params): dequantize then quantize, per element.
  virtual void requantize(const Tensor& out, const Tensor& in) = 0;

  // ---- conv and linear (tensor/cpu/quantized_linear.cpp, quantized_conv.cpp) ----
  // weight: qint8, 2-d (N, K) or 4-d (O, C/groups, kh, kw), symmetric, per
  // tensor or per channel along axis 0.
  virtual std::shared_ptr<const PackedQuantizedWeight> pack_weight(const Tensor& weight) = 0;
  // Static: x quint8 (M, K); bias float32 (N) or undefined; out quint8 (M, N)
  // with the output params; relu clamps at the output's zero point.
  virtual void linear(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                      bool relu) = 0;
  // Dynamic: x float32 (M, K), quantized here to quint8 with the scale of its
  // own min and max (the whole tensor), reduce_range as the observers';
  // out float32 (M, N) = dequantized accumulator + bias.
  virtual void linear_dynamic(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w,
                              const Tensor& bias, bool reduce_range) = 0;
  // Static: x quint8 (N, C, H, W), out quint8 (N, O, oh, ow); every group
  // in one call (p.groups of them, s is one group's shape). x may have any
  // strides; out is NCHW, or channels-last where conv2d_channels_last says
  // so (Note [Channels-last quantized activations] in tensor/memory_layout.h).
  virtual void conv2d(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                      const Conv2dParams& p, const Conv2dShape& s, bool relu) = 0;
  // Whether conv2d, given these operands, writes its output channels-last
  // (the layout it stores fastest); the front-end allocates out so.
  virtual bool conv2d_channels_last(const PackedQuantizedWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
    (void)w, (void)p, (void)s;
    return false;
  }
  // Static conv2d with a residual add fused into its output stage (Note
  // [Residual add in the output stage] in tensor/cpu/qgemm.h): out =
  // add(conv(x) on the grid `conv`, residual) on out's grid, relu clamping
  // the sum, byte for byte what conv2d into a tensor on `conv` followed by
  // add would give. Only where conv2d_channels_last is true; residual
  // quint8 per tensor, of out's shape and strides.
  virtual void conv2d_add(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                          const Conv2dParams& p, const Conv2dShape& s, const QuantizedConvGrid& conv,
                          const Tensor& residual, bool relu) = 0;
  // Dynamic, as linear_dynamic: x and out float32.
  virtual void conv2d_dynamic(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                              const Conv2dParams& p, const Conv2dShape& s, bool reduce_range) = 0;

  // ---- pooling and elementwise (tensor/cpu/quantized_pool.cpp, quantized_binary.cpp) ----
  // x and out quantized (N, C, H, W) with the same params and dtype; the
  // options and sizes as the float kernels' (Note [One pooling parameter
  // struct] in tensor/pool.h).
  virtual void max_pool2d(const Tensor& out, const Tensor& x, const MaxPool2dOptions& o, const Pool2dShape& s) = 0;
  virtual void avg_pool2d(const Tensor& out, const Tensor& x, const AvgPool2dOptions& o, const Pool2dShape& s) = 0;
  virtual void adaptive_avg_pool2d(const Tensor& out, const Tensor& x) = 0;
  // out = a + b on out's grid (quant_math::add_value); a, b, out same shape.
  virtual void add(const Tensor& out, const Tensor& a, const Tensor& b, bool relu) = 0;
};

// kernels_for<QuantizedKernels>(device, op), with a hint for the user in
// the error when `device`'s backend has none.
QuantizedKernels& quantized_kernels_for(Device device, std::string_view op);

}  // namespace kiln
