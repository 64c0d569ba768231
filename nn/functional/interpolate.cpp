// F::interpolate: per resized dim, source indices and weights computed on
// the host exactly as torch's CPU kernels compute them (UpSample.h,
// cpu/UpSampleKernel.cpp), then index_select gathers and, for the linear and
// cubic modes, a weighted sum of the neighbours; area mode is adaptive
// average pooling, as in torch (Note [Padding and interpolation as gathers]
// in nn/functional_composite.h). The argument checks are
// torch.nn.functional.interpolate's, then the kernels' own.
#include <algorithm>
#include <cmath>
#include <string>

#include "nn/functional.h"
#include "nn/functional_composite.h"

namespace kiln::nn::functional {

const char* interpolate_mode_name(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::Nearest:
      return "nearest";
    case InterpolateMode::NearestExact:
      return "nearest-exact";
    case InterpolateMode::Linear:
      return "linear";
    case InterpolateMode::Bilinear:
      return "bilinear";
    case InterpolateMode::Bicubic:
      return "bicubic";
    case InterpolateMode::Trilinear:
      return "trilinear";
    case InterpolateMode::Area:
      return "area";
  }
  return "?";
}

bool interpolate_mode_takes_align_corners(InterpolateMode mode) {
  return mode == InterpolateMode::Linear || mode == InterpolateMode::Bilinear || mode == InterpolateMode::Bicubic ||
         mode == InterpolateMode::Trilinear;
}

namespace {

bool is_linear(InterpolateMode mode) {
  return mode == InterpolateMode::Linear || mode == InterpolateMode::Bilinear || mode == InterpolateMode::Trilinear;
}

// Where the outputs of one resized dim read: output o is
//   sum over taps k of x[index[k][o]] * weight[k][o],
// one tap without weights for the nearest modes (a plain gather), two for
// the linear modes and four for bicubic.
struct SourceTaps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
};

// torch's compute_scales_value and area_pixel_compute_scale, in T, the
// precision torch's kernel computes the positions in.
template <class T>
T scale_of(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  if (scale_factor && *scale_factor > 0) return static_cast<T>(1.0 / *scale_factor);
  return static_cast<T>(in) / static_cast<T>(out);
}

// torch's area_pixel_compute_source_index: the half-pixel formula clamps
// negative positions to 0, except for cubic, whose taps are clamped instead.
template <class T>
T source_position(T scale, int64_t o, bool align_corners, bool cubic = false) {
  if (align_corners) return scale * static_cast<T>(o);
  const T position = scale * (static_cast<T>(o) + static_cast<T>(0.5)) - static_cast<T>(0.5);
  return !cubic && position < T(0) ? T(0) : position;
}

template <class T>
SourceTaps nearest_taps(InterpolateMode mode, int64_t in, int64_t out, std::optional<double> scale_factor) {
  const T scale = scale_of<T>(in, out, /*align_corners=*/false, scale_factor);
  std::vector<int64_t> index(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    // torch rounds with floorf, which takes a float even when T is double.
    const T position = mode == InterpolateMode::Nearest
                           ? source_position<T>(scale, o, /*align_corners=*/true)
                           : static_cast<T>(static_cast<double>(source_position<T>(scale, o, false)) + 0.5);
    index[static_cast<size_t>(o)] = std::min(static_cast<int64_t>(std::floor(static_cast<float>(position))), in - 1);
  }
  return {{std::move(index)}, {}};
}

template <class T>
SourceTaps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  const T scale = scale_of<T>(in, out, align_corners, scale_factor);
  SourceTaps t{std::vector<std::vector<int64_t>>(2, std::vector<int64_t>(static_cast<size_t>(out))),
               std::vector<std::vector<double>>(2, std::vector<double>(static_cast<size_t>(out)))};
  for (int64_t o = 0; o < out; ++o) {
    const size_t k = static_cast<size_t>(o);
    const T position = source_position<T>(scale, o, align_corners);
    // The min guards positions too large for the float to hold exactly.
    const int64_t i0 = std::min(static_cast<int64_t>(position), in - 1);
    const T w1 = std::clamp(position - static_cast<T>(i0), T(0), T(1));
    t.index[0][k] = i0;
    t.index[1][k] = i0 < in - 1 ? i0 + 1 : i0;
    t.weight[0][k] = static_cast<double>(T(1) - w1);
    t.weight[1][k] = static_cast<double>(w1);
  }
  return t;
}

