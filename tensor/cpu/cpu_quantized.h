// The CPU backend's quantized kernels (Note [Quantized kernel group] in
// tensor/quantized_kernels.h), on the int8 GEMM of qgemm.h. Each group of
// methods is defined in its own file, named beside it.
#pragma once

#include "tensor/quantized_kernels.h"

namespace kiln::cpu {

class CpuQuantizedKernels final : public QuantizedKernels {
 public:
  // quantize.cpp
  void quantize(const Tensor& out, const Tensor& in, int64_t lo, int64_t hi) override;
  void dequantize(const Tensor& out, const Tensor& in) override;
  void requantize(const Tensor& out, const Tensor& in) override;

  // quantized_linear.cpp
  std::shared_ptr<const PackedQuantizedWeight> pack_weight(const Tensor& weight) override;
  void linear(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
              bool relu) override;
  void linear_dynamic(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                      bool reduce_range) override;

  // quantized_conv.cpp
  bool conv2d_channels_last(const PackedQuantizedWeight& w, const Conv2dParams& p, const Conv2dShape& s) override;
  void conv2d(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
              const Conv2dParams& p, const Conv2dShape& s, bool relu) override;
  void conv2d_dynamic(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                      const Conv2dParams& p, const Conv2dShape& s, bool reduce_range) override;
  void conv2d_add(const Tensor& out, const Tensor& x, const PackedQuantizedWeight& w, const Tensor& bias,
                  const Conv2dParams& p, const Conv2dShape& s, const QuantizedConvGrid& conv, const Tensor& residual,
                  bool relu) override;

  // quantized_pool.cpp
  void max_pool2d(const Tensor& out, const Tensor& x, const MaxPool2dOptions& o, const Pool2dShape& s) override;
  void avg_pool2d(const Tensor& out, const Tensor& x, const AvgPool2dOptions& o, const Pool2dShape& s) override;
  void adaptive_avg_pool2d(const Tensor& out, const Tensor& x) override;

  // quantized_binary.cpp
  void add(const Tensor& out, const Tensor& a, const Tensor& b, bool relu) override;
};

}  // namespace kiln::cpu
