#include "quant/stubs.h"

namespace kiln::quant {

QuantWrapper::QuantWrapper(std::shared_ptr<nn::Module> wrapped) {
  KILN_CHECK(wrapped != nullptr, "QuantWrapper: the module to wrap is null");
  register_module("quant", std::make_shared<QuantStub>());
  module = register_module("module", std::move(wrapped));
  register_module("dequant", std::make_shared<DeQuantStub>());
}

Tensor QuantWrapper::forward(const Tensor& x) {
  Tensor h = (*get_submodule("quant"))(x);
  h = (*get_submodule("module"))(h);
  return (*get_submodule("dequant"))(h);
}

}  // namespace kiln::quant