// torch's cubic_convolution1 (|x| <= 1) and cubic_convolution2 (1 < |x| < 2)
// with A = -0.75, the Keys kernel torch and OpenCV use.
template <class T>
T cubic_inner(T x) {
  const T a = T(-0.75);
  return ((a + T(2)) * x - (a + T(3))) * x * x + T(1);
}
template <class T>
T cubic_outer(T x) {
  const T a = T(-0.75);
  return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a;
}

// torch's compute_indices_weights_cubic: taps at floor(position) - 1 ... + 2,
// each clamped into the input (the border repeats), with the weights of
// get_cubic_upsample_coefficients for the fraction t.
template <class T>
SourceTaps cubic_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  const T scale = scale_of<T>(in, out, align_corners, scale_factor);
  SourceTaps taps{std::vector<std::vector<int64_t>>(4, std::vector<int64_t>(static_cast<size_t>(out))),
                  std::vector<std::vector<double>>(4, std::vector<double>(static_cast<size_t>(out)))};
  for (int64_t o = 0; o < out; ++o) {
    const size_t k = static_cast<size_t>(o);
    const T position = source_position<T>(scale, o, align_corners, /*cubic=*/true);
    const int64_t floor = static_cast<int64_t>(std::floor(static_cast<float>(position)));
    const T t = position - static_cast<T>(floor);
    const T weights[4] = {cubic_outer<T>(t + T(1)), cubic_inner<T>(t), cubic_inner<T>(T(1) - t),
                          cubic_outer<T>(T(1) - t + T(1))};
    for (size_t j = 0; j < 4; ++j) {
      taps.index[j][k] = std::clamp<int64_t>(floor - 1 + static_cast<int64_t>(j), 0, in - 1);
      taps.weight[j][k] = static_cast<double>(weights[j]);
    }
  }
  return taps;
}

// Note [Antialiased interpolation]
// With antialias, bilinear and bicubic resample as Pillow does (torch's
// _upsample_bilinear2d_aa and _bicubic2d_aa, _compute_weights_aa): output o
// is a weighted sum over the input window around centre c = scale * (o +
// 0.5), with the filter (the triangle, or the Keys cubic with A = -0.5 as
// Pillow's) stretched by the downscale factor, so that every input pixel
// under the output pixel contributes and none is skipped (what aliases a
// plain bilinear downscale). The filter's support is 1 (triangle) or 2
// (cubic) input pixels, times scale when scale > 1; the window is
// [max(c - support + 0.5, 0), min(c + support + 0.5, n)) truncated, its
// weights filter((i - c + 0.5) / max(scale, 1)) divided by their sum, so
// the window edges and the image border need no clamping. When upsampling
// the filter keeps its width (scale < 1). Each tap k of an output is the
// k-th pixel of its window, and outputs with a shorter window get weight 0
// for the taps past its end (reading their window's first pixel), so a dim
// is a sum of as many gathers as the widest window has pixels, about
// 2 * support + 1.
template <class T>
T antialias_filter(InterpolateMode mode, T x) {
  x = std::abs(x);
  if (mode == InterpolateMode::Bilinear) return x < T(1) ? T(1) - x : T(0);
  const T a = T(-0.5);
  if (x < T(1)) return ((a + T(2)) * x - (a + T(3))) * x * x + T(1);
  if (x < T(2)) return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a;
  return T(0);
}

