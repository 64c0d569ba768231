// The int8 conv2d, linear (static and dynamic), add and cat of
// tensor/quantized_ops.h:
// - against references written here from the same integers (the
//   accumulator in int64, then quant_math's requantization), byte for byte;
// - against the float ops on the dequantized operands, within one output step;
// - on every int8 GEMM path this CPU has, each giving the same bytes;
// - and every error path, by its message.
#include "tensor/quantized_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/cpu/cpu_features.h"
#include "tensor/cpu/cpu_quantized.h"
#include "tensor/cpu/qgemm.h"
#include "tensor/cpu/quantized_conv_direct.h"
#include "tensor/cpu/quantized_weight.h"
#include "tensor/memory_layout.h"
#include "tensor/ops.h"
#include "tensor/quant_math.h"
#include "tensor/quantize.h"
#include "tests/tensor/test_util.h"

#ifdef KILN_WITH_CUDA
#include "tensor/cuda/device.h"
#endif

namespace kiln {
namespace {

using quant_math::quantize_bias;
using quant_math::requantize_multiplier;
using quant_math::requantize_value;
using quant_math::scale_as_float;

Tensor random_float(const Shape& shape, double lo, double hi, uint64_t seed) {
  std::vector<double> v = pseudo_random(shape_numel(shape, "random_float"), lo, hi, seed);
  return from_vector<float>(std::vector<float>(v.begin(), v.end()), shape);
}

// A quint8 activation with values spread over the whole grid, or over [0,
// top] (top 127: 7-bit, as with reduce_range).
Tensor random_activation(const Shape& shape, double scale, int64_t zero_point, uint64_t seed, int64_t top = 255) {
  const double lo = -scale * double(zero_point), hi = scale * double(top - zero_point);
  return ops::quantize_per_tensor(random_float(shape, lo, hi, seed), scale, zero_point, DType::UInt8);
}

// A qint8 weight, per channel along dim 0 (scales differing per channel) or per tensor.
Tensor random_weight(const Shape& shape, bool per_channel, uint64_t seed) {
  Tensor w = random_float(shape, -1.0, 1.0, seed);
  if (!per_channel) return ops::quantize_per_tensor(w, 1.0 / 127, 0, DType::Int8);
  std::vector<double> scales;
  for (int64_t o = 0; o < shape[0]; ++o) scales.push_back((1.0 + 0.37 * double(o % 5)) / 127);
  return ops::quantize_per_channel(w, scales, std::vector<int64_t>(shape[0], 0), 0, DType::Int8);
}

// Integers of a quantized tensor in row-major order.
template <class T>
std::vector<int32_t> ints(const Tensor& q) {
  Tensor c = ops::int_repr(q).contiguous();
  std::vector<int32_t> v(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) v[i] = c.data<T>()[i];
  return v;
}
std::vector<float> floats(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

float scale_of(const Tensor& q) { return scale_as_float(q.impl()->quant_params()->scales[0]); }
int32_t zero_point_of(const Tensor& q) { return static_cast<int32_t>(q.impl()->quant_params()->zero_points[0]); }
std::vector<float> channel_scales(const Tensor& w) {
  const QuantParams& p = *w.impl()->quant_params();
  std::vector<float> s;
  for (int64_t o = 0; o < w.size(0); ++o) s.push_back(scale_as_float(p.scales[p.scales.size() == 1 ? 0 : o]));
  return s;
}

// The scale and zero point dynamic quantization picks, written out as
// PyTorch's MinMaxObserver computes them (float32 throughout).
struct QParams {
  float scale;
  int32_t zero_point;
  int32_t hi;
};
QParams dynamic_reference_qparams(const std::vector<float>& x, bool reduce_range) {
  float mn = 0, mx = 0;
  for (float v : x) mn = std::min(mn, v), mx = std::max(mx, v);
  const float qmax = reduce_range ? 127.0f : 255.0f;
  float scale = (mx - mn) / qmax;
  scale = std::max(scale, std::numeric_limits<float>::epsilon());
  float zp = 0.0f - std::nearbyint(mn / scale);
  zp = std::min(std::max(zp, 0.0f), qmax);
  return {scale, static_cast<int32_t>(zp), static_cast<int32_t>(qmax)};
}
std::vector<int32_t> quantize_reference(const std::vector<float>& x, const QParams& qp) {
  std::vector<int32_t> q;
  const float inv = 1.0f / qp.scale;
  for (float v : x) {
    q.push_back(static_cast<int32_t>(quant_math::quantize_value(v, inv, float(qp.zero_point), 0.0f, float(qp.hi))));
  }
  return q;
}

// ---- references -----------------------------------------------------------------

// What the output stage does to one accumulator (int64 here, checked to fit
// int32 as the kernels' exact arithmetic needs).
struct Stage {
  bool dynamic = false;
  float sx = 1;
  std::vector<float> sw;
  std::vector<float> bias;  // empty: none
  float sy = 1;
  int32_t zy = 0;
  bool relu = false;

  int32_t bias_q(int64_t n) const { return bias.empty() ? 0 : quantize_bias(bias[n], sx, sw[n]); }
  // static: the output integer; dynamic: the float, as bits in a double.
  double apply(int64_t acc, int64_t n) const {
    if (!dynamic) acc += bias_q(n);
    EXPECT_TRUE(acc >= INT32_MIN && acc <= INT32_MAX) << "accumulator overflows int32: " << acc;
    if (dynamic) {
      const float scale = sx * sw[n];
      const float product = float(acc) * scale;
      return bias.empty() ? product : product + bias[n];
    }
    return requantize_value(int32_t(acc), requantize_multiplier(sx, sw[n], sy), float(zy),
                            relu ? float(std::max(0, zy)) : 0.0f, 255.0f);
  }
};

// x: (M, K) integers with zero point zx; w: (N, K) -> (M, N) through `stage`.
std::vector<double> linear_reference(const std::vector<int32_t>& x, int32_t zx, const std::vector<int32_t>& w,
                                     int64_t m, int64_t k, int64_t n, const Stage& stage) {
  std::vector<double> out;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += int64_t(x[i * k + p] - zx) * w[j * k + p];
      out.push_back(stage.apply(acc, j));
    }
  }
  return out;
}

// x: (N, C, H, W) integers, w: (O, C/groups, kh, kw) -> (N, O, oh, ow);
// taps outside the input contribute nothing (they hold the zero point).
std::vector<double> conv_reference(const std::vector<int32_t>& x, int32_t zx, const Shape& xs,
                                   const std::vector<int32_t>& w, const Shape& ws, const Conv2dParams& p,
                                   const Stage& stage) {
  const int64_t n_images = xs[0], c = xs[1], h = xs[2], wd = xs[3];
  const int64_t o = ws[0], cg = ws[1], kh = ws[2], kw = ws[3], og = o / p.groups;
  const int64_t oh = (h + 2 * p.padding.h - p.dilation.h * (kh - 1) - 1) / p.stride.h + 1;
  const int64_t ow = (wd + 2 * p.padding.w - p.dilation.w * (kw - 1) - 1) / p.stride.w + 1;
  std::vector<double> out;
  for (int64_t n = 0; n < n_images; ++n) {
    for (int64_t oc = 0; oc < o; ++oc) {
      const int64_t group = oc / og;
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t xo = 0; xo < ow; ++xo) {
          int64_t acc = 0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            for (int64_t ky = 0; ky < kh; ++ky) {
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = y * p.stride.h - p.padding.h + ky * p.dilation.h;
                const int64_t ix = xo * p.stride.w - p.padding.w + kx * p.dilation.w;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t channel = group * cg + ci;
                acc += int64_t(x[((n * c + channel) * h + iy) * wd + ix] - zx) * w[((oc * cg + ci) * kh + ky) * kw + kx];
              }
            }
          }
          out.push_back(stage.apply(acc, oc));
        }
      }
    }
  }
  return out;
}

void expect_same_ints(const std::vector<int32_t>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != int32_t(want[i]) && wrong++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the reference " << want[i];
    }
  }
  EXPECT_EQ(wrong, 0) << what;
}

void expect_same_floats(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float w = float(want[i]);
    if (std::memcmp(&got[i], &w, sizeof(float)) != 0 && wrong++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the reference " << w;
    }
  }
  EXPECT_EQ(wrong, 0) << what;
}

std::string path_name(cpu::QGemmPath path) { return std::string(cpu::qgemm_path_name(path)); }

// ---- static linear --------------------------------------------------------------

struct LinearCase {
  int64_t m, k, n;
  bool per_channel, bias, relu;
  int64_t zx, zy;
};

void check_linear(const LinearCase& c, uint64_t seed) {
  Tensor x = random_activation({c.m, c.k}, 0.05, c.zx, seed);
  Tensor w = random_weight({c.n, c.k}, c.per_channel, seed + 1);
  Tensor bias = c.bias ? random_float({c.n}, -2.0, 2.0, seed + 2) : Tensor();
  // An output scale that keeps most values inside the grid and some outside.
  const double out_scale = 0.05 * std::sqrt(double(c.k)) * 0.3;
  Stage stage{false, scale_of(x), channel_scales(w), c.bias ? floats(bias) : std::vector<float>{},
              scale_as_float(out_scale), int32_t(c.zy), c.relu};
  const std::vector<double> want = linear_reference(ints<uint8_t>(x), zero_point_of(x), ints<int8_t>(w), c.m, c.k,
                                                    c.n, stage);
  const std::string what = "linear m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                           " n=" + std::to_string(c.n);
  for (cpu::QGemmPath path : cpu::qgemm_paths_available()) {
    auto packed = cpu::pack_quantized_weight(w, path);
    Tensor y = ops::quantized_linear(x, *packed, bias, out_scale, c.zy, c.relu);
    ASSERT_EQ(y.shape(), (Shape{c.m, c.n}));
    ASSERT_TRUE(y.is_quantized());
    EXPECT_EQ(y.dtype(), DType::UInt8);
    EXPECT_EQ(ops::q_scale(y), out_scale);
    EXPECT_EQ(ops::q_zero_point(y), c.zy);
    expect_same_ints(ints<uint8_t>(y), want, what + " path=" + path_name(path));
  }
}

