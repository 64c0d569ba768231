// LeNet-5 for CIFAR-10 (3 x 32 x 32 images, 10 classes): the network of the
// PyTorch CIFAR-10 tutorial, with the same submodule names so that state
// dicts interchange ("conv1.weight", "conv1.bias", ..., "fc3.bias"; 62,006
// parameters). scripts/lenet_torch.py holds the PyTorch definition:
//
//   class LeNet(nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.conv1 = nn.Conv2d(3, 6, 5)
//           self.pool = nn.MaxPool2d(2, 2)
//           self.conv2 = nn.Conv2d(6, 16, 5)
//           self.fc1 = nn.Linear(16 * 5 * 5, 120)
//           self.fc2 = nn.Linear(120, 84)
//           self.fc3 = nn.Linear(84, 10)
//
//       def forward(self, x):
//           x = self.pool(F.relu(self.conv1(x)))   # (N, 6, 14, 14)
//           x = self.pool(F.relu(self.conv2(x)))   # (N, 16, 5, 5)
//           x = torch.flatten(x, 1)                # (N, 400)
//           x = F.relu(self.fc1(x))
//           x = F.relu(self.fc2(x))
//           return self.fc3(x)                     # (N, 10) logits
//
// forward() computes the same function with relu after pooling, which is
// cheaper (see lenet.cpp); the test PoolingBeforeReluIsTheClassicModelExactly
// holds it to the classic order, values and gradients.
#pragma once

#include <memory>

#include "nn/container.h"
#include "nn/conv.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/pooling.h"

namespace kiln::nn {

class LeNet : public Module {
 public:
  LeNet();

  // x: (N, 3, 32, 32) -> logits (N, 10).
  Tensor forward(const Tensor& x) override;

  // The same network as a Sequential of 12 modules, in forward()'s order,
  // for cutting into pipeline stages (distributed/pipeline/pipeline.h):
  //   conv1, pool1, relu1, conv2, pool2, relu2, flatten, fc1, relu3, fc2, relu4, fc3
  // The convolutions, the linear layers and pool1 are this model's own
  // module objects (taken from the registry, so a module put in place by
  // replace_module is the one used); pool2 (a MaxPool2d(2, 2) like `pool`),
  // the activations and the flatten are new ones without state. So
  // its output and gradients equal forward()'s bit for bit, training it
  // trains this model, and its state-dict keys are this model's
  // ("conv1.weight", ..., "fc3.bias"). Unlike forward() it does not check
  // the image size; a wrong one fails in the layer it does not fit.
  std::shared_ptr<Sequential> as_sequential() const;

  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<MaxPool2d> pool;
  std::shared_ptr<Conv2d> conv2;
  std::shared_ptr<Linear> fc1;
  std::shared_ptr<Linear> fc2;
  std::shared_ptr<Linear> fc3;
};

}  // namespace kiln::nn