template <class T>
SourceTaps antialias_taps(InterpolateMode mode, int64_t in, int64_t out, bool align_corners,
                          std::optional<double> scale_factor) {
  const T scale = scale_of<T>(in, out, align_corners, scale_factor);
  const T half_width = mode == InterpolateMode::Bilinear ? T(1) : T(2);
  const T support = scale >= T(1) ? half_width * scale : half_width;
  const T invscale = scale >= T(1) ? T(1) / scale : T(1);
  std::vector<int64_t> first(static_cast<size_t>(out)), count(static_cast<size_t>(out));
  std::vector<std::vector<T>> window(static_cast<size_t>(out));
  size_t widest = 1;
  for (int64_t o = 0; o < out; ++o) {
    const size_t k = static_cast<size_t>(o);
    const T center = scale * (static_cast<T>(o) + T(0.5));
    first[k] = std::max(static_cast<int64_t>(center - support + T(0.5)), int64_t{0});
    count[k] = std::min(static_cast<int64_t>(center + support + T(0.5)), in) - first[k];
    T total = T(0);
    for (int64_t j = 0; j < count[k]; ++j) {
      const T w = antialias_filter<T>(mode, (static_cast<T>(j + first[k]) - center + T(0.5)) * invscale);
      window[k].push_back(w);
      total += w;
    }
    if (total != T(0))
      for (T& w : window[k]) w /= total;
    widest = std::max(widest, window[k].size());
  }
  SourceTaps taps{std::vector<std::vector<int64_t>>(widest, std::vector<int64_t>(static_cast<size_t>(out))),
                  std::vector<std::vector<double>>(widest, std::vector<double>(static_cast<size_t>(out)))};
  for (size_t k = 0; k < static_cast<size_t>(out); ++k) {
    for (size_t j = 0; j < widest; ++j) {
      const bool inside = j < window[k].size();
      taps.index[j][k] = inside ? first[k] + static_cast<int64_t>(j) : std::min(first[k], in - 1);
      taps.weight[j][k] = inside ? static_cast<double>(window[k][j]) : 0.0;
    }
  }
  return taps;
}

