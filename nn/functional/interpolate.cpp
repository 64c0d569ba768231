// F::interpolate: per resized dim, source indices and weights computed on
// the host exactly as torch's CPU kernels compute them (UpSample.h,
// cpu/UpSampleKernel.cpp), then index_select gathers and, for the linear
// modes, a weighted sum of the two neighbours (Note [Padding and
// interpolation as gathers] in nn/functional_composite.h). The argument
// checks are torch.nn.functional.interpolate's, then the kernels' own.
#include <algorithm>
#include <cmath>
#include <string>

#include "nn/functional_composite.h"

namespace kiln::nn::functional {

namespace {

const char* mode_name(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::Nearest:
      return "nearest";
    case InterpolateMode::NearestExact:
      return "nearest-exact";
    case InterpolateMode::Linear:
      return "linear";
    case InterpolateMode::Bilinear:
      return "bilinear";
  }
  return "?";
}

bool is_linear(InterpolateMode mode) { return mode == InterpolateMode::Linear || mode == InterpolateMode::Bilinear; }

// Where the outputs of one resized dim read: output o is
// x[i0[o]] * (1 - w1[o]) + x[i1[o]] * w1[o]; the nearest modes fill only i0.
struct SourcePositions {
  std::vector<int64_t> i0, i1;
  std::vector<double> w1;
};

// torch's compute_scales_value and area_pixel_compute_scale, in T, the
// precision torch's kernel computes the positions in.
template <class T>
T scale_of(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  if (scale_factor && *scale_factor > 0) return static_cast<T>(1.0 / *scale_factor);
  return static_cast<T>(in) / static_cast<T>(out);
}

// torch's area_pixel_compute_source_index for the non-cubic modes: the
// half-pixel formula clamps negative positions to 0.
template <class T>
T source_position(T scale, int64_t o, bool align_corners) {
  if (align_corners) return scale * static_cast<T>(o);
  const T position = scale * (static_cast<T>(o) + static_cast<T>(0.5)) - static_cast<T>(0.5);
  return position < T(0) ? T(0) : position;
}

template <class T>
SourcePositions source_positions(InterpolateMode mode, int64_t in, int64_t out, bool align_corners,
                                 std::optional<double> scale_factor) {
  SourcePositions p;
  p.i0.resize(static_cast<size_t>(out));
  const T scale = scale_of<T>(in, out, align_corners, scale_factor);
  for (int64_t o = 0; o < out; ++o) {
    const size_t k = static_cast<size_t>(o);
    // torch rounds with floorf, which takes a float even when T is double.
    if (mode == InterpolateMode::Nearest) {
      const T position = source_position<T>(scale, o, /*align_corners=*/true);
      p.i0[k] = std::min(static_cast<int64_t>(std::floor(static_cast<float>(position))), in - 1);
    } else if (mode == InterpolateMode::NearestExact) {
      const T position = source_position<T>(scale, o, /*align_corners=*/false);
      p.i0[k] =
          std::min(static_cast<int64_t>(std::floor(static_cast<float>(static_cast<double>(position) + 0.5))), in - 1);
    }
  }
  if (!is_linear(mode)) return p;
  p.i1.resize(static_cast<size_t>(out));
  p.w1.resize(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const size_t k = static_cast<size_t>(o);
    const T position = source_position<T>(scale, o, align_corners);
    // The min guards positions too large for the float to hold exactly.
    const int64_t i0 = std::min(static_cast<int64_t>(position), in - 1);
    p.i0[k] = i0;
    p.i1[k] = i0 < in - 1 ? i0 + 1 : i0;
    p.w1[k] = static_cast<double>(std::clamp(position - static_cast<T>(i0), T(0), T(1)));
  }
  return p;
}

// "(H: 4, W: 5)": the spatial sizes as torch's messages name them.
std::string spatial_sizes(const std::vector<int64_t>& sizes) {
  static const char* names[] = {"D", "H", "W"};
  std::string out = "(";
  const size_t first = 3 - sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out += ", ";
    out += names[first + i];
    out += ": ";
    out += std::to_string(sizes[i]);
  }
  return out + ")";
}

// Weights for dim d of a result with `trailing` dims after d: shape
// (m, 1, ..., 1), which broadcasts along d.
Tensor along(const std::vector<double>& values, int64_t trailing, Device device) {
  Shape shape(static_cast<size_t>(trailing) + 1, 1);
  shape[0] = static_cast<int64_t>(values.size());
  return from_vector<double>(values, shape, device);
}

