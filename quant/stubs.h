// Where a model's quantized region begins and ends, as
// torch.ao.quantization's QuantStub, DeQuantStub and QuantWrapper.
//
// In the float model both stubs are the identity. prepare() puts an
// observer in a QuantStub's place, which records the range of the float
// input and, once fake quantization is on, rounds it onto the chosen grid;
// convert() turns it into Quantize (float32 -> quint8). A DeQuantStub becomes
// DeQuantize (quint8 -> float32). Everything between them runs quantized.
//
//   auto model = std::make_shared<quant::QuantWrapper>(std::make_shared<nn::LeNet>());
//   // children "quant", "module", "dequant": the whole LeNet is the quantized region
#pragma once

#include <memory>

#include "nn/module.h"

namespace kiln::quant {

class QuantStub : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

class DeQuantStub : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

// quant -> module -> dequant. The wrapped model's state-dict keys gain the
// prefix "module.".
class QuantWrapper : public nn::Module {
 public:
  explicit QuantWrapper(std::shared_ptr<nn::Module> module);
  // Calls the children through the registry, so that prepare and convert's
  // swaps take effect.
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Module> module;
};

}  // namespace kiln::quant