template <class T>
SourceTaps source_taps(InterpolateMode mode, int64_t in, int64_t out, bool align_corners,
                       std::optional<double> scale_factor, bool antialias) {
  if (antialias) return antialias_taps<T>(mode, in, out, align_corners, scale_factor);
  if (mode == InterpolateMode::Bicubic) return cubic_taps<T>(in, out, align_corners, scale_factor);
  if (is_linear(mode)) return linear_taps<T>(in, out, align_corners, scale_factor);
  return nearest_taps<T>(mode, in, out, scale_factor);
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

// x resized along dim d to the taps' output size. The weights are in x's
// dtype, as torch's kernels store them, and the products are summed tap by
// tap in torch's order.
Tensor resize_dim(const Tensor& x, int64_t d, const SourceTaps& taps) {
  const int64_t out = static_cast<int64_t>(taps.index[0].size());
  const int64_t trailing = x.dim() - 1 - d;
  Tensor sum;
  for (size_t k = 0; k < taps.index.size(); ++k) {
    Tensor gathered = index_select(x, d, from_vector<int64_t>(taps.index[k], {out}, x.device()));
    if (taps.weight.empty()) return gathered;
    Tensor term = mul(gathered, along(taps.weight[k], trailing, x.device()).to(x.dtype()));
    sum = sum.defined() ? add(sum, term) : term;
  }
  return sum;
}

// Area mode is adaptive average pooling to the output size, as in torch;
// each output averages the input window [floor(o * n / m), ceil((o + 1) *
// n / m)). One spatial dim pools a height-1 image. Three pool (H, W) of
// every depth slice first and then the depth, a window of size 1 leaving
// the flattened (H, W) as it is: the average over a box is the average of
// the averages of its slices, since every slice holds the same count.
Tensor area_resize(const Tensor& x, const Shape& out_sizes) {
  switch (out_sizes.size()) {
    case 1:
      return adaptive_avg_pool2d(x.unsqueeze(2), {1, out_sizes[0]}).squeeze(2);
    case 2:
      return adaptive_avg_pool2d(x, {out_sizes[0], out_sizes[1]});
    default: {
      const int64_t n = x.size(0), c = x.size(1), depth = x.size(2);
      Tensor planes =
          adaptive_avg_pool2d(x.reshape({n, c * depth, x.size(3), x.size(4)}), {out_sizes[1], out_sizes[2]});
      Tensor pooled = adaptive_avg_pool2d(planes.reshape({n, c, depth, out_sizes[1] * out_sizes[2]}),
                                          {out_sizes[0], out_sizes[1] * out_sizes[2]});
      return pooled.reshape({n, c, out_sizes[0], out_sizes[1], out_sizes[2]});
    }
  }
}

// torch's rule of which modes take which ranks: the linear family and
// bicubic name theirs; nearest, nearest-exact and area take any of 3-d to 5-d.
void check_mode_rank(const Tensor& x, InterpolateMode mode) {
  const char* name = interpolate_mode_name(mode);
  KILN_CHECK(x.dim() >= 3 && x.dim() <= 5, "interpolate: expected a 3-d, 4-d or 5-d input (N, C, d1, ...), got ",
             x.dim(), "-d input of shape ", x.shape(), " for mode ", name);
  int64_t needs = 0;
  const char* layout = "";
  switch (mode) {
    case InterpolateMode::Linear:
      needs = 3, layout = "(N, C, W)";
      break;
    case InterpolateMode::Bilinear:
    case InterpolateMode::Bicubic:
      needs = 4, layout = "(N, C, H, W)";
      break;
    case InterpolateMode::Trilinear:
      needs = 5, layout = "(N, C, D, H, W)";
      break;
    default:
      return;
  }
  KILN_CHECK(x.dim() == needs, "interpolate: ", name, " mode needs a ", needs, "-d input ", layout, ", got ", x.dim(),
             "-d input of shape ", x.shape());
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& options) {
  const InterpolateMode mode = options.mode;
  const char* name = interpolate_mode_name(mode);
  KILN_CHECK(x.defined(), "interpolate: input is undefined");
  KILN_CHECK(interpolate_mode_takes_align_corners(mode) || !options.align_corners.has_value(),
             "interpolate: align_corners can only be set with the interpolating modes (linear, bilinear, bicubic, ",
             "trilinear), not ", name);
  check_mode_rank(x, mode);
  KILN_CHECK(!options.antialias || mode == InterpolateMode::Bilinear || mode == InterpolateMode::Bicubic,
             "interpolate: antialias is only supported for the bilinear and bicubic modes, not ", name);
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
  const bool nearest = mode == InterpolateMode::Nearest || mode == InterpolateMode::NearestExact;
  KILN_CHECK(nearest || x.is_floating_point(), "interpolate: ", name, " mode needs a floating input, got ", x.dtype());

  if (mode == InterpolateMode::Area) return area_resize(x, out_sizes);
  const bool align_corners = options.align_corners.value_or(false);
  // Last dim first: the order in which torch's kernel nests its weighted
  // sums (Note [Padding and interpolation as gathers]).
  Tensor out = x;
  for (size_t k = dims; k-- > 0;) {
    // torch copies a linear dim whose size does not change (not a cubic one).
    if (is_linear(mode) && out_sizes[k] == spatial[k]) continue;
    const SourceTaps taps =
        x.dtype() == DType::Float64
            ? source_taps<double>(mode, spatial[k], out_sizes[k], align_corners, scales[k], options.antialias)
            : source_taps<float>(mode, spatial[k], out_sizes[k], align_corners, scales[k], options.antialias);
    bool identity = nearest && out_sizes[k] == spatial[k];
    for (int64_t o = 0; identity && o < out_sizes[k]; ++o) identity = taps.index[0][static_cast<size_t>(o)] == o;
    if (identity) continue;
    out = resize_dim(out, static_cast<int64_t>(k) + 2, taps);
  }
  // The result is never x itself, as in torch.
  if (out.is_same(x)) out = x.clone();
  return out;
}

}  // namespace kiln::nn::functional