TEST(QuantizedLinear, MatchesIntegerReferenceOnEveryPath) {
  const LinearCase cases[] = {
      {1, 400, 120, true, true, true, 0, 0},   {1, 120, 84, true, true, false, 7, 128},
      {5, 84, 10, false, true, false, 128, 40}, {64, 400, 120, true, true, true, 3, 0},
      {3, 1, 1, true, false, false, 255, 255}, {17, 7, 33, false, false, true, 200, 100},
      {130, 64, 17, true, true, true, 60, 30},  {2, 1000, 3, true, true, false, 128, 128},
  };
  uint64_t seed = 10;
  for (const LinearCase& c : cases) check_linear(c, seed += 7);
}

TEST(QuantizedLinear, BatchZeroAndLeadingDims) {
  Tensor w = random_weight({6, 5}, true, 3);
  auto packed = ops::pack_quantized_weight(w);
  Tensor empty = random_activation({0, 5}, 0.1, 10, 4);
  Tensor y0 = ops::quantized_linear(empty, *packed, Tensor(), 0.2, 5);
  EXPECT_EQ(y0.shape(), (Shape{0, 6}));
  EXPECT_TRUE(y0.is_quantized());

  // (2, 3, K) is (6, K) row by row; a non-contiguous input gives the same.
  Tensor x = random_activation({2, 3, 5}, 0.1, 10, 5);
  Tensor y = ops::quantized_linear(x, *packed, Tensor(), 0.2, 5, true);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 6}));
  Tensor flat = ops::quantized_linear(x.reshape({6, 5}), *packed, Tensor(), 0.2, 5, true);
  EXPECT_EQ(ints<uint8_t>(y), ints<uint8_t>(flat));
  Tensor xt = random_activation({5, 6}, 0.1, 10, 6).t();  // (6, 5) with column stride 6
  Tensor yt = ops::quantized_linear(xt, *packed, Tensor(), 0.2, 5);
  Tensor yc = ops::quantized_linear(xt.contiguous(), *packed, Tensor(), 0.2, 5);
  EXPECT_EQ(ints<uint8_t>(yt), ints<uint8_t>(yc));
}

TEST(QuantizedLinear, ThreadsGiveTheSameBytes) {
  const int saved = get_num_threads();
  Tensor x = random_activation({300, 256}, 0.05, 20, 7);
  Tensor w = random_weight({96, 256}, true, 8);
  Tensor b = random_float({96}, -1, 1, 9);
  auto packed = ops::pack_quantized_weight(w);
  set_num_threads(1);
  Tensor one = ops::quantized_linear(x, *packed, b, 0.3, 10, true);
  set_num_threads(std::max(saved, 2));
  Tensor many = ops::quantized_linear(x, *packed, b, 0.3, 10, true);
  set_num_threads(saved);
  EXPECT_EQ(ints<uint8_t>(one), ints<uint8_t>(many));
}

TEST(QuantizedLinear, CloseToFloatLinearOfDequantizedOperands) {
  Tensor x = random_activation({8, 120}, 0.03, 100, 11);
  Tensor w = random_weight({84, 120}, true, 12);
  Tensor b = random_float({84}, -0.5, 0.5, 13);
  const double out_scale = 0.04;
  const int64_t zy = 120;
  auto packed = ops::pack_quantized_weight(w);
  for (bool relu : {false, true}) {
    Tensor y = ops::dequantize(ops::quantized_linear(x, *packed, b, out_scale, zy, relu));
    Tensor ref = ops::linear(ops::dequantize(x), ops::dequantize(w), b);
    const std::vector<float> got = floats(y), want = floats(ref);
    const double lo = (relu ? 0.0 : -double(zy)) * out_scale, hi = (255.0 - double(zy)) * out_scale;
    for (size_t i = 0; i < got.size(); ++i) {
      const double expected = std::clamp(double(want[i]), lo, hi);
      // Half an output step from requantizing, half a bias step (sx * sw) from quantizing the bias.
      EXPECT_NEAR(got[i], expected, out_scale * 0.5 + 0.5 * 0.03 * 2.48 / 127 + 1e-5) << "element " << i
                                                                                     << " relu=" << relu;
    }
  }
}

// ---- dynamic linear -------------------------------------------------------------

void check_linear_dynamic(int64_t m, int64_t k, int64_t n, bool bias, bool reduce_range, double lo, double hi,
                          uint64_t seed) {
  Tensor x = random_float({m, k}, lo, hi, seed);
  Tensor w = random_weight({n, k}, true, seed + 1);
  Tensor b = bias ? random_float({n}, -1.0, 1.0, seed + 2) : Tensor();
  const QParams qp = dynamic_reference_qparams(floats(x), reduce_range);
  Stage stage{true, qp.scale, channel_scales(w), bias ? floats(b) : std::vector<float>{}};
  const std::vector<double> want =
      linear_reference(quantize_reference(floats(x), qp), qp.zero_point, ints<int8_t>(w), m, k, n, stage);
  for (cpu::QGemmPath path : cpu::qgemm_paths_available()) {
    auto packed = cpu::pack_quantized_weight(w, path);
    Tensor y = ops::quantized_linear_dynamic(x, *packed, b, reduce_range);
    ASSERT_EQ(y.shape(), (Shape{m, n}));
    EXPECT_EQ(y.dtype(), DType::Float32);
    EXPECT_FALSE(y.is_quantized());
    expect_same_floats(floats(y), want,
                       "linear_dynamic m=" + std::to_string(m) + " reduce_range=" + std::to_string(reduce_range) +
                           " path=" + path_name(path));
  }
}

TEST(QuantizedLinearDynamic, MatchesReferenceOnEveryPath) {
  check_linear_dynamic(1, 400, 120, true, false, -2.0, 3.0, 20);
  check_linear_dynamic(64, 120, 84, true, true, -2.0, 3.0, 21);
  check_linear_dynamic(7, 33, 5, false, false, 0.5, 4.0, 22);   // all positive: the range starts at 0
  check_linear_dynamic(9, 16, 4, true, false, -3.0, -1.0, 23);  // all negative: zero point 255
  check_linear_dynamic(3, 8, 2, true, false, 0.0, 0.0, 24);     // all zero: scale is FLT_EPSILON
}

TEST(QuantizedLinearDynamic, CloseToFloatLinear) {
  Tensor x = random_float({4, 3, 64}, -1.0, 1.0, 30);
  Tensor wf = random_float({32, 64}, -0.5, 0.5, 31);
  std::vector<double> scales(32, 0.5 / 127);
  Tensor w = ops::quantize_per_channel(wf, scales, std::vector<int64_t>(32, 0), 0, DType::Int8);
  Tensor b = random_float({32}, -1.0, 1.0, 32);
  auto packed = ops::pack_quantized_weight(w);
  Tensor y = ops::quantized_linear_dynamic(x, *packed, b);
  ASSERT_EQ(y.shape(), (Shape{4, 3, 32}));
  Tensor ref = ops::linear(x, ops::dequantize(w), b);
  const std::vector<float> got = floats(y), want = floats(ref);
  // Each product's input is off by at most half a step (1/255 of the range 2).
  const double bound = 64 * (1.0 / 255) * 0.5;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], bound) << "element " << i;
}

// ---- static conv2d --------------------------------------------------------------

struct ConvCase {
  Shape x, w;
  Conv2dParams p;
  bool per_channel, bias, relu;
  int64_t zx, zy;
};

// One group's Conv2dShape for input x and weight w (O, C/groups, kh, kw).
Conv2dShape group_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  return conv2d_shape(w[1], Size2d(x[2], x[3]), Size2d(w[2], w[3]), p);
}

// Whether the implicit form can run a call on this packed weight: its tiles
// on the Amx path, its runs on the VNNI paths (the two Notes in
// quantized_conv_implicit.h).
bool implicit_runs_here(const cpu::CpuPackedQuantizedWeight& w, const Conv2dParams& p, const Conv2dShape& s) {
  if (w.path() == cpu::QGemmPath::Amx) return cpu::implicit_qconv_pays(p.groups == 1 ? w.groups(1).implicit.get() : nullptr, p);
  return cpu::implicit_runs_pay(w.path(), p.groups == 1 ? w.groups(1).implicit.get() : nullptr, p, s);
}

// Runs the case on every path (with `algorithm`: Direct and Implicit only on
// the paths and params that support them) against the integer reference; returns how
// many paths ran. top: the input's largest value (127: 7-bit).
int check_conv(const ConvCase& c, uint64_t seed, cpu::QConvAlgorithm algorithm = cpu::QConvAlgorithm::Auto,
               int64_t top = 255) {
  Tensor x = random_activation(c.x, 0.05, c.zx, seed, top);
  Tensor w = random_weight(c.w, c.per_channel, seed + 1);
  Tensor bias = c.bias ? random_float({c.w[0]}, -2.0, 2.0, seed + 2) : Tensor();
  const double out_scale = 0.05 * std::sqrt(double(c.w[1] * c.w[2] * c.w[3])) * 0.3;
  Stage stage{false, scale_of(x), channel_scales(w), c.bias ? floats(bias) : std::vector<float>{},
              scale_as_float(out_scale), int32_t(c.zy), c.relu};
  const std::vector<double> want =
      conv_reference(ints<uint8_t>(x), zero_point_of(x), c.x, ints<int8_t>(w), c.w, c.p, stage);
  const std::string what =
      detail::str("conv x=", c.x, " w=", c.w, " stride=", c.p.stride.h, "x", c.p.stride.w, " pad=", c.p.padding.h, "x",
                  c.p.padding.w, " dilation=", c.p.dilation.h, "x", c.p.dilation.w, " groups=", c.p.groups,
                  " top=", top);
  const cpu::ForceQConvAlgorithm force(algorithm);
  const Conv2dShape shape = group_shape(c.x, c.w, c.p);
  int ran = 0;
  for (cpu::QGemmPath path : cpu::qgemm_paths_available()) {
    if (algorithm == cpu::QConvAlgorithm::Direct && !cpu::direct_qconv_supported(path, c.p, shape)) continue;
    auto packed = cpu::pack_quantized_weight(w, path);
    if (algorithm == cpu::QConvAlgorithm::Implicit && !implicit_runs_here(*packed, c.p, shape)) continue;
    Tensor y = ops::quantized_conv2d(x, *packed, bias, c.p, out_scale, c.zy, c.relu);
    EXPECT_EQ(y.dim(), 4);
    if (y.dim() != 4) return ran;
    // The GEMM and implicit forms write channels-last, the direct form NCHW
    // (Note [Channels-last quantized activations]).
    const bool direct = algorithm == cpu::QConvAlgorithm::Direct ||
                        (algorithm == cpu::QConvAlgorithm::Auto && cpu::direct_qconv_pays(path, c.p, shape, c.w[0] / c.p.groups));
    EXPECT_TRUE(direct ? y.is_contiguous() : is_channels_last(y))
        << what << " path=" << path_name(path) << detail::str(" strides ", y.strides());
    EXPECT_EQ(y.size(0), c.x[0]);
    EXPECT_EQ(y.size(1), c.w[0]);
    EXPECT_TRUE(y.is_quantized());
    if (!y.is_quantized()) return ran;
    EXPECT_EQ(ops::q_zero_point(y), c.zy);
    expect_same_ints(ints<uint8_t>(y), want, what + " path=" + path_name(path));
    ++ran;
  }
  return ran;
}

