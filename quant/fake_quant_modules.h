// The prepared forms of the layers that quantize: what prepare() and
// prepare_qat() put in place of Conv2d, Linear, the fused layers, nn::Add
// and average pooling, and what convert() turns into int8 modules.
//
// Note [Bit-exact fake quantization]
// PyTorch's fake quantization imitates the int8 model in float: it rounds
// the inputs and weights onto their grids, runs the float op, and rounds the
// result. The float op then sums in another order and with other roundings
// than the int8 kernel, and a value that lands near the midpoint of two
// steps rounds one way in the simulation and the other way in the converted
// model: "fake-quant results differ from the converted model's" is a
// complaint users have.
//
// Kiln's prepared layers instead compute their forward value with the int8
// model's own arithmetic. Their input carries its grid (a float tensor with
// QuantParams: the values are scale * (q - zero_point) exactly, see below),
// so the integers are recovered exactly by quantizing again; the weight is
// quantized with its observer's per-channel params; the converted model's
// kernel (ops::quantized_conv2d, quantized_linear, quantized_add, the
// quantized pools) runs on those integers; and its result is dequantized.
// The converted model runs the same kernel on the same integers, so its
// dequantized output equals the fake-quantized model's bit for bit, on
// every model, which tests/quant checks. Every SIMD path of the kernels
// equals the scalar reference (Note [Int8 GEMM paths]), so this holds on any
// CPU.
//
// The backward is the straight-through estimator of the float op: alongside
// the int8 forward the layer computes the float op on the same fake-quantized
// input and weight, y = conv(x, fq(w)) + b, whose autograd graph gives the
// gradients, masked where y fell outside the output grid's range (as torch's
// fake_quantize backward). y is also what the output observer records. The
// price is one float and one int8 op per forward in training; in eval with
// observers off, only the int8 op would be needed (the float op still runs,
// for simplicity; fake-quantized inference is for checking, the converted
// model is for speed).
//
// Grids travel on the float tensors: the QuantStub's FakeQuantize sets its
// output's QuantParams (per tensor), each prepared layer sets its output's,
// and the tensor layer keeps them through views, relu and max pooling
// (which map a grid onto itself). A prepared layer whose input has no grid
// throws, naming the layer: a QuantStub is missing before it.
//
// Modes, switched for a whole model by quant/quantize.h's
// enable_observer / enable_fake_quant / freeze_bn_stats:
// - observing (after prepare, for calibration): the float forward, and the
//   output observer records it; no rounding at all;
// - fake-quantized (prepare_qat, or enable_fake_quant after calibration):
//   the int8-exact forward above, observers on or off.
#pragma once

#include <memory>
#include <string>

#include "nn/conv.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "quant/qconfig.h"
#include "tensor/conv.h"

namespace kiln::quant {

// The part every prepared layer shares: its place in the model (for
// messages), its output observer, and the two switches.
class FakeQuantModule : public nn::Module {
 public:
  // The dotted path of the layer in the model prepare() was given ("fc1",
  // "layer1.0.conv2"), for errors.
  std::string qualified_name;
  bool observer_enabled = true;
  bool fake_quant_enabled = false;

  // The observer of this layer's output ("activation_post_process"), or null
  // for layers whose output keeps the input's grid (pooling).
  Observer* output_observer() const { return output_observer_.get(); }

 protected:
  FakeQuantModule(std::string qualified_name, const QConfig* qconfig);
  // "layer1.0.conv2 (FakeQuantConv2d)".
  std::string where() const;
  // x's per-tensor grid; throws naming this layer when x has none.
  QParams input_grid(const Tensor& x, const char* which = "input") const;
  // Records y (when observing) and returns the output grid (throws when the
  // observer has seen nothing).
  QParams observe_output(const Tensor& y);

  std::shared_ptr<Observer> output_observer_;
};

// Conv2d, optionally with a BatchNorm2d folded in and a fused ReLU.
class FakeQuantConv2d : public FakeQuantModule {
 public:
  // From a Conv2d or a ConvBnReLU2d (quant/fuse.h): shares its weight, bias
  // and BatchNorm (the very tensors, so an optimizer built on the float
  // model goes on training them).
  FakeQuantConv2d(std::string qualified_name, const nn::Module& source, const QConfig& qconfig);

  Tensor forward(const Tensor& x) override;

  // The weight and bias the int8 layer uses: with the BatchNorm folded from
  // its running statistics (quant/fuse.h fold_batch_norm).
  std::pair<Tensor, Tensor> folded_weight_bias() const;
  // The weight's per-channel qint8 params, observing the folded weight
  // first when `observe` or when the observer has seen nothing.
  QParams weight_grid(const Tensor& folded_weight, bool observe);

  Conv2dParams params;                  // the Conv2d's own
  Tensor weight, bias;                  // the float layer's own
  std::shared_ptr<nn::BatchNorm2d> bn;  // QAT fusion only
  bool relu = false;
  bool bn_frozen = false;               // freeze_bn_stats: running statistics from now on
  std::shared_ptr<Observer> weight_observer;
};

// Linear, optionally with a fused ReLU.
class FakeQuantLinear : public FakeQuantModule {
 public:
  // From a Linear or a LinearReLU.
  FakeQuantLinear(std::string qualified_name, const nn::Module& source, const QConfig& qconfig);
  Tensor forward(const Tensor& x) override;
  QParams weight_grid(bool observe);

  Tensor weight, bias;
  bool relu = false;
  std::shared_ptr<Observer> weight_observer;
};

// nn::Add (a residual add): out = a + b onto the output grid; with relu
// (from a fused AddReLU) relu(a + b), observed after the ReLU.
class FakeQuantAdd : public FakeQuantModule {
 public:
  FakeQuantAdd(std::string qualified_name, const QConfig& qconfig, bool relu = false);
  nn::TensorList forward_many(const nn::TensorList& inputs) override;

  const bool relu;
};

// nn::AvgPool2d and nn::AdaptiveAvgPool2d: the int8 average rounds onto the
// input's grid (quant_math::average_value), which the float average does not.
class FakeQuantAvgPool2d : public FakeQuantModule {
 public:
  // source: an nn::AvgPool2d or nn::AdaptiveAvgPool2d.
  FakeQuantAvgPool2d(std::string qualified_name, std::shared_ptr<nn::Module> source);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Module> pool;
};

// A layer left in float32 inside a quantized region (its qconfig is none):
// it runs on the dequantized input, and its output is rounded onto the grid
// its observer chose, as the converted model's FloatLayer does.
class FakeQuantFloatLayer : public FakeQuantModule {
 public:
  FakeQuantFloatLayer(std::string qualified_name, std::shared_ptr<nn::Module> layer, const QConfig& qconfig);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Module> layer;
};

}  // namespace kiln::quant
