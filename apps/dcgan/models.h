// The two networks of kiln-dcgan, for 32x32 RGB images (CIFAR-10): the
// DCGAN of Radford, Metz & Chintala (2016) at the size PyTorch's DCGAN
// example trains on CIFAR-10, written in the form of LibTorch's C++ example
// (pytorch/examples cpp/dcgan): the generator a module with named layers,
// the discriminator a Sequential. docs/PORTING.md sets the two side by side.
//
//   DCGANGenerator g(ModelSize{});   // z (N, 100, 1, 1) -> images (N, 3, 32, 32) in [-1, 1]
//   std::shared_ptr<nn::Sequential> d = make_discriminator(ModelSize{});  // -> logits (N, 1, 1, 1)
//   kiln::Generator gen(seed);  dcgan_init_(*g, &gen);  dcgan_init_(*d, &gen);
#pragma once

#include <cstdint>
#include <memory>

#include "nn/container.h"
#include "nn/conv_transpose.h"
#include "nn/module_holder.h"
#include "nn/normalization.h"
#include "tensor/random.h"

namespace kiln::apps::dcgan {

// The widths: nz latent channels, ngf and ndf the generator's and the
// discriminator's feature maps at full resolution (the paper's and
// PyTorch's 64; the deeper layers have 2x and 4x as many).
struct ModelSize {
  int64_t nz = 100;
  int64_t ngf = 64;
  int64_t ndf = 64;
};

// z (N, nz, 1, 1) -> (N, 3, 32, 32) in [-1, 1]. Each layer doubles the
// image's side and halves the channels:
//   conv1: (nz)      1x1   -> (4 ngf) 4x4     kernel 4, stride 1, padding 0
//   conv2: (4 ngf)   4x4   -> (2 ngf) 8x8     kernel 4, stride 2, padding 1
//   conv3: (2 ngf)   8x8   -> (ngf)   16x16
//   conv4: (ngf)     16x16 -> (3)     32x32, then tanh
// with batch norm and ReLU after the first three, whose convolutions have
// no bias (the batch norm's shift is one). Parameters "conv1.weight", ...,
// "batch_norm1.weight", ... as LibTorch's example names them.
class DCGANGeneratorImpl : public nn::Module {
 public:
  explicit DCGANGeneratorImpl(const ModelSize& size);
  Tensor forward(const Tensor& z) override;

  const int64_t nz;
  nn::ModuleHolder<nn::ConvTranspose2d> conv1 = nullptr, conv2 = nullptr, conv3 = nullptr, conv4 = nullptr;
  nn::ModuleHolder<nn::BatchNorm2d> batch_norm1 = nullptr, batch_norm2 = nullptr, batch_norm3 = nullptr;
};
KILN_MODULE(DCGANGenerator);

// images (N, 3, 32, 32) -> logits (N, 1, 1, 1): the generator's mirror,
// each Conv2d (kernel 4, stride 2, padding 1) halving the side,
//   (3) 32x32 -> (ndf) 16x16 -> (2 ndf) 8x8 -> (4 ndf) 4x4 -> (1) 1x1
// the last a 4x4 kernel over the whole 4x4 map; LeakyReLU(0.2) after the
// first three and batch norm after the second and third (not on the
// images themselves, as the paper). No sigmoid: the trainer's loss is
// binary_cross_entropy_with_logits, which is exact where a sigmoid in
// float32 rounds to 0 or 1.
std::shared_ptr<nn::Sequential> make_discriminator(const ModelSize& size);

// The DCGAN paper's initialisation, applied to every submodule of `model`:
// convolution weights (plain and transposed) ~ N(0, 0.02), batch-norm
// weights ~ N(1, 0.02), every bias 0. Draws from `gen` (the default
// generator when null), module by module in registration order.
void dcgan_init_(nn::Module& model, kiln::Generator* gen = nullptr);

}  // namespace kiln::apps::dcgan
