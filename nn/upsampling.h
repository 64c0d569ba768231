// Upsample, UpsamplingNearest2d and UpsamplingBilinear2d, as torch.nn's:
// F::interpolate with fixed options (Note [Composite layers] in
// nn/functional_composite.h). Upsample takes F::interpolate's own struct or
// LibTorch's builder, so a module and the function it calls are configured
// the same way.
//
//   auto up = std::make_shared<nn::Upsample>(
//       F::InterpolateOptions{.scale_factor = {2}, .mode = F::InterpolateMode::Bilinear});
//   Tensor y = (*up)(x);   // x: (N, C, H, W) -> (N, C, 2H, 2W)
//   nn::Upsample same(nn::UpsampleOptions().scale_factor({2}).mode(F::InterpolateMode::Bilinear));   // as LibTorch
//   nn::UpsamplingBilinear2d resize({.size = {32, 48}});   // align_corners=True, as torch
#pragma once

#include <string>
#include <vector>

#include "nn/functional_composite.h"
#include "nn/functional_options.h"
#include "nn/module.h"

namespace kiln::nn {

// LibTorch's builder of torch.nn.Upsample's arguments: F::interpolate's,
// which converts to the struct the layer keeps.
using UpsampleOptions = functional::InterpolateFuncOptions;

// No parameters; the input is as F::interpolate requires for the mode.
class Upsample : public Module {
 public:
  // Checks what can be checked without an input: exactly one of size and
  // scale_factor, positive sizes, align_corners only with an interpolating
  // mode (linear, bilinear, bicubic, trilinear).
  explicit Upsample(functional::InterpolateOptions options);
  Tensor forward(const Tensor& input) override;
  // As torch: "scale_factor=2.0, mode='nearest'", "size=(32, 48), mode='bilinear'";
  // one entry prints as torch's single int or float.
  std::string extra_repr() const override;

  const functional::InterpolateOptions options;

 protected:
  Upsample(const char* name, functional::InterpolateOptions options);
};

// The output size of UpsamplingNearest2d and UpsamplingBilinear2d: one of
// the two, as in Upsample.
struct UpsamplingSize {
  std::vector<int64_t> size{};
  std::vector<double> scale_factor{};
};

// Upsample with mode nearest.
class UpsamplingNearest2d : public Upsample {
 public:
  explicit UpsamplingNearest2d(UpsamplingSize size);
};

// Upsample with mode bilinear and align_corners=true (torch's choice for
// this layer, unlike Upsample's default).
class UpsamplingBilinear2d : public Upsample {
 public:
  explicit UpsamplingBilinear2d(UpsamplingSize size);
};

}  // namespace kiln::nn
