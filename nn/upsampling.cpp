#include "nn/upsampling.h"

#include <string>

#include "nn/repr.h"

namespace kiln::nn {

namespace {

functional::InterpolateOptions checked(const char* name, functional::InterpolateOptions options) {
  const bool has_size = !options.size.empty(), has_scale = !options.scale_factor.empty();
  KILN_CHECK(has_size != has_scale, name, ": give exactly one of size and scale_factor, got size ", options.size,
             " and scale_factor ", options.scale_factor);
  for (int64_t s : options.size) KILN_CHECK(s > 0, name, ": size must be positive, got ", options.size);
  KILN_CHECK(functional::interpolate_mode_takes_align_corners(options.mode) || !options.align_corners.has_value(), name,
             ": align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, ",
             "trilinear), not ", functional::interpolate_mode_name(options.mode));
  return options;
}

functional::InterpolateOptions with_mode(const UpsamplingSize& size, functional::InterpolateMode mode,
                                         std::optional<bool> align) {
  return {.size = size.size, .scale_factor = size.scale_factor, .mode = mode, .align_corners = align};
}

}  // namespace

Upsample::Upsample(functional::InterpolateOptions options) : Upsample("Upsample", std::move(options)) {}

Upsample::Upsample(const char* name, functional::InterpolateOptions options)
    : Module(name), options(checked(name, std::move(options))) {}

Tensor Upsample::forward(const Tensor& input) { return functional::interpolate(input, options); }

std::string Upsample::extra_repr() const {
  std::string info;
  if (!options.scale_factor.empty()) {
    info = "scale_factor=";
    if (options.scale_factor.size() == 1) {
      info += repr::floating(options.scale_factor[0]);
    } else {
      info += "(";
      for (size_t i = 0; i < options.scale_factor.size(); ++i)
        info += (i ? ", " : "") + repr::floating(options.scale_factor[i]);
      info += ")";
    }
  } else {
    info = "size=" + (options.size.size() == 1 ? std::to_string(options.size[0]) : repr::tuple(options.size));
  }
  return info + ", mode='" + functional::interpolate_mode_name(options.mode) + "'";
}

UpsamplingNearest2d::UpsamplingNearest2d(UpsamplingSize size)
    : Upsample("UpsamplingNearest2d", with_mode(size, functional::InterpolateMode::Nearest, std::nullopt)) {}

UpsamplingBilinear2d::UpsamplingBilinear2d(UpsamplingSize size)
    : Upsample("UpsamplingBilinear2d", with_mode(size, functional::InterpolateMode::Bilinear, true)) {}

}  // namespace kiln::nn