// One thread and several give the same bytes for weight shape w and image
// shape (C, H, W): batch 1 splits the positions of the image, batch 5
// spreads the images.
void expect_threads_agree(const Shape& w_shape, const Shape& image, const Conv2dParams& p, uint64_t seed) {
  const int saved = get_num_threads();
  Tensor w = random_weight(w_shape, true, seed);
  Tensor b = random_float({w_shape[0]}, -1, 1, seed + 1);
  auto packed = ops::pack_quantized_weight(w);
  for (int64_t batch : {1, 5}) {
    Tensor x = random_activation({batch, image[0], image[1], image[2]}, 0.05, 100, seed + 2);
    set_num_threads(1);
    Tensor one = ops::quantized_conv2d(x, *packed, b, p, 0.2, 20, true);
    set_num_threads(std::max(saved, 2));
    Tensor many = ops::quantized_conv2d(x, *packed, b, p, 0.2, 20, true);
    set_num_threads(saved);
    EXPECT_EQ(ints<uint8_t>(one), ints<uint8_t>(many)) << "batch " << batch;
  }
}

TEST(QuantizedConv2d, MatchesIntegerReferenceOnEveryPath) {
  const ConvCase cases[] = {
      // LeNet's two layers, batch 1 and 3.
      {{1, 3, 32, 32}, {6, 3, 5, 5}, {}, true, true, true, 0, 0},
      {{3, 6, 14, 14}, {16, 6, 5, 5}, {}, true, true, false, 20, 128},
      // Padding with a zero point far from 0: padded taps must count as 0.
      {{2, 4, 9, 7}, {5, 4, 3, 3}, {.padding = {1, 2}}, true, true, false, 200, 100},
      {{2, 16, 8, 8}, {16, 16, 3, 3}, {.padding = 1}, false, true, true, 128, 30},
      // Stride and dilation, on each axis.
      {{2, 3, 11, 10}, {4, 3, 3, 3}, {.stride = {2, 3}, .padding = 1}, true, true, false, 90, 128},
      {{1, 2, 12, 13}, {3, 2, 3, 2}, {.padding = {2, 1}, .dilation = {2, 3}}, true, false, true, 40, 60},
      // Groups, depthwise.
      {{2, 6, 7, 7}, {4, 3, 3, 3}, {.padding = 1, .groups = 2}, true, true, false, 77, 128},
      {{2, 8, 6, 6}, {8, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 8}, true, true, true, 128, 10},
      // 1x1: pointwise (no patches), and strided.
      {{2, 16, 5, 6}, {8, 16, 1, 1}, {}, true, true, false, 50, 128},
      {{2, 8, 5, 6}, {6, 4, 1, 1}, {.groups = 2}, true, false, false, 3, 128},
      {{1, 8, 8, 8}, {4, 8, 1, 1}, {.stride = 2}, true, true, true, 0, 0},
      // Many channels (long patch rows), one output channel.
      {{1, 64, 4, 4}, {1, 64, 3, 3}, {.padding = 1}, true, true, false, 128, 128},
      // Batch 0.
      {{0, 3, 8, 8}, {4, 3, 3, 3}, {}, true, true, false, 10, 10},
  };
  uint64_t seed = 100;
  for (const ConvCase& c : cases) check_conv(c, seed += 5);
}

// The direct form (Note [Direct int8 convolution with positions in the
// lanes]) on the shapes its tables are cut for: quads over one and two runs,
// several 16-position blocks per row and a masked last one, strides and
// dilations that widen the windows, padding at a far zero point, groups,
// more than 16 output channels (cut into chunks), batch 1 split over threads.
const ConvCase kDirectCases[] = {
    {{1, 3, 32, 32}, {6, 3, 5, 5}, {}, true, true, true, 0, 0},         // LeNet conv1
    {{2, 6, 14, 14}, {16, 6, 5, 5}, {}, true, true, false, 20, 128},   // LeNet conv2
    {{2, 1, 9, 40}, {3, 1, 3, 3}, {}, false, true, false, 7, 128},     // one channel, rows of 38: 3 blocks
    {{1, 2, 7, 17}, {1, 2, 2, 2}, {}, true, false, false, 250, 3},     // one output channel, 16 + 0 lanes
    {{2, 4, 9, 7}, {5, 4, 3, 3}, {.padding = {1, 2}}, true, true, false, 200, 100},
    {{2, 3, 11, 40}, {4, 3, 3, 3}, {.stride = {2, 3}, .padding = 1}, true, true, true, 90, 128},
    {{1, 2, 12, 30}, {3, 2, 3, 2}, {.padding = {2, 1}, .dilation = {2, 3}}, true, false, true, 40, 60},
    {{2, 6, 7, 20}, {4, 3, 3, 3}, {.padding = 1, .groups = 2}, true, true, false, 77, 128},
    {{2, 8, 6, 6}, {8, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 8}, true, true, true, 128, 10},
    {{1, 3, 10, 21}, {20, 3, 3, 3}, {.padding = 1}, true, true, false, 11, 128},   // 20 channels: 10 + 10
    {{1, 5, 8, 8}, {7, 5, 1, 1}, {}, true, true, false, 50, 128},                 // 1x1: one tap per run
    {{1, 2, 6, 9}, {3, 2, 1, 7}, {.padding = {0, 3}}, true, true, false, 99, 128},  // 1x7: 4 + 3 taps
    {{0, 3, 8, 8}, {4, 3, 3, 3}, {}, true, true, false, 10, 10},
};

TEST(QuantizedConv2dDirect, MatchesIntegerReferenceOnEveryPathThatHasIt) {
  if (!cpu::int8_features().avx512vbmi) GTEST_SKIP() << "this CPU has no AVX-512 VBMI: the direct form never runs";
  uint64_t seed = 300;
  for (const ConvCase& c : kDirectCases) {
    EXPECT_GE(check_conv(c, seed += 5, cpu::QConvAlgorithm::Direct), 1) << "no path ran the direct form";
    check_conv(c, seed, cpu::QConvAlgorithm::Gemm);
  }
}

// Why the direct form cannot run on the path in use (this CPU's, or one
// KILN_QGEMM caps it to), or "" when it can.
std::string no_direct_form() {
  if (cpu::direct_qconv_available(cpu::qgemm_path())) return "";
  return "the " + std::string(cpu::qgemm_path_name(cpu::qgemm_path())) +
         " path (this CPU, or KILN_QGEMM) has no direct form: it needs AVX-512 VNNI and VBMI";
}

TEST(QuantizedConv2dDirect, ThreadsGiveTheSameBytes) {
  if (const std::string why = no_direct_form(); !why.empty()) GTEST_SKIP() << why;
  const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Direct);
  expect_threads_agree({6, 3, 5, 5}, {3, 64, 64}, {}, 350);
}

TEST(QuantizedConv2dDirect, AutoPicksItForFewOutputChannels) {
  const Conv2dShape lenet1 = group_shape({1, 3, 32, 32}, {6, 3, 5, 5}, {});
  const bool has = cpu::int8_features().avx512vbmi;
  EXPECT_EQ(cpu::direct_qconv_pays(cpu::QGemmPath::Avx512Vnni, {}, lenet1, 6), has);
  EXPECT_FALSE(cpu::direct_qconv_pays(cpu::QGemmPath::Avx512Vnni, {}, lenet1, 16));
  EXPECT_FALSE(cpu::direct_qconv_pays(cpu::QGemmPath::Avx2, {}, lenet1, 6));
  EXPECT_FALSE(cpu::direct_qconv_pays(cpu::QGemmPath::Scalar, {}, lenet1, 6));
  // A stride of 4 with dilation 2: 3*2 + 15*4 + 1 = 67 bytes, past one window.
  EXPECT_FALSE(cpu::direct_qconv_supported(cpu::QGemmPath::Avx512Vnni, {.stride = 4, .dilation = 2}, lenet1));
}

TEST(QuantizedConv2dDirect, ForcedWhereItCannotRunNamesWhy) {
  const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Direct);
  Tensor x = random_activation({1, 3, 8, 8}, 0.05, 10, 360);
  Tensor w = random_weight({4, 3, 3, 3}, true, 361);
  auto packed = cpu::pack_quantized_weight(w, cpu::QGemmPath::Scalar);
  expect_error([&] { ops::quantized_conv2d(x, *packed, Tensor(), {}, 0.1, 0); },
               "quantized conv2d: the direct form was forced but the scalar path cannot run it");
}

TEST(QuantizedConv2dDirect, DynamicMatchesTheGemmForm) {
  if (const std::string why = no_direct_form(); !why.empty()) GTEST_SKIP() << why;
  Tensor x = random_float({2, 3, 20, 20}, -1.5, 2.5, 370);
  Tensor w = random_weight({6, 3, 5, 5}, true, 371);
  Tensor b = random_float({6}, -1, 1, 372);
  auto packed = ops::pack_quantized_weight(w);
  Tensor gemm, direct;
  {
    const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Gemm);
    gemm = ops::quantized_conv2d_dynamic(x, *packed, b, {.padding = 2});
  }
  {
    const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Direct);
    direct = ops::quantized_conv2d_dynamic(x, *packed, b, {.padding = 2});
  }
  EXPECT_EQ(floats(gemm), floats(direct));
}

