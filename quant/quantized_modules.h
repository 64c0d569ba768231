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
//
// Note [A conv run by the add it feeds]
// A residual block's last conv writes its output only for the add after it
// to read back. fuse_conv_add (quant/quantize.h) lets the add run the conv
// instead, with the add in the conv's output stage (Note [Residual add in
// the output stage] in tensor/cpu/qgemm.h), byte for byte what the two
// layers give apart. Eager mode has no graph to rewrite: the model's forward
// still calls the conv, then the add. So the pair hands over at run time:
// - the conv keeps its place, weight and state-dict keys (a saved model
//   loads either way), and says in its repr which add runs it
//   (runs_in=...); its forward checks its input and hands it on unchanged,
//   remembering it (per thread, so one model can run on several threads);
// - the add holds the conv (not as a submodule: nothing moves in the
//   state dict) and says so (conv=...); of its two inputs, the one that is
//   the very tensor the conv handed on goes through the conv, the other is
//   the residual. Layers that pass tensors through untouched (the
//   nn::Identity a fused BatchNorm leaves) may sit between them.
// If neither input is what the conv handed on, the forward is not the one
// the pair was declared for, and the add throws naming both layers. That
// check catches an add that never receives the conv's input; it cannot
// prove the pair right (an add whose residual happens to be the conv's
// input would take that), so the pairs are the model's to declare, as
// fuse_modules' groups are (nn::CifarResNet::residual_convs).
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
  std::string where() const;  // "layer1.0.conv2 (QuantizedConv2d)", as errors name the layer

 protected:
  // Registers the "scale" and "zero_point" buffers.
  QuantizedModule(std::string qualified_name, double scale, int64_t zero_point);
  void check_quantized_input(const Tensor& x, const char* which = "input") const;

  Tensor scale_, zero_point_;
};

// float32 -> quint8 on a fixed grid (a converted QuantStub).
class Quantize : public QuantizedModule {
 public:
  // [quant_min, quant_max]: the grid's range, narrower than quint8's with
  // reduce_range, as the FakeQuantize it replaces clamps.
  Quantize(std::string qualified_name, double scale, int64_t zero_point, int64_t quant_min = 0,
           int64_t quant_max = 255);
  Tensor forward(const Tensor& x) override;
  const int64_t quant_min, quant_max;
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

  // The dotted name of the QuantizedAdd that runs this conv (fuse_conv_add),
  // or empty: forward then hands its input on (Note [A conv run by the add
  // it feeds]).
  std::string runs_in;
  // The conv, then its output added to `residual` onto the grid (scale,
  // zero_point), relu clamping the sum: QuantizedAdd's arithmetic, in one op.
  Tensor forward_add(const Tensor& x, const Tensor& residual, double scale, int64_t zero_point, bool relu);
  // Whether t is the input this conv last handed on, on this thread; a
  // match forgets it.
  bool take_handed_on(const Tensor& t);

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
  // The conv this add runs (fuse_conv_add), or null (Note [A conv run by
  // the add it feeds]).
  std::shared_ptr<QuantizedConv2d> conv;
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
