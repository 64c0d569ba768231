#include "apps/dcgan/models.h"

#include "autograd/ops.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/error.h"

namespace kiln::apps::dcgan {

namespace {

constexpr int64_t kImageChannels = 3;

void check_size(const ModelSize& size) {
  KILN_CHECK(size.nz >= 1 && size.ngf >= 1 && size.ndf >= 1,
             "dcgan: nz, ngf and ndf must be positive, got nz ", size.nz, ", ngf ", size.ngf, ", ndf ", size.ndf);
}

}  // namespace

DCGANGeneratorImpl::DCGANGeneratorImpl(const ModelSize& size) : nz(size.nz) {
  check_size(size);
  const int64_t ngf = size.ngf;
  using nn::ConvTranspose2dOptions;
  conv1 = register_module("conv1", nn::make<nn::ConvTranspose2d>(ConvTranspose2dOptions(nz, 4 * ngf, 4).bias(false)));
  batch_norm1 = register_module("batch_norm1", nn::make<nn::BatchNorm2d>(4 * ngf));
  conv2 = register_module("conv2", nn::make<nn::ConvTranspose2d>(
                                       ConvTranspose2dOptions(4 * ngf, 2 * ngf, 4).stride(2).padding(1).bias(false)));
  batch_norm2 = register_module("batch_norm2", nn::make<nn::BatchNorm2d>(2 * ngf));
  conv3 = register_module(
      "conv3", nn::make<nn::ConvTranspose2d>(ConvTranspose2dOptions(2 * ngf, ngf, 4).stride(2).padding(1).bias(false)));
  batch_norm3 = register_module("batch_norm3", nn::make<nn::BatchNorm2d>(ngf));
  conv4 = register_module(
      "conv4", nn::make<nn::ConvTranspose2d>(ConvTranspose2dOptions(ngf, kImageChannels, 4).stride(2).padding(1)));
}

Tensor DCGANGeneratorImpl::forward(const Tensor& z) {
  KILN_CHECK(z.dim() == 4 && z.size(1) == nz && z.size(2) == 1 && z.size(3) == 1,
             "DCGANGenerator: expected a latent batch (N, ", nz, ", 1, 1), got ", z.shape());
  Tensor x = relu(batch_norm1(conv1(z)));  // (N, 4 ngf, 4, 4)
  x = relu(batch_norm2(conv2(x)));         // (N, 2 ngf, 8, 8)
  x = relu(batch_norm3(conv3(x)));         // (N, ngf, 16, 16)
  return tanh(conv4(x));                   // (N, 3, 32, 32)
}

std::shared_ptr<nn::Sequential> make_discriminator(const ModelSize& size) {
  check_size(size);
  const int64_t ndf = size.ndf;
  using nn::Conv2dOptions;
  return std::make_shared<nn::Sequential>(
      nn::make<nn::Conv2d>(Conv2dOptions(kImageChannels, ndf, 4).stride(2).padding(1)),  // (N, ndf, 16, 16)
      nn::make<nn::LeakyReLU>(0.2),
      nn::make<nn::Conv2d>(Conv2dOptions(ndf, 2 * ndf, 4).stride(2).padding(1).bias(false)),  // (N, 2 ndf, 8, 8)
      nn::make<nn::BatchNorm2d>(2 * ndf),
      nn::make<nn::LeakyReLU>(0.2),
      nn::make<nn::Conv2d>(Conv2dOptions(2 * ndf, 4 * ndf, 4).stride(2).padding(1).bias(false)),  // (N, 4 ndf, 4, 4)
      nn::make<nn::BatchNorm2d>(4 * ndf),
      nn::make<nn::LeakyReLU>(0.2),
      nn::make<nn::Conv2d>(Conv2dOptions(4 * ndf, 1, 4)));  // (N, 1, 1, 1) logits
}

void dcgan_init_(nn::Module& model, kiln::Generator* gen) {
  model.apply([gen](nn::Module& m) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) {
      nn::init::normal_(conv->weight, 0.0, 0.02, gen);
      if (conv->bias.defined()) nn::init::zeros_(conv->bias);
    } else if (auto* up = dynamic_cast<nn::ConvTranspose2d*>(&m)) {
      nn::init::normal_(up->weight, 0.0, 0.02, gen);
      if (up->bias.defined()) nn::init::zeros_(up->bias);
    } else if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m)) {
      nn::init::normal_(bn->weight, 1.0, 0.02, gen);
      nn::init::zeros_(bn->bias);
    }
  });
}

}  // namespace kiln::apps::dcgan