// The implicit form (Note [Implicit int8 convolution on AMX tiles]) on the
// shapes its blocks and kernel rows are cut for: ResNet-20's layers (3x3 at
// 16, 32 and 64 channels: kernel rows of 48, 96 and 192 bytes in 64, 128
// and 192), pitched blocks that cross row ends and the image's end, stride-2
// row blocks with a masked last one, 1x1 convolutions, dilation in height,
// uneven padding at a far zero point, channel counts off the 16-lane panels.
const ConvCase kImplicitCases[] = {
    {{2, 16, 12, 12}, {16, 16, 3, 3}, {.padding = 1}, true, false, true, 128, 30},  // layer1
    {{1, 32, 9, 9}, {32, 32, 3, 3}, {.padding = 1}, true, false, true, 50, 0},       // layer2
    {{2, 64, 5, 6}, {64, 64, 3, 3}, {.padding = 1}, true, true, false, 0, 128},      // layer3
    {{2, 16, 17, 35}, {32, 16, 3, 3}, {.stride = 2, .padding = 1}, true, false, false, 7, 128},  // rows of 18: 16 + 2
    {{1, 32, 8, 8}, {64, 32, 1, 1}, {.stride = 2}, true, false, false, 90, 128},     // a ResNet downsample
    {{2, 64, 7, 5}, {20, 64, 1, 1}, {}, true, true, true, 200, 10},                   // 20 channels: panels of 16 + 4
    {{1, 32, 11, 10}, {48, 32, 3, 3}, {.padding = {2, 1}, .dilation = {2, 1}}, true, true, false, 250, 128},
    {{1, 16, 6, 7}, {16, 16, 3, 3}, {.padding = {0, 2}}, false, true, true, 3, 60},  // per-tensor weight
    {{3, 24, 4, 4}, {16, 24, 2, 3}, {.padding = 1}, true, true, false, 100, 100},    // rows of 72 in 128
    {{2, 6, 14, 14}, {16, 6, 5, 5}, {}, true, true, false, 20, 128},               // LeNet conv2: 30 in 64
    // Stacked kernel rows (Note [Stacked kernel rows]) on Amx: ResNet-20's
    // stem (27 bytes in 64), stride 2 over odd sizes, dilation in height
    // (rows of the stacked image taken 2 apart), uneven padding, a 5x5 at 3
    // channels (75 in 128) and at 1 (25 in 64), output channels off the
    // 16-lane panels.
    {{2, 3, 16, 16}, {16, 3, 3, 3}, {.padding = 1}, true, true, true, 120, 30},
    {{1, 3, 15, 13}, {20, 3, 3, 3}, {.stride = 2, .padding = 1}, true, false, false, 0, 128},
    {{1, 3, 12, 11}, {16, 3, 3, 3}, {.padding = {2, 1}, .dilation = {2, 1}}, false, true, false, 255, 7},
    {{2, 3, 9, 8}, {24, 3, 3, 3}, {.padding = {0, 2}}, true, true, true, 60, 128},
    {{1, 3, 14, 14}, {8, 3, 5, 5}, {.padding = 2}, true, true, false, 33, 128},
    {{2, 1, 11, 9}, {16, 1, 5, 5}, {.stride = {2, 1}}, true, false, true, 200, 0},
    // 1x1 below 64 bytes of channels: ResNet-20's 16-channel downsample
    // (16 in 64, stride 2 over an odd width), and a padded one at 8.
    {{2, 16, 9, 11}, {32, 16, 1, 1}, {.stride = 2}, true, true, false, 40, 128},
    {{1, 8, 5, 6}, {16, 8, 1, 1}, {.padding = 1}, true, true, true, 200, 3},
};

bool has_path(cpu::QGemmPath path) {
  const auto paths = cpu::qgemm_paths_available();
  return std::find(paths.begin(), paths.end(), path) != paths.end();
}

// Whether some path of this CPU runs the implicit form for case c.
bool implicit_runs_somewhere(const ConvCase& c) {
  const Conv2dShape shape = group_shape(c.x, c.w, c.p);
  for (cpu::QGemmPath path : cpu::qgemm_paths_available()) {
    const bool padded_rows = c.p.groups == 1 && c.p.dilation.w == 1 && cpu::implicit_qconv_packable(path, c.w[1], c.w[2], c.w[3]);
    if (path == cpu::QGemmPath::Amx) {
      const bool stacked = c.p.groups == 1 && c.p.dilation.w == 1 &&
                           cpu::stacked_qconv_packable(path, c.w[1], c.w[2], c.w[3]);
      if (padded_rows || stacked) return true;
    } else if (padded_rows || cpu::implicit_runs_pay(path, nullptr, c.p, shape)) {
      return true;
    }
  }
  return false;
}

// The implicit form's runs on the VNNI paths (the second Note): kernel rows
// of 4k bytes, taps of 4k channels with dilation_w > 1, groups, stride-2
// rows split over tile rows, and a strided 1x1 (a plain 1x1 reads the plane
// as it is and never takes it).
const ConvCase kImplicitRunsCases[] = {
    {{1, 8, 9, 11}, {12, 8, 3, 3}, {.padding = 1, .dilation = {1, 2}}, true, true, false, 30, 128},  // taps of 8
    {{2, 8, 7, 9}, {6, 4, 3, 3}, {.padding = 1, .groups = 2}, true, true, true, 77, 20},   // 4 channels a group
    {{1, 4, 10, 37}, {40, 4, 1, 5}, {.stride = {1, 2}, .padding = {0, 2}}, true, false, false, 9, 128},  // 20 bytes
    {{2, 16, 8, 8}, {33, 16, 3, 3}, {.stride = 2, .padding = 1}, true, true, false, 128, 128},  // 33 = 16+16+1
    {{1, 64, 3, 2}, {70, 64, 2, 2}, {.padding = 1}, false, true, true, 5, 7},  // 5 panels: 3 + 2
    // Rows padded to 4k bytes: 3x3 at 3 channels (9 in 12), the last run
    // reading 3 bytes past the plane (no padding); a stride of 2 over 15 in
    // 16; one channel, 5 in 8, and 5 channels over two rows of 10 in 12.
    {{2, 3, 8, 8}, {4, 3, 3, 3}, {}, true, true, false, 40, 128},
    {{1, 3, 9, 10}, {17, 3, 3, 3}, {.padding = 1}, false, true, true, 200, 3},
    {{2, 5, 11, 9}, {8, 5, 3, 3}, {.stride = 2, .padding = {1, 0}}, true, false, false, 60, 128},
    {{1, 1, 7, 12}, {16, 1, 5, 5}, {.padding = 2}, true, true, false, 0, 128},
    {{1, 5, 6, 6}, {33, 5, 2, 2}, {}, true, true, true, 255, 9},
    // Kernel rows in the padding (Note [Kernel rows in the padding]): a
    // padding of 3 over a 3x3, so that the top and bottom output rows read
    // only padding and the next ones two kernel rows of it; and the same
    // with dilation in both directions, where each kernel row is 3 runs.
    {{2, 8, 2, 5}, {16, 8, 3, 3}, {.padding = {3, 1}}, true, true, false, 200, 128},
    {{1, 8, 7, 9}, {12, 8, 3, 3}, {.padding = {4, 2}, .dilation = {2, 2}}, true, true, true, 17, 60},
};

TEST(QuantizedConv2dImplicit, MatchesIntegerReferenceOnEveryPathThatHasIt) {
  if (!has_path(cpu::QGemmPath::Avx2)) GTEST_SKIP() << "this CPU has no AVX2: the implicit form never runs";
  uint64_t seed = 500;
  int cases_run = 0;
  auto check = [&](const ConvCase& c) {
    // Full-range inputs, and 7-bit ones, whose bytes the Avx2 path
    // multiplies as they are (Note [Int8 GEMM on AVX2 without VNNI]).
    for (int64_t top : {255, 127}) {
      const int ran = check_conv(c, seed += 5, cpu::QConvAlgorithm::Implicit, top);
      if (implicit_runs_somewhere(c)) EXPECT_GE(ran, 1) << "no path ran the implicit form";
      else EXPECT_EQ(ran, 0);
      cases_run += ran > 0;
      check_conv(c, seed, cpu::QConvAlgorithm::Gemm, top);
    }
  };
  for (const ConvCase& c : kImplicitCases) check(c);
  for (const ConvCase& c : kImplicitRunsCases) check(c);
  EXPECT_GE(cases_run, 20);
}

