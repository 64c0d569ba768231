// PixelShuffle and PixelUnshuffle, as torch.nn's: sub-pixel convolution's
// rearrangement of channels into space and back, compositions of reshape
// and permute (Note [Composite layers] in nn/functional_composite.h).
//
//   auto up = std::make_shared<nn::PixelShuffle>(2);
//   Tensor y = (*up)(x);   // x: (N, 4*C, H, W) -> (N, C, 2H, 2W)
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace kiln::nn {

// (*, C*r*r, H, W) -> (*, C, H*r, W*r); no parameters.
class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor);
  Tensor forward(const Tensor& input) override;
  // "upscale_factor=2"
  std::string extra_repr() const override;

  const int64_t upscale_factor;
};

// (*, C, H*r, W*r) -> (*, C*r*r, H, W), the inverse; no parameters.
class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor);
  Tensor forward(const Tensor& input) override;
  // "downscale_factor=2"
  std::string extra_repr() const override;

  const int64_t downscale_factor;
};

}  // namespace kiln::nn
