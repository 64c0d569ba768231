#include "nn/pixel_shuffle.h"

#include <string>

#include "nn/functional_composite.h"

namespace kiln::nn {

PixelShuffle::PixelShuffle(int64_t upscale_factor) : upscale_factor(upscale_factor) {
  KILN_CHECK(upscale_factor > 0, "PixelShuffle: upscale_factor must be positive, got ", upscale_factor);
}

Tensor PixelShuffle::forward(const Tensor& input) {
  const int64_t r2 = upscale_factor * upscale_factor;
  KILN_CHECK(input.dim() >= 3 && input.size(-3) % r2 == 0, "PixelShuffle: expected input of shape (*, C*", r2,
             ", H, W) for upscale_factor ", upscale_factor, ", got shape ", input.shape());
  return functional::pixel_shuffle(input, upscale_factor);
}

std::string PixelShuffle::extra_repr() const { return "upscale_factor=" + std::to_string(upscale_factor); }

PixelUnshuffle::PixelUnshuffle(int64_t downscale_factor) : downscale_factor(downscale_factor) {
  KILN_CHECK(downscale_factor > 0, "PixelUnshuffle: downscale_factor must be positive, got ", downscale_factor);
}

Tensor PixelUnshuffle::forward(const Tensor& input) {
  const int64_t r = downscale_factor;
  KILN_CHECK(input.dim() >= 3 && input.size(-2) % r == 0 && input.size(-1) % r == 0,
             "PixelUnshuffle: expected input of shape (*, C, H*", r, ", W*", r, ") for downscale_factor ", r,
             ", got shape ", input.shape());
  return functional::pixel_unshuffle(input, downscale_factor);
}

std::string PixelUnshuffle::extra_repr() const { return "downscale_factor=" + std::to_string(downscale_factor); }

}  // namespace kiln::nn