// Note [Kernel rows in the padding]: which runs an output row leaves out.
TEST(QuantizedConv2dImplicit, KernelRowsInThePaddingAreTheOnesOutsideTheImage) {
  using Skip = cpu::KernelRowSkip;
  const Conv2dParams pad1{.padding = 1};
  const Conv2dShape s8 = conv2d_shape(16, Size2d(8), Size2d(3), pad1);  // 8x8 out
  EXPECT_EQ(cpu::kernel_rows_in_padding(pad1, s8, 0, 1), (Skip{1, 0}));
  EXPECT_EQ(cpu::kernel_rows_in_padding(pad1, s8, 3, 1), (Skip{0, 0}));
  EXPECT_EQ(cpu::kernel_rows_in_padding(pad1, s8, 7, 1), (Skip{0, 1}));
  // Stride 2 over 16 rows: row 0 reads row -1, the last row 13..15.
  const Conv2dParams down{.stride = 2, .padding = 1};
  const Conv2dShape s16 = conv2d_shape(16, Size2d(16), Size2d(3), down);
  EXPECT_EQ(cpu::kernel_rows_in_padding(down, s16, 0, 1), (Skip{1, 0}));
  EXPECT_EQ(cpu::kernel_rows_in_padding(down, s16, 7, 1), (Skip{0, 0}));
  // Two input rows under a padding of 3: rows 0 and 5 read no image row,
  // and all three kernel rows go (3 runs each with dilation_w > 1).
  const Conv2dParams wide{.padding = {3, 1}};
  const Conv2dShape s2 = conv2d_shape(8, Size2d(2, 5), Size2d(3), wide);
  ASSERT_EQ(s2.output.h, 6);
  EXPECT_EQ(cpu::kernel_rows_in_padding(wide, s2, 0, 1), (Skip{3, 0}));
  EXPECT_EQ(cpu::kernel_rows_in_padding(wide, s2, 1, 3), (Skip{6, 0}));
  EXPECT_EQ(cpu::kernel_rows_in_padding(wide, s2, 3, 1), (Skip{0, 1}));
  EXPECT_EQ(cpu::kernel_rows_in_padding(wide, s2, 5, 1), (Skip{3, 0}));
  // Dilation 2 in height: the rows read are y - 4, y - 2 and y.
  const Conv2dParams dilated{.padding = {4, 2}, .dilation = {2, 2}};
  const Conv2dShape s7 = conv2d_shape(8, Size2d(7, 9), Size2d(3), dilated);
  EXPECT_EQ(cpu::kernel_rows_in_padding(dilated, s7, 1, 3), (Skip{6, 0}));
  EXPECT_EQ(cpu::kernel_rows_in_padding(dilated, s7, 3, 3), (Skip{3, 0}));
  EXPECT_EQ(cpu::kernel_rows_in_padding(dilated, s7, 4, 3), (Skip{0, 0}));
}

TEST(QuantizedConv2dImplicit, ThreadsGiveTheSameBytes) {
  if (!has_path(cpu::QGemmPath::Avx2)) GTEST_SKIP() << "this CPU has no AVX2: the implicit form never runs";
  const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Implicit);
  expect_threads_agree({32, 16, 3, 3}, {16, 30, 30}, {.padding = 1}, 550);
  // Batch 1 splits positions mid-row: 3 rows of 29 over 2 threads.
  expect_threads_agree({16, 8, 3, 3}, {8, 5, 31}, {.padding = {0, 2}}, 555);
}

TEST(QuantizedConv2dImplicit, AutoPicksItWhereTheRowsPay) {
  // 3x3 at 16 channels: 48-byte rows in 64; LeNet's 5x5 at 6: 30 in 64;
  // 3 channels: 9 bytes in 64, too much padding (stacked instead, below); a
  // 3x1 at 16: 16 in 64, too; a 1x1 at 16 is packed all the same (its GEMM
  // form pads K to 64 as well).
  EXPECT_TRUE(cpu::implicit_qconv_packable(cpu::QGemmPath::Amx, 16, 3, 3));
  EXPECT_TRUE(cpu::implicit_qconv_packable(cpu::QGemmPath::Amx, 6, 5, 5));
  EXPECT_FALSE(cpu::implicit_qconv_packable(cpu::QGemmPath::Amx, 3, 3, 3));
  EXPECT_TRUE(cpu::implicit_qconv_packable(cpu::QGemmPath::Amx, 16, 1, 1));  // any 1x1
  EXPECT_TRUE(cpu::implicit_qconv_packable(cpu::QGemmPath::Amx, 3, 1, 1));
  EXPECT_FALSE(cpu::implicit_qconv_packable(cpu::QGemmPath::Amx, 16, 3, 1));  // 16 in 64, three rows
  EXPECT_TRUE(cpu::implicit_qconv_packable(cpu::QGemmPath::Amx, 32, 1, 1));
  // On the paths that read bytes (Avx2 and the VNNI ones) only rows of
  // kw*C % 4 != 0 bytes are packed again, padded to 4k (LeNet's 30 in 32).
  EXPECT_FALSE(cpu::implicit_qconv_packable(cpu::QGemmPath::Avx512Vnni, 16, 3, 3));
  EXPECT_TRUE(cpu::implicit_qconv_packable(cpu::QGemmPath::Avx512Vnni, 6, 5, 5));
  EXPECT_TRUE(cpu::implicit_qconv_packable(cpu::QGemmPath::AvxVnni, 3, 3, 3));
  EXPECT_TRUE(cpu::implicit_qconv_packable(cpu::QGemmPath::Avx2, 6, 5, 5));
  EXPECT_FALSE(cpu::implicit_qconv_packable(cpu::QGemmPath::Scalar, 6, 5, 5));
  // Their runs: kernel rows (or taps) of 4k bytes, or the weight's padded
  // rows, not a plain 1x1.
  const Conv2dShape layer1 = group_shape({1, 16, 32, 32}, {16, 16, 3, 3}, {.padding = 1});
  EXPECT_TRUE(cpu::implicit_runs_pay(cpu::QGemmPath::Avx512Vnni, nullptr, {.padding = 1}, layer1));
  EXPECT_TRUE(cpu::implicit_runs_pay(cpu::QGemmPath::AvxVnni, nullptr, {.padding = 1}, layer1));
  EXPECT_TRUE(cpu::implicit_runs_pay(cpu::QGemmPath::Avx2, nullptr, {.padding = 1}, layer1));
  EXPECT_FALSE(cpu::implicit_runs_pay(cpu::QGemmPath::Scalar, nullptr, {.padding = 1}, layer1));
  EXPECT_FALSE(cpu::implicit_runs_pay(cpu::QGemmPath::Amx, nullptr, {.padding = 1}, layer1));
  const Conv2dShape lenet2 = group_shape({1, 6, 14, 14}, {16, 6, 5, 5}, {});
  EXPECT_FALSE(cpu::implicit_runs_pay(cpu::QGemmPath::Avx512Vnni, nullptr, {}, group_shape({1, 3, 32, 32}, {16, 3, 3, 3}, {})));
  EXPECT_FALSE(cpu::implicit_runs_pay(cpu::QGemmPath::Avx512Vnni, nullptr, {}, lenet2));
  EXPECT_FALSE(cpu::implicit_runs_pay(cpu::QGemmPath::Avx512Vnni, nullptr, {}, group_shape({1, 16, 8, 8}, {32, 16, 1, 1}, {})));
  EXPECT_TRUE(cpu::implicit_runs_pay(cpu::QGemmPath::Avx512Vnni, nullptr, {.stride = 2},
                                     group_shape({1, 16, 8, 8}, {32, 16, 1, 1}, {.stride = 2})));
  for (cpu::QGemmPath path : {cpu::QGemmPath::Avx2, cpu::QGemmPath::AvxVnni, cpu::QGemmPath::Avx512Vnni}) {
    if (!has_path(path)) continue;
    auto lenet = cpu::pack_quantized_weight(random_weight({16, 6, 5, 5}, true, 559), path);
    const cpu::ImplicitQConvWeight* rows = lenet->groups(1).implicit.get();
    ASSERT_NE(rows, nullptr);
    EXPECT_EQ(rows->row_bytes, 32);
    EXPECT_TRUE(cpu::implicit_runs_pay(path, rows, {}, lenet2));
    EXPECT_FALSE(cpu::implicit_runs_pay(path, rows, {.dilation = {1, 2}}, group_shape({1, 6, 14, 14}, {16, 6, 5, 5}, {.dilation = {1, 2}})));
    const cpu::ImplicitQConvRuns runs = cpu::implicit_qconv_runs(rows, {}, lenet2, 14);
    EXPECT_TRUE(runs.padded_rows);
    EXPECT_EQ(runs.groups, 8);
    EXPECT_EQ(runs.overread, 2);
    EXPECT_EQ(runs.offsets, (std::vector<int64_t>{0, 14 * 6, 28 * 6, 42 * 6, 56 * 6}));
  }
  if (!has_path(cpu::QGemmPath::Amx)) return;
  auto packed = cpu::pack_quantized_weight(random_weight({16, 16, 3, 3}, true, 560), cpu::QGemmPath::Amx);
  const cpu::ImplicitQConvWeight* w = packed->groups(1).implicit.get();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->row_bytes, 64);
  EXPECT_TRUE(cpu::implicit_qconv_pays(w, {.padding = 1}));
  EXPECT_FALSE(cpu::implicit_qconv_pays(w, {.padding = 1, .dilation = {1, 2}}));
  EXPECT_FALSE(cpu::implicit_qconv_pays(nullptr, {}));
  // Stacked kernel rows: where the plain rows are not packed, kh > 1, kh*C
  // <= 16 and the stacked run at most triples in padding: the stem's 3x3 at
  // 3 channels (27 in 64), 5x5 at 1 (25 in 64); not 3x3 at 1 (9 in 64), 3x3
  // at 6 (kh*C 18), a 1-row kernel, or another path.
  EXPECT_TRUE(cpu::stacked_qconv_packable(cpu::QGemmPath::Amx, 3, 3, 3));
  EXPECT_TRUE(cpu::stacked_qconv_packable(cpu::QGemmPath::Amx, 1, 5, 5));
  EXPECT_FALSE(cpu::stacked_qconv_packable(cpu::QGemmPath::Amx, 1, 3, 3));
  EXPECT_FALSE(cpu::stacked_qconv_packable(cpu::QGemmPath::Amx, 6, 3, 3));
  EXPECT_FALSE(cpu::stacked_qconv_packable(cpu::QGemmPath::Amx, 3, 1, 3));
  EXPECT_FALSE(cpu::stacked_qconv_packable(cpu::QGemmPath::Amx, 16, 3, 3));
  EXPECT_FALSE(cpu::stacked_qconv_packable(cpu::QGemmPath::Avx512Vnni, 3, 3, 3));
  auto stem = cpu::pack_quantized_weight(random_weight({16, 3, 3, 3}, true, 561), cpu::QGemmPath::Amx);
  const cpu::ImplicitQConvWeight* s = stem->groups(1).implicit.get();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stacked_kh, 3);
  EXPECT_EQ(s->channels, 9);
  EXPECT_EQ(s->kh, 1);
  EXPECT_EQ(s->kw, 3);
  EXPECT_EQ(s->row_bytes, 64);
  EXPECT_TRUE(cpu::implicit_qconv_pays(s, {.padding = 1, .dilation = {2, 1}}));
  EXPECT_FALSE(cpu::implicit_qconv_pays(s, {.padding = 1, .dilation = {1, 2}}));
  // Half-empty blocks: a 1x1 with a stride onto an output at most 8 wide
  // (ResNet-20's layer3.0.downsample); not at stride 1 (the pitched blocks
  // run across rows), not onto 9 pixels, not a 3x3, not the stem's (stacked) 3x3.
  // The 1x1 has an implicit weight, so the rule is what keeps it off the tiles.
  auto pointwise = cpu::pack_quantized_weight(random_weight({64, 32, 1, 1}, true, 562), cpu::QGemmPath::Amx);
  ASSERT_NE(pointwise->groups(1).implicit.get(), nullptr);
  const Conv2dParams s2{.stride = 2};
  EXPECT_TRUE(cpu::implicit_blocks_half_empty(s2, group_shape({1, 32, 16, 16}, {64, 32, 1, 1}, s2)));
  EXPECT_TRUE(cpu::implicit_blocks_half_empty({.stride = {1, 2}}, group_shape({1, 32, 5, 15}, {64, 32, 1, 1}, {.stride = {1, 2}})));
  EXPECT_FALSE(cpu::implicit_blocks_half_empty(s2, group_shape({1, 32, 18, 18}, {64, 32, 1, 1}, s2)));
  EXPECT_FALSE(cpu::implicit_blocks_half_empty({}, group_shape({1, 32, 8, 8}, {64, 32, 1, 1}, {})));
  const Conv2dParams s2p1{.stride = 2, .padding = 1};
  EXPECT_FALSE(cpu::implicit_blocks_half_empty(s2p1, group_shape({1, 16, 16, 16}, {16, 16, 3, 3}, s2p1)));
  EXPECT_FALSE(cpu::implicit_blocks_half_empty(s2p1, group_shape({1, 3, 16, 16}, {16, 3, 3, 3}, s2p1)));
}

