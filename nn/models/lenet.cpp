#include "nn/models/lenet.h"

#include "nn/activation.h"
#include "nn/flatten.h"
#include "nn/functional.h"

namespace kiln::nn {

LeNet::LeNet() {
  // Registered in the order of the PyTorch module, so that parameters(),
  // state_dict() and printing list them in the same order.
  conv1 = register_module("conv1", std::make_shared<Conv2d>(3, 6, 5));
  pool = register_module("pool", std::make_shared<MaxPool2d>(2, 2));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(6, 16, 5));
  fc1 = register_module("fc1", std::make_shared<Linear>(16 * 5 * 5, 120));
  fc2 = register_module("fc2", std::make_shared<Linear>(120, 84));
  fc3 = register_module("fc3", std::make_shared<Linear>(84, 10));
}

Tensor LeNet::forward(const Tensor& x) {
  namespace F = functional;
  KILN_CHECK(x.dim() == 4 && x.size(1) == 3 && x.size(2) == 32 && x.size(3) == 32,
             "LeNet: expected images of shape (N, 3, 32, 32), got ", x.shape());
  // The classic model is pool(relu(conv(x))); relu(pool(conv(x))) is the
  // same function with the same gradients, because relu is monotonic and so
  // commutes with taking a maximum: a window's largest value stays largest
  // after relu, and a window with no positive value ends at 0 either way
  // (with a zero gradient). Pooling first makes relu and its backward run
  // on a quarter of the elements.
  //
  // The layers are called through the registry (get_submodule), not the
  // members: a module put in place by replace_module is then the one that
  // runs, as when quantization's prepare and convert swap Conv2d for its
  // observed and int8 forms (quant/quantize.h). The members stay the typed
  // handles for building and reading the float model.
  auto layer = [this](const char* name) -> Module& { return *get_submodule(name); };
  Tensor h = F::relu(layer("pool")(layer("conv1")(x)));  // (N, 6, 14, 14)
  h = F::relu(layer("pool")(layer("conv2")(h)));         // (N, 16, 5, 5)
  h = F::flatten(h, 1);                                  // (N, 400)
  h = F::relu(layer("fc1")(h));                          // (N, 120)
  h = F::relu(layer("fc2")(h));                          // (N, 84)
  return layer("fc3")(h);                                // (N, 10)
}

std::shared_ptr<Sequential> LeNet::as_sequential() const {
  // forward()'s order: pooling before relu (see there), F::flatten(h, 1)
  // as Flatten's default (start_dim 1, end_dim -1). pool2 is a second
  // MaxPool2d(2, 2) rather than `pool` again: a Sequential holding one
  // module twice lists it once among its named_children(), which
  // split_sequential cuts by.
  return std::make_shared<Sequential>(std::vector<NamedModule>{
      {"conv1", get_submodule("conv1")},
      {"pool1", get_submodule("pool")},
      {"relu1", std::make_shared<ReLU>()},
      {"conv2", get_submodule("conv2")},
      {"pool2", std::make_shared<MaxPool2d>(2, 2)},
      {"relu2", std::make_shared<ReLU>()},
      {"flatten", std::make_shared<Flatten>()},
      {"fc1", get_submodule("fc1")},
      {"relu3", std::make_shared<ReLU>()},
      {"fc2", get_submodule("fc2")},
      {"relu4", std::make_shared<ReLU>()},
      {"fc3", get_submodule("fc3")},
  });
}

}  // namespace kiln::nn