// x resized along dim d to p.i0.size() positions.
Tensor resize_dim(const Tensor& x, int64_t d, const SourcePositions& p, bool linear) {
  const int64_t out = static_cast<int64_t>(p.i0.size());
  Tensor lower = index_select(x, d, from_vector<int64_t>(p.i0, {out}, x.device()));
  if (!linear) return lower;
  Tensor upper = index_select(x, d, from_vector<int64_t>(p.i1, {out}, x.device()));
  // The weights in x's dtype, as torch's kernels store them; the lower one
  // is 1 minus the upper one after rounding.
  const int64_t trailing = x.dim() - 1 - d;
  Tensor w1 = along(p.w1, trailing, x.device()).to(x.dtype());
  Tensor w0 = 1.0 - w1;
  return add(mul(lower, w0), mul(upper, w1));
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& options) {
  const InterpolateMode mode = options.mode;
  const char* name = mode_name(mode);
  KILN_CHECK(x.defined(), "interpolate: input is undefined");
  KILN_CHECK(is_linear(mode) || !options.align_corners.has_value(), "interpolate: align_corners can only be set ",
             "with the linear modes (linear, bilinear), not ", name);
  KILN_CHECK(x.dim() >= 3 && x.dim() <= 5, "interpolate: expected a 3-d, 4-d or 5-d input (N, C, d1, ...), got ",
             x.dim(), "-d input of shape ", x.shape(), " for mode ", name);
  KILN_CHECK(mode != InterpolateMode::Linear || x.dim() == 3, "interpolate: linear mode needs a 3-d input (N, C, W), ",
             "got ", x.dim(), "-d input of shape ", x.shape());
  KILN_CHECK(mode != InterpolateMode::Bilinear || x.dim() == 4, "interpolate: bilinear mode needs a 4-d input ",
             "(N, C, H, W), got ", x.dim(), "-d input of shape ", x.shape());
  const bool has_size = !options.size.empty(), has_scale = !options.scale_factor.empty();
  KILN_CHECK(!(has_size && has_scale), "interpolate: only one of size and scale_factor may be given, got size ",
             options.size, " and scale_factor ", options.scale_factor);
  KILN_CHECK(has_size || has_scale, "interpolate: either size or scale_factor must be given");
  const size_t dims = static_cast<size_t>(x.dim() - 2);
  const Shape spatial(x.shape().begin() + 2, x.shape().end());
  const size_t given = has_size ? options.size.size() : options.scale_factor.size();
  KILN_CHECK(given == 1 || given == dims, "interpolate: input of shape ", x.shape(), " has ", dims, " spatial dims ",
             spatial, ", but ", has_size ? "size " : "scale_factor ",
             has_size ? ::kiln::detail::str(options.size) : ::kiln::detail::str(options.scale_factor), " has ", given,
             " entries; give one per spatial dim, or one for all");
  const bool recompute = options.recompute_scale_factor.value_or(false);
  KILN_CHECK(!(recompute && has_size), "interpolate: recompute_scale_factor is not meaningful with an explicit size");

  // The output size, and the scale factor the kernel is given (torch passes
  // none with an explicit or recomputed size).
  Shape out_sizes(dims);
  std::vector<std::optional<double>> scales(dims);
  for (size_t i = 0; i < dims; ++i) {
    if (has_size) {
      out_sizes[i] = options.size[given == 1 ? 0 : i];
      continue;
    }
    const double factor = options.scale_factor[given == 1 ? 0 : i];
    KILN_CHECK(std::isfinite(factor) && factor > 0, "interpolate: scale_factor must be positive and finite, got ",
               options.scale_factor);
    out_sizes[i] = static_cast<int64_t>(std::floor(static_cast<double>(spatial[i]) * factor));
    if (!recompute) scales[i] = factor;
  }
  bool positive = true;
  for (size_t i = 0; i < dims; ++i) positive = positive && spatial[i] > 0 && out_sizes[i] > 0;
  KILN_CHECK(positive, "interpolate: input and output sizes must be positive, got input ", spatial_sizes(spatial),
             " and output ", spatial_sizes(out_sizes), " for input of shape ", x.shape());
  KILN_CHECK(x.size(1) > 0, "interpolate: expected input (N, C, d1, ...) with C > 0 (N may be 0), got shape ",
             x.shape());
  KILN_CHECK(!is_linear(mode) || x.is_floating_point(), "interpolate: ", name, " mode needs a floating input, got ",
             x.dtype());

  const bool align_corners = options.align_corners.value_or(false);
  const bool linear = is_linear(mode);
  // Last dim first: the order in which torch's kernel nests its weighted
  // sums (Note [Padding and interpolation as gathers]).
  Tensor out = x;
  for (size_t k = dims; k-- > 0;) {
    // torch copies a linear dim whose size does not change.
    if (linear && out_sizes[k] == spatial[k]) continue;
    const SourcePositions p = x.dtype() == DType::Float64
                                  ? source_positions<double>(mode, spatial[k], out_sizes[k], align_corners, scales[k])
                                  : source_positions<float>(mode, spatial[k], out_sizes[k], align_corners, scales[k]);
    bool identity = !linear && out_sizes[k] == spatial[k];
    for (int64_t o = 0; identity && o < out_sizes[k]; ++o) identity = p.i0[static_cast<size_t>(o)] == o;
    if (identity) continue;
    out = resize_dim(out, static_cast<int64_t>(k) + 2, p, linear);
  }
  // The result is never x itself, as in torch.
  if (out.is_same(x)) out = x.clone();
  return out;
}

}  // namespace kiln::nn::functional