// The stacked image is copied from any input layout: NCHW planes (the byte
// interleave), a channels-last tensor seen through NCHW strides and a
// narrowed view (the plain loop), each equal to the GEMM form to the byte;
// and one thread equals several.
TEST(QuantizedConv2dImplicit, StackedRowsTakeAnyInputLayout) {
  if (!has_path(cpu::QGemmPath::Amx)) GTEST_SKIP() << "no AMX on this CPU: kernel rows are stacked only there";
  Tensor w = random_weight({16, 3, 3, 3}, true, 590);
  Tensor b = random_float({16}, -1, 1, 591);
  auto packed = cpu::pack_quantized_weight(w, cpu::QGemmPath::Amx);
  ASSERT_GT(packed->groups(1).implicit->stacked_kh, 0);
  Tensor nchw = random_activation({2, 3, 13, 17}, 0.05, 90, 592);
  Tensor nhwc = random_activation({2, 13, 17, 3}, 0.05, 90, 593).permute({0, 3, 1, 2});
  Tensor wide = random_activation({2, 3, 13, 21}, 0.05, 90, 594).narrow(3, 2, 17);
  for (const Conv2dParams& p : {Conv2dParams{.padding = 1}, Conv2dParams{.stride = 2, .padding = 1}}) {
    for (const Tensor& x : {nchw, nhwc, wide}) {
      Tensor gemm, implicit;
      {
        const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Gemm);
        gemm = ops::quantized_conv2d(x, *packed, b, p, 0.2, 100, true);
      }
      {
        const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Implicit);
        implicit = ops::quantized_conv2d(x, *packed, b, p, 0.2, 100, true);
      }
      EXPECT_EQ(ints<uint8_t>(implicit), ints<uint8_t>(gemm)) << detail::str("strides ", x.strides(), " stride ", p.stride.h);
    }
  }
  const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Implicit);
  expect_threads_agree({16, 3, 3, 3}, {3, 31, 30}, {.padding = 1}, 595);
}

TEST(QuantizedConv2dImplicit, ForcedWhereItCannotRunNamesWhy) {
  const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Implicit);
  Tensor x = random_activation({1, 16, 8, 8}, 0.05, 10, 570);
  Tensor w = random_weight({16, 16, 3, 3}, true, 571);
  auto packed = cpu::pack_quantized_weight(w, cpu::QGemmPath::Scalar);
  expect_error([&] { ops::quantized_conv2d(x, *packed, Tensor(), {.padding = 1}, 0.1, 0); },
               "quantized conv2d: the implicit form was forced but cannot run here (got the scalar path");
  // 3 channels with dilation_w 2: taps of 3 bytes, on no path (a 4-byte
  // group would straddle two taps; the padded rows are for dilation_w 1).
  Tensor x3 = random_activation({1, 3, 8, 8}, 0.05, 10, 573);
  Tensor w3 = random_weight({16, 3, 3, 3}, true, 572);
  auto packed3 = ops::pack_quantized_weight(w3);
  expect_error([&] { ops::quantized_conv2d(x3, *packed3, Tensor(), {.padding = 1, .dilation = {1, 2}}, 0.1, 0); },
               "quantized conv2d: the implicit form was forced but cannot run here");
}

TEST(QuantizedConv2dImplicit, DynamicMatchesTheGemmForm) {
  Tensor x = random_float({2, 32, 10, 10}, -1.5, 2.5, 580);
  Tensor w = random_weight({32, 32, 3, 3}, true, 581);
  Tensor b = random_float({32}, -1, 1, 582);
  int ran = 0;
  for (cpu::QGemmPath path :
       {cpu::QGemmPath::Amx, cpu::QGemmPath::Avx512Vnni, cpu::QGemmPath::AvxVnni, cpu::QGemmPath::Avx2}) {
    if (!has_path(path)) continue;
    auto packed = cpu::pack_quantized_weight(w, path);
    Tensor gemm, implicit;
    {
      const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Gemm);
      gemm = ops::quantized_conv2d_dynamic(x, *packed, b, {.padding = 1});
    }
    {
      const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Implicit);
      implicit = ops::quantized_conv2d_dynamic(x, *packed, b, {.padding = 1});
    }
    EXPECT_TRUE(implicit.is_contiguous()) << path_name(path);  // a float output stays NCHW
    EXPECT_EQ(floats(gemm), floats(implicit)) << path_name(path);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "this CPU has no AVX2: the implicit form never runs";
}

// A convolution's channels-last output fed to the next convolution (as in
// every int8 network) gives the bytes of its contiguous copy.
// The kernel takes an output in either layout its forms write, and names
// what is wrong with any other: rows that do not follow one another, or a
// channels-last output for the direct form, which stores NCHW planes.
TEST(QuantizedConv2d, KernelRejectsOutputsItCannotStore) {
  cpu::CpuQuantizedKernels kernels;
  Tensor x = random_activation({1, 16, 6, 6}, 0.05, 100, 600);
  auto packed = ops::pack_quantized_weight(random_weight({16, 16, 3, 3}, true, 601));
  const Conv2dParams p{.padding = 1};
  const Conv2dShape s = group_shape({1, 16, 6, 6}, {16, 16, 3, 3}, p);
  auto grid = [](Tensor t) {
    auto params = std::make_shared<QuantParams>();
    params->scales = {0.2};
    params->zero_points = {10};
    t.impl()->set_quant_params(std::move(params));
    return t;
  };
  // NCHW rows with a gap after each: a narrowed view of wider planes.
  Tensor gapped = grid(Tensor::empty({1, 16, 6, 8}, DType::UInt8).narrow(3, 0, 6));
  {
    const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Gemm);
    expect_error([&] { kernels.conv2d(gapped, x, *packed, Tensor(), p, s, false); },
                 "quantized conv2d: the output's rows must follow one another (NCHW or channels-last)");
    // NCHW output from the GEMM form: the same bytes as its channels-last one.
    Tensor nchw = grid(Tensor::empty({1, 16, 6, 6}, DType::UInt8));
    Tensor nhwc = grid(empty_channels_last({1, 16, 6, 6}, DType::UInt8));
    kernels.conv2d(nchw, x, *packed, Tensor(), p, s, false);
    kernels.conv2d(nhwc, x, *packed, Tensor(), p, s, false);
    EXPECT_EQ(ints<uint8_t>(nchw), ints<uint8_t>(nhwc));
  }
  if (cpu::direct_qconv_supported(cpu::qgemm_path(), p, s)) {
    const cpu::ForceQConvAlgorithm force(cpu::QConvAlgorithm::Direct);
    Tensor nhwc = grid(empty_channels_last({1, 16, 6, 6}, DType::UInt8));
    expect_error([&] { kernels.conv2d(nhwc, x, *packed, Tensor(), p, s, false); },
                 "quantized conv2d: the direct form writes NCHW planes");
  }
}

TEST(QuantizedConv2d, ChainsChannelsLastOutputs) {
  Tensor x = random_activation({2, 16, 10, 10}, 0.05, 100, 590);
  auto w1 = ops::pack_quantized_weight(random_weight({16, 16, 3, 3}, true, 591));
  auto w2 = ops::pack_quantized_weight(random_weight({32, 16, 3, 3}, true, 592));
  Tensor h = ops::quantized_conv2d(x, *w1, Tensor(), {.padding = 1}, 0.3, 10, true);
  EXPECT_TRUE(is_channels_last(h) && !h.is_contiguous());
  Tensor y = ops::quantized_conv2d(h, *w2, Tensor(), {.stride = 2, .padding = 1}, 0.4, 128);
  Tensor y_contiguous = ops::quantized_conv2d(h.contiguous(), *w2, Tensor(), {.stride = 2, .padding = 1}, 0.4, 128);
  EXPECT_EQ(ints<uint8_t>(y), ints<uint8_t>(y_contiguous));
}

