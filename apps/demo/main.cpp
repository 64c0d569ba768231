// A short tour of Kiln, run by `make train` until the CIFAR-10 LeNet trainer
// exists: tensors, then autograd, then the training loop a user writes
// (docs/TRAINING.md walks through the same code).
#include <iostream>

#include "kiln.h"

namespace F = kiln::nn::functional;

int main() {
  using namespace kiln;

  // Tensors: factories, views and ops.
  Tensor x = arange(6.0).reshape({2, 3});
  std::cout << "x = arange(6.0).reshape({2, 3}):\n" << x << "\n\n";
  std::cout << "x.t() shares x's storage (strides " << detail::str(x.t().strides()) << "):\n" << x.t() << "\n\n";

  // Autograd: mark leaves, compute, call backward, read .grad().
  Tensor w = from_vector<float>({0.5f, -1.0f, 2.0f}).requires_grad_();
  Tensor y = sum(relu(matmul(x, w)) * 2.0);
  y.backward();
  std::cout << "y = sum(relu(x @ w) * 2) = " << y.item<float>() << ", dy/dw = " << w.grad() << "\n\n";

  // The training loop: LeNet on random CIFAR-shaped batches, SGD with momentum
  // and a cosine schedule, a checkpoint at the end.
  manual_seed(0);
  auto model = std::make_shared<nn::LeNet>();
  std::cout << *model << "\n\n";
  optim::SGD optimizer(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::CosineAnnealingLR scheduler(optimizer, /*T_max=*/20);
  Tensor images = randn({64, 3, 32, 32});
  Tensor labels = randint(0, 10, {64});
  model->train();
  for (int64_t step = 0; step < 20; ++step) {
    optimizer.zero_grad();
    Tensor loss = F::cross_entropy((*model)(images), labels);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 5.0);
    optimizer.step();
    scheduler.step();
    if (step % 5 == 0 || step == 19) {
      std::cout << "step " << step << "  loss " << loss.item<float>() << "  lr " << scheduler.get_last_lr()[0] << "\n";
    }
  }
  model->eval();
  {
    NoGradGuard no_grad;
    Tensor accuracy = mean(eq(argmax((*model)(images), 1), labels).to(DType::Float32));
    std::cout << "accuracy on the batch it trained on: " << accuracy.item<float>() << "\n";
  }
  save_safetensors("lenet-demo.safetensors", model->state_dict());
  std::cout << "weights saved to lenet-demo.safetensors (PyTorch's LeNet loads them)\n";
  return 0;
}
