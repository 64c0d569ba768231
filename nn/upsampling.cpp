#include "nn/upsampling.h"

#include <string>

#include "nn/repr.h"

namespace kiln::nn {

namespace {

// torch's error messages name the mode as F.interpolate's string.
const char* mode_string(functional::InterpolateMode mode) {
  switch (mode) {
    case functional::InterpolateMode::Nearest:
      return "nearest";
    case functional::InterpolateMode::NearestExact:
      return "nearest-exact";
    case functional::InterpolateMode::Linear:
      return "linear";
    case functional::InterpolateMode::Bilinear:
      return "bilinear";
  }
  return "?";
}

UpsampleOptions checked(const char* name, UpsampleOptions options) {
  const bool has_size = !options.size.empty(), has_scale = !options.scale_factor.empty();
  KILN_CHECK(has_size != has_scale, name, ": give exactly one of size and scale_factor, got size ", options.size,
             " and scale_factor ", options.scale_factor);
  for (int64_t s : options.size) KILN_CHECK(s > 0, name, ": size must be positive, got ", options.size);
  const bool linear =
      options.mode == functional::InterpolateMode::Linear || options.mode == functional::InterpolateMode::Bilinear;
  KILN_CHECK(linear || !options.align_corners.has_value(), name,
             ": align_corners can only be set with the linear modes (linear, bilinear), not ",
             mode_string(options.mode));
  return options;
}

UpsampleOptions with_mode(const UpsamplingSize& size, functional::InterpolateMode mode, std::optional<bool> align) {
  return {.size = size.size, .scale_factor = size.scale_factor, .mode = mode, .align_corners = align};
}

}  // namespace

Upsample::Upsample(UpsampleOptions options) : Upsample("Upsample", std::move(options)) {}

Upsample::Upsample(const char* name, UpsampleOptions options)
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
  return info + ", mode='" + mode_string(options.mode) + "'";
}

UpsamplingNearest2d::UpsamplingNearest2d(UpsamplingSize size)
    : Upsample("UpsamplingNearest2d", with_mode(size, functional::InterpolateMode::Nearest, std::nullopt)) {}

UpsamplingBilinear2d::UpsamplingBilinear2d(UpsamplingSize size)
    : Upsample("UpsamplingBilinear2d", with_mode(size, functional::InterpolateMode::Bilinear, true)) {}

}  // namespace kiln::nn