TEST(QuantizedConv2d, UnbatchedAndStridedInputs) {
  Tensor w = random_weight({5, 3, 3, 3}, true, 40);
  Tensor b = random_float({5}, -1, 1, 41);
  auto packed = ops::pack_quantized_weight(w);
  Tensor x = random_activation({3, 9, 8}, 0.1, 30, 42);
  Tensor y = ops::quantized_conv2d(x, *packed, b, {.padding = 1}, 0.5, 64);
  ASSERT_EQ(y.shape(), (Shape{5, 9, 8}));
  Tensor batched = ops::quantized_conv2d(x.unsqueeze(0), *packed, b, {.padding = 1}, 0.5, 64);
  EXPECT_EQ(ints<uint8_t>(y), ints<uint8_t>(batched));
  // A channels-last input seen through NCHW strides.
  Tensor nhwc = random_activation({2, 9, 8, 3}, 0.1, 30, 43);
  Tensor strided = nhwc.permute({0, 3, 1, 2});
  Tensor ys = ops::quantized_conv2d(strided, *packed, b, {}, 0.5, 64);
  Tensor yc = ops::quantized_conv2d(strided.contiguous(), *packed, b, {}, 0.5, 64);
  EXPECT_EQ(ints<uint8_t>(ys), ints<uint8_t>(yc));
}

TEST(QuantizedConv2d, ThreadsGiveTheSameBytes) {
  expect_threads_agree({16, 8, 3, 3}, {8, 40, 40}, {.padding = 1}, 50);
}

TEST(QuantizedConv2d, CloseToFloatConvOfDequantizedOperands) {
  Tensor x = random_activation({2, 6, 10, 10}, 0.04, 60, 60);
  Tensor w = random_weight({8, 3, 3, 3}, true, 61);
  Tensor b = random_float({8}, -0.5, 0.5, 62);
  const Conv2dParams p{.stride = {1, 2}, .padding = 1, .groups = 2};
  const double out_scale = 0.03;
  const int64_t zy = 128;
  auto packed = ops::pack_quantized_weight(w);
  Tensor y = ops::dequantize(ops::quantized_conv2d(x, *packed, b, p, out_scale, zy));
  Tensor ref = ops::conv2d(ops::dequantize(x), ops::dequantize(w), b, p);
  ASSERT_EQ(y.shape(), ref.shape());
  const std::vector<float> got = floats(y), want = floats(ref);
  for (size_t i = 0; i < got.size(); ++i) {
    const double expected = std::clamp(double(want[i]), -double(zy) * out_scale, (255.0 - double(zy)) * out_scale);
    // Half an output step, and half a bias step (sx * sw, sw at most 2.48 / 127).
    EXPECT_NEAR(got[i], expected, out_scale * 0.5 + 0.5 * 0.04 * 2.48 / 127 + 1e-5) << "element " << i;
  }
}

// ---- dynamic conv2d -------------------------------------------------------------

TEST(QuantizedConv2dDynamic, MatchesReferenceOnEveryPath) {
  struct Case {
    Shape x, w;
    Conv2dParams p;
    bool bias, reduce_range;
  };
  const Case cases[] = {
      {{1, 3, 32, 32}, {6, 3, 5, 5}, {}, true, false},
      {{3, 4, 9, 8}, {6, 2, 3, 3}, {.stride = {2, 1}, .padding = 1, .groups = 2}, true, true},
      {{2, 5, 6, 6}, {3, 5, 1, 1}, {}, false, false},
  };
  uint64_t seed = 200;
  for (const Case& c : cases) {
    Tensor x = random_float(c.x, -1.5, 2.5, seed += 3);
    Tensor w = random_weight(c.w, true, seed + 1);
    Tensor b = c.bias ? random_float({c.w[0]}, -1, 1, seed + 2) : Tensor();
    const QParams qp = dynamic_reference_qparams(floats(x), c.reduce_range);
    Stage stage{true, qp.scale, channel_scales(w), c.bias ? floats(b) : std::vector<float>{}};
    const std::vector<double> want =
        conv_reference(quantize_reference(floats(x), qp), qp.zero_point, c.x, ints<int8_t>(w), c.w, c.p, stage);
    for (cpu::QGemmPath path : cpu::qgemm_paths_available()) {
      auto packed = cpu::pack_quantized_weight(w, path);
      Tensor y = ops::quantized_conv2d_dynamic(x, *packed, b, c.p, c.reduce_range);
      EXPECT_EQ(y.dtype(), DType::Float32);
      expect_same_floats(floats(y), want, "conv2d_dynamic path=" + path_name(path));
    }
  }
}

TEST(QuantizedConv2dDynamic, CloseToFloatConv) {
  Tensor x = random_float({2, 3, 12, 12}, -1.0, 1.0, 70);
  Tensor wf = random_float({4, 3, 3, 3}, -0.5, 0.5, 71);
  Tensor w = ops::quantize_per_channel(wf, std::vector<double>(4, 0.5 / 127), std::vector<int64_t>(4, 0), 0,
                                       DType::Int8);
  Tensor b = random_float({4}, -1, 1, 72);
  auto packed = ops::pack_quantized_weight(w);
  Tensor y = ops::quantized_conv2d_dynamic(x, *packed, b, {.padding = 1});
  Tensor ref = ops::conv2d(x, ops::dequantize(w), b, {.padding = 1});
  const std::vector<float> got = floats(y), want = floats(ref);
  // 27 taps, each input off by at most half a step (1/255 of the range 2), |w| <= 0.5.
  const double bound = 27 * 0.5 * (1.0 / 255);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], bound) << "element " << i;
}

// ---- add and cat ----------------------------------------------------------------

TEST(QuantizedAdd, MatchesAddValue) {
  for (DType dtype : {DType::UInt8, DType::Int8}) {
    const int64_t za = dtype == DType::UInt8 ? 100 : -10, zb = dtype == DType::UInt8 ? 30 : 5;
    const int64_t zo = dtype == DType::UInt8 ? 128 : 0;
    Tensor a = ops::quantize_per_tensor(random_float({2, 3, 5, 7}, -3, 3, 80), 0.03, za, dtype);
    Tensor b = ops::quantize_per_tensor(random_float({2, 3, 5, 7}, -2, 2, 81), 0.02, zb, dtype);
    const quant_math::QRange range = quant_math::qrange(dtype);
    for (bool relu : {false, true}) {
      Tensor y = ops::quantized_add(a, b, 0.035, zo, relu);
      ASSERT_TRUE(y.is_quantized());
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_EQ(y.shape(), a.shape());
      const std::vector<int32_t> qa = dtype == DType::UInt8 ? ints<uint8_t>(a) : ints<int8_t>(a);
      const std::vector<int32_t> qb = dtype == DType::UInt8 ? ints<uint8_t>(b) : ints<int8_t>(b);
      const std::vector<int32_t> got = dtype == DType::UInt8 ? ints<uint8_t>(y) : ints<int8_t>(y);
      std::vector<double> want;
      const float lo = relu ? float(std::max<int64_t>(range.lo, zo)) : float(range.lo);
      for (size_t i = 0; i < qa.size(); ++i) {
        want.push_back(quant_math::add_value(qa[i], int32_t(za), scale_as_float(0.03), qb[i], int32_t(zb),
                                             scale_as_float(0.02), 1.0f / scale_as_float(0.035), float(zo), lo,
                                             float(range.hi)));
      }
      expect_same_ints(got, want, std::string("add ") + std::string(dtype_name(dtype)) + " relu=" + std::to_string(relu));
    }
  }
}

TEST(QuantizedCat, RequantizesEachInputOntoTheOutputGrid) {
  Tensor a = random_activation({2, 3, 4}, 0.05, 10, 90);
  Tensor b = random_activation({2, 5, 4}, 0.02, 200, 91);
  Tensor c = random_activation({2, 1, 4}, 0.04, 128, 92);  // already on the output grid
  const double out_scale = 0.04;
  const int64_t zo = 128;
  for (int64_t dim : {1, -2}) {
    Tensor y = ops::quantized_cat({a, b, c}, dim, out_scale, zo);
    ASSERT_EQ(y.shape(), (Shape{2, 9, 4}));
    ASSERT_TRUE(y.is_quantized());
    EXPECT_EQ(ops::q_scale(y), out_scale);
    const std::vector<int32_t> got = ints<uint8_t>(y);
    const float inv = 1.0f / scale_as_float(out_scale);
    int64_t row0 = 0;
    for (const Tensor& t : {a, b, c}) {
      const std::vector<int32_t> q = ints<uint8_t>(t);
      const int64_t rows = t.size(1);
      for (int64_t n = 0; n < 2; ++n) {
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < 4; ++j) {
            const float real = quant_math::dequantize_value(q[(n * rows + r) * 4 + j], zero_point_of(t), scale_of(t));
            const int32_t want = int32_t(quant_math::quantize_value(real, inv, float(zo), 0.0f, 255.0f));
            EXPECT_EQ(got[(n * 9 + row0 + r) * 4 + j], want) << "input rows from " << row0 << ", n=" << n;
          }
        }
      }
      row0 += rows;
    }
  }
  // Along the last dim, and a tensor that contributes no elements.
  Tensor d = random_activation({2, 3, 0}, 0.05, 10, 93);
  Tensor e = random_activation({2, 3, 2}, 0.05, 10, 94);
  Tensor y = ops::quantized_cat({a, d, e}, 2, 0.05, 10);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 6}));
  EXPECT_EQ(ints<uint8_t>(y.narrow(2, 0, 4)), ints<uint8_t>(a));
  EXPECT_EQ(ints<uint8_t>(y.narrow(2, 4, 2)), ints<uint8_t>(e));
}

// ---- errors ---------------------------------------------------------------------

TEST(QuantizedOpsErrors, PackQuantizedWeight) {
  Tensor wf = random_float({4, 6}, -1, 1, 1);
  expect_error([&] { ops::pack_quantized_weight(wf); },
               "pack_quantized_weight: expected a quantized qint8 weight, got a float32 tensor");
  expect_error([&] { ops::pack_quantized_weight(ops::quantize_per_tensor(wf, 0.01, 0, DType::UInt8)); },
               "pack_quantized_weight: expected a qint8 weight, got quint8");
  expect_error([&] { ops::pack_quantized_weight(ops::quantize_per_tensor(wf, 0.01, 3, DType::Int8)); },
               "pack_quantized_weight: the weight must be symmetric (zero point 0), got zero point 3");
  expect_error([&] {
    ops::pack_quantized_weight(ops::quantize_per_channel(wf, {0.1, 0.1, 0.1, 0.1}, {0, 0, 2, 0}, 0, DType::Int8));
  }, "got zero point 2 at channel 2");
  expect_error([&] {
    ops::pack_quantized_weight(ops::quantize_per_channel(wf, std::vector<double>(6, 0.1), std::vector<int64_t>(6, 0),
                                                         1, DType::Int8));
  }, "pack_quantized_weight: a per-channel weight must be quantized along dim 0 (output channels), got axis 1");
  expect_error([&] { ops::pack_quantized_weight(ops::quantize_per_tensor(random_float({4, 2, 3}, -1, 1, 2), 0.1, 0, DType::Int8)); },
               "pack_quantized_weight: expected a 2-d (N, K) linear or 4-d (O, C/groups, kh, kw) conv weight, got shape [4, 2, 3]");
}

