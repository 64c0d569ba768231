// The int8 layers of a converted model, as torch.ao.nn.quantized's: each
// holds its qint8 weight (packed once for the CPU's int8 GEMM), its float32
// bias and its output grid, and runs one quantized op. convert() builds them
// from the prepared layers (quant/fake_quant_modules.h); quantize_dynamic()
// builds the Dynamic ones from float layers.
//
// State dicts hold "weight" (a qint8 tensor with its per-channel scales and
// zero points, which safetensors files keep), "bias", and "scale" and
// "zero_point" (float64 and int64 scalars) for the output grid.
//
// Every layer checks its input and throws naming itself by its dotted name
// in the model: "fc1 (QuantizedLinear): expected a quint8 input, got a float32
// tensor; is a QuantStub missing before it?".
#pragma once

#include <memory>
#include <string>

#include "nn/module.h"
#include "quant/qconfig.h"
#include "tensor/conv.h"
#include "tensor/quantized_kernels.h"

namespace kiln::quant {

// The part the int8 layers share: the dotted name, the output grid.
class QuantizedModule : public nn::Module {
 public:
  std::string qualified_name;
  double scale() const;
  int64_t zero_point() const;

 protected:
  // Registers the "scale" and "zero_point" buffers.
  QuantizedModule(std::string qualified_name, double scale, int64_t zero_point);
  std::string where() const;
  void check_quantized_input(const Tensor& x, const char* which = "input") const;

  Tensor scale_, zero_point_;
};

// float32 -> quint8 on a fixed grid (a converted QuantStub).
class Quantize : public QuantizedModule {
 public:
  Quantize(std::string qualified_name, double scale, int64_t zero_point);
  Tensor forward(const Tensor& x) override;
};

// Any quantized tensor -> float32 (a converted DeQuantStub).
class DeQuantize : public nn::Module {
 public:
  explicit DeQuantize(std::string qualified_name = "");
  Tensor forward(const Tensor& x) override;
  std::string qualified_name;
};

// Conv and linear with bias, optional ReLU and requantization in one op.
// weight: qint8 with its params; bias float32 or undefined.
class QuantizedConv2d : public QuantizedModule {
 public:
  QuantizedConv2d(std::string qualified_name, const Tensor& weight, const Tensor& bias, const Conv2dParams& params,
                  bool relu, double scale, int64_t zero_point);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Conv2dParams params;
  const bool relu;
  Tensor weight, bias;

  // Packs the weight again for the int8 GEMM (load_state_dict does).
  void repack();

 private:
  std::shared_ptr<const PackedQuantizedWeight> packed_;
};

class QuantizedLinear : public QuantizedModule {
 public:
  QuantizedLinear(std::string qualified_name, const Tensor& weight, const Tensor& bias, bool relu, double scale,
                  int64_t zero_point);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const bool relu;
  Tensor weight, bias;

  // Packs the weight again for the int8 GEMM (load_state_dict does).
  void repack();

 private:
  std::shared_ptr<const PackedQuantizedWeight> packed_;
};

// A residual add: two quantized tensors onto this layer's grid.
class QuantizedAdd : public QuantizedModule {
 public:
  // relu: clamp at the output's zero point (a fused AddReLU).
  QuantizedAdd(std::string qualified_name, double scale, int64_t zero_point, bool relu = false);
  nn::TensorList forward_many(const nn::TensorList& inputs) override;
  std::string extra_repr() const override;

  const bool relu;
};

// A layer left in float32 inside the quantized region: dequantize, run the
// float layer, quantize onto the grid its observer chose.
class FloatLayer : public QuantizedModule {
 public:
  FloatLayer(std::string qualified_name, std::shared_ptr<nn::Module> layer, double scale, int64_t zero_point);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Module> layer;
};

// Dynamic quantization (quantize_dynamic): float32 in and out; the weight is
// qint8 per output channel, the input is quantized per call to quint8 from
// its own min and max.
class DynamicQuantizedLinear : public nn::Module {
 public:
  DynamicQuantizedLinear(std::string qualified_name, const Tensor& weight, const Tensor& bias, bool relu,
                         bool reduce_range);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::string qualified_name;
  const bool relu, reduce_range;
  Tensor weight, bias;

  // Packs the weight again for the int8 GEMM (load_state_dict does).
  void repack();

 private:
  std::shared_ptr<const PackedQuantizedWeight> packed_;
};

class DynamicQuantizedConv2d : public nn::Module {
 public:
  DynamicQuantizedConv2d(std::string qualified_name, const Tensor& weight, const Tensor& bias,
                         const Conv2dParams& params, bool relu, bool reduce_range);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::string qualified_name;
  const Conv2dParams params;
  const bool relu, reduce_range;
  Tensor weight, bias;

  // Packs the weight again for the int8 GEMM (load_state_dict does).
  void repack();

 private:
  std::shared_ptr<const PackedQuantizedWeight> packed_;
};

}  // namespace kiln::quant
