// The quantization workflows, as torch.ao.quantization's eager mode:
// post-training static (prepare, calibrate, convert), quantization-aware
// training (prepare_qat, train, convert) and dynamic (quantize_dynamic).
//
//   // static
//   auto model = std::make_shared<quant::QuantWrapper>(trained_lenet);
//   model->eval();
//   quant::prepare(*model);                              // observers in place
//   for (auto& batch : calibration_batches) (*model)(batch);
//   quant::convert(*model);                              // int8 layers in place
//   Tensor logits = (*model)(images);                    // float in, float out
//
//   // QAT
//   model->train();
//   quant::prepare_qat(*model);                          // fake-quantized, observing
//   ... train; after some epochs: quant::disable_observer(*model); quant::freeze_bn_stats(*model);
//   model->eval();
//   quant::convert(*model);
//
//   // dynamic (Linear, optionally Conv2d): no calibration, float in and out
//   quant::quantize_dynamic(*gpt);
//
// All of them change the model in place, swapping submodules through
// Module::replace_module; a model's forward must therefore call its layers
// through the registry (get_submodule), as nn::LeNet, nn::ResNet and nn::GPT
// do, and write its activations as modules where a layer is needed (nn::ReLU
// can stay a function: ReLU and max pooling keep the int8 grid; a residual
// add must be an nn::Add, average pooling an nn::AvgPool2d or
// nn::AdaptiveAvgPool2d).
//
// The modules swapped in, by float module:
//   QuantStub                 -> FakeQuantize (observer)            -> Quantize
//   DeQuantStub               -> (kept)                             -> DeQuantize
//   Conv2d, ConvBnReLU2d      -> FakeQuantConv2d                    -> QuantizedConv2d
//   Linear, LinearReLU        -> FakeQuantLinear                    -> QuantizedLinear
//   nn::Add                   -> FakeQuantAdd                       -> QuantizedAdd
//   AvgPool2d, AdaptiveAvg..  -> FakeQuantAvgPool2d                 -> (the pool; it takes int8)
//   ReLU, MaxPool2d, Flatten, Identity, Dropout: kept (they keep the grid)
//   a layer whose qconfig is none -> FakeQuantFloatLayer            -> FloatLayer
// Anything else inside a quantized region (a BatchNorm2d not fused into its
// conv, a LayerNorm, a GELU) is an error naming it by its dotted path.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "quant/qconfig.h"

namespace kiln::quant {

// Post-training static quantization, step 1: observers on every layer the
// mapping quantizes, fake quantization off (the model computes exactly what
// it did, while the observers record ranges). Throws for unsupported layers
// and for names in the mapping that match no module.
void prepare(nn::Module& model, const QConfigMapping& mapping = QConfigMapping());
// Quantization-aware training: as prepare, with the QAT defaults and fake
// quantization on from the start.
void prepare_qat(nn::Module& model, const QConfigMapping& mapping = QConfigMapping(default_qat_qconfig()));
// The int8 model: every prepared layer becomes its quantized form. Throws
// naming the first layer whose observer saw no data.
void convert(nn::Module& model);

// After convert: each pair {conv, add} names a QuantizedConv2d whose output
// the forward feeds (through pass-through layers at most) to a
// QuantizedAdd; the add then runs the conv with the sum in its output
// stage, so the conv's output is never written and read back (Note [A conv
// run by the add it feeds] in quant/quantized_modules.h). The outputs stay
// the same to the bit, the state dict the same keys.
//   quant::fuse_conv_add(*model, resnet->residual_convs("module."));
// Throws naming the pair for a path that is not such a conv or add, or one
// already fused.
void fuse_conv_add(nn::Module& model, const std::vector<std::pair<std::string, std::string>>& pairs);

struct DynamicOptions {
  bool linear = true;         // Linear and LinearReLU
  bool conv = false;          // Conv2d and ConvBnReLU2d without BatchNorm
  bool reduce_range = false;  // 7-bit activations, as the observers' option
  QConfigMapping mapping = QConfigMapping(default_dynamic_qconfig());  // nullopt leaves a layer float
};
// Weights to qint8 now (per channel), activations quantized per call.
void quantize_dynamic(nn::Module& model, const DynamicOptions& options = {});

// Switches for a prepared model (each prepared layer and FakeQuantize).
void enable_observer(nn::Module& model, bool on = true);
inline void disable_observer(nn::Module& model) { enable_observer(model, false); }
void enable_fake_quant(nn::Module& model, bool on = true);
inline void disable_fake_quant(nn::Module& model) { enable_fake_quant(model, false); }
// QAT's fused Conv+BatchNorm layers use the running statistics from now on
// (and stop updating them), so their forward is the int8-exact one.
void freeze_bn_stats(nn::Module& model);

// The bytes of a model's state dict: parameters and persistent buffers.
int64_t model_size_bytes(const nn::Module& model);

// The quantizable layers of a float model, by dotted name, in order (what a
// sensitivity table lists).
std::vector<std::string> quantizable_layers(nn::Module& model);

// The per-layer sensitivity table: for each quantizable layer, the metric
// (accuracy) of the model in which only that layer is quantized (the others
// stay float32; that layer's input and output are fake-quantized through
// its own QuantStub and DeQuantStub), after calibrating it.
//   make_model: a fresh trained float model (each row quantizes its own copy)
//   calibrate:  runs calibration batches through a prepared model
//   evaluate:   the metric of a model, e.g. test accuracy
struct SensitivityRow {
  std::string layer;
  double metric;
};
std::vector<SensitivityRow> sensitivity(const std::function<std::shared_ptr<nn::Module>()>& make_model,
                                        const std::function<void(nn::Module&)>& calibrate,
                                        const std::function<double(nn::Module&)>& evaluate,
                                        const QConfig& qconfig = default_qconfig());

}  // namespace kiln::quant