TEST(QuantizedOpsErrors, Linear) {
  auto packed = ops::pack_quantized_weight(random_weight({4, 6}, true, 3));
  auto conv_packed = ops::pack_quantized_weight(random_weight({4, 2, 3, 3}, true, 4));
  Tensor x = random_activation({2, 6}, 0.1, 10, 5);
  Tensor xf = random_float({2, 6}, -1, 1, 6);
  expect_error([&] { ops::quantized_linear(xf, *packed, Tensor(), 0.1, 0); },
               "quantized linear: expected a quantized quint8 input, got a float32 tensor");
  expect_error([&] { ops::quantized_linear(ops::quantize_per_tensor(xf, 0.1, 0, DType::Int8), *packed, Tensor(), 0.1, 0); },
               "quantized linear: expected a quint8 input, got qint8 (quantized per tensor) (activations are quint8");
  expect_error([&] {
    ops::quantized_linear(ops::quantize_per_channel(xf, {0.1, 0.2}, {0, 0}, 0, DType::UInt8), *packed, Tensor(), 0.1, 0);
  }, "quantized linear: expected an input quantized per tensor, got one quantized per channel along dim 0");
  expect_error([&] { ops::quantized_linear(random_activation({2, 5}, 0.1, 10, 7), *packed, Tensor(), 0.1, 0); },
               "quantized linear: input of shape [2, 5] does not end in 6, the in_features of weight [4, 6]");
  expect_error([&] { ops::quantized_linear(x, *conv_packed, Tensor(), 0.1, 0); },
               "quantized linear: expected a weight packed from a 2-d (N, K) linear weight, got shape [4, 2, 3, 3]");
  expect_error([&] { ops::quantized_linear(x, *packed, random_float({5}, 0, 1, 8), 0.1, 0); },
               "quantized linear: bias must have shape [4], got [5]");
  expect_error([&] { ops::quantized_linear(x, *packed, random_float({4}, 0, 1, 8).to(DType::Float64), 0.1, 0); },
               "quantized linear: expected a float32 bias (quantized inside the op), got float64");
  expect_error([&] { ops::quantized_linear(x, *packed, Tensor(), 0.0, 0); },
               "quantized linear: output scale must be positive and finite in float32, got 0");
  expect_error([&] { ops::quantized_linear(x, *packed, Tensor(), 0.1, 256); },
               "quantized linear: output zero point 256 is outside the quint8 range [0, 255]");
  // The dynamic form takes float.
  expect_error([&] { ops::quantized_linear_dynamic(x, *packed, Tensor()); },
               "quantized linear_dynamic: expected a float32 input, got a quint8 (quantized per tensor) tensor; the "
               "dynamic form quantizes its input itself");
  expect_error([&] { ops::quantized_linear_dynamic(xf.to(DType::Float64), *packed, Tensor()); },
               "quantized linear_dynamic: expected a float32 input, got float64");
  expect_error([&] { ops::quantized_linear_dynamic(random_float({2, 7}, 0, 1, 9), *packed, Tensor()); },
               "quantized linear_dynamic: input of shape [2, 7] does not end in 6");
}

TEST(QuantizedOpsErrors, Conv2d) {
  auto packed = ops::pack_quantized_weight(random_weight({4, 2, 3, 3}, true, 10));
  auto linear_packed = ops::pack_quantized_weight(random_weight({4, 6}, true, 11));
  Tensor x = random_activation({1, 2, 5, 5}, 0.1, 10, 12);
  Tensor xf = random_float({1, 2, 5, 5}, -1, 1, 13);
  expect_error([&] { ops::quantized_conv2d(xf, *packed, Tensor(), {}, 0.1, 0); },
               "quantized conv2d: expected a quantized quint8 input, got a float32 tensor");
  expect_error([&] { ops::quantized_conv2d(ops::quantize_per_tensor(xf, 0.1, 0, DType::Int8), *packed, Tensor(), {}, 0.1, 0); },
               "quantized conv2d: expected a quint8 input, got qint8");
  expect_error([&] { ops::quantized_conv2d(x, *linear_packed, Tensor(), {}, 0.1, 0); },
               "quantized conv2d: expected a weight packed from a 4-d (O, C/groups, kh, kw) conv weight, got shape [4, 6]");
  expect_error([&] { ops::quantized_conv2d(random_activation({1, 3, 5, 5}, 0.1, 10, 14), *packed, Tensor(), {}, 0.1, 0); },
               "quantized conv2d: input of shape [1, 3, 5, 5] has 3 channels, but weight of shape [4, 2, 3, 3] with "
               "groups=1 expects 2 * 1 = 2");
  expect_error([&] { ops::quantized_conv2d(random_activation({1, 6, 5, 5}, 0.1, 10, 15), *packed, Tensor(), {.groups = 3}, 0.1, 0); },
               "not divisible by groups=3");
  expect_error([&] { ops::quantized_conv2d(random_activation({2, 5, 5}, 0.1, 10, 16).unsqueeze(0).unsqueeze(0), *packed, Tensor(), {}, 0.1, 0); },
               "quantized conv2d: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape [1, 1, 2, 5, 5]");
  expect_error(
      [&] {
        ops::quantized_conv2d(x, *packed, Tensor(), {.stride = {0, 1}}, 0.1, 0);
      },
      "quantized conv2d: stride must be positive, got 0 x 1");
  expect_error(
      [&] {
        ops::quantized_conv2d(x, *packed, Tensor(), {.dilation = {3, 1}}, 0.1, 0);
      },
      "quantized conv2d: kernel 3 x 3 with dilation 3 x 1 spans 7 x 3, more than the padded input 5 x 5");
  expect_error([&] { ops::quantized_conv2d(x, *packed, random_float({3}, 0, 1, 17), {}, 0.1, 0); },
               "quantized conv2d: bias must have shape [4], got [3]");
  expect_error([&] { ops::quantized_conv2d(x, *packed, Tensor(), {}, -1.0, 0); },
               "quantized conv2d: output scale must be positive and finite in float32, got -1");
  expect_error([&] { ops::quantized_conv2d_dynamic(x, *packed, Tensor(), {}); },
               "quantized conv2d_dynamic: expected a float32 input, got a quint8 (quantized per tensor) tensor");
}

TEST(QuantizedOpsErrors, AddAndCat) {
  Tensor a = random_activation({2, 3}, 0.1, 10, 20);
  Tensor b = random_activation({2, 3}, 0.2, 20, 21);
  Tensor af = random_float({2, 3}, -1, 1, 22);
  Tensor s8 = ops::quantize_per_tensor(af, 0.1, 0, DType::Int8);
  expect_error([&] { ops::quantized_add(a, af, 0.1, 0); },
               "quantized add: expected two quantized tensors, got quint8 (quantized per tensor) and float32");
  expect_error([&] { ops::quantized_add(a, s8, 0.1, 0); },
               "quantized add: expected a and b of one dtype, got quint8 (quantized per tensor) and qint8 (quantized per tensor)");
  expect_error([&] { ops::quantized_add(a, random_activation({3, 2}, 0.1, 10, 23), 0.1, 0); },
               "quantized add: expected a and b of one shape, got [2, 3] and [3, 2]");
  expect_error([&] { ops::quantized_add(a, b, 0.1, -1); },
               "quantized add: output zero point -1 is outside the quint8 range [0, 255]");
  expect_error([&] { ops::quantized_add(s8, s8, 0.1, 128); },
               "quantized add: output zero point 128 is outside the qint8 range [-128, 127]");
  expect_error([&] { ops::quantized_cat({}, 0, 0.1, 0); }, "quantized cat: expected a non-empty list of tensors");
  expect_error([&] { ops::quantized_cat({a, af}, 0, 0.1, 0); },
               "quantized cat: expected quantized tensors, got a float32 tensor (tensor 1)");
  expect_error([&] { ops::quantized_cat({a, s8}, 0, 0.1, 0); },
               "quantized cat: expected tensors of one dtype, got quint8 (quantized per tensor) (tensor 0) and qint8 "
               "(quantized per tensor) (tensor 1)");
  expect_error([&] { ops::quantized_cat({a, random_activation({2, 4}, 0.1, 10, 24)}, 0, 0.1, 0); },
               "quantized cat: sizes must match except in dim 0; got [2, 3] (tensor 0) and [2, 4] (tensor 1) at dim 1");
  expect_error([&] { ops::quantized_cat({a, b}, 2, 0.1, 0); }, "quantized cat");
}

TEST(QuantizedOpsCuda, NotSupportedOnCuda) {
#ifdef KILN_WITH_CUDA
  if (!cuda::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine (cuda::device_count() == 0)";
  auto packed = ops::pack_quantized_weight(random_weight({4, 6}, true, 30));
  Tensor x = random_activation({2, 6}, 0.1, 10, 31).to(cuda_device(0));
  ASSERT_TRUE(x.is_quantized()) << "to() should keep the quantization params";
  expect_error([&] { ops::quantized_add(x, x, 0.1, 0); }, "quantized add: quantized kernels are not supported on cuda:0");
  expect_error([&] { ops::quantized_linear_dynamic(random_float({2, 6}, 0, 1, 32).to(cuda_device(0)), *packed, Tensor()); },
               "quantized linear_dynamic: input is on cuda:0 but the weight on cpu");
  expect_error([&] { ops::pack_quantized_weight(random_weight({4, 6}, true, 33).to(cuda_device(0))); },
               "pack_quantized_weight: quantized kernels are not supported on cuda:0");
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace kiln
