// The fake-quantization ops: one pass over the elements per call (QAT runs
// one per activation and weight), and their gradients (Note [Bit-exact fake
// quantization] in fake_quantize.h).
#include "quant/fake_quantize.h"

#include <algorithm>
#include <any>
#include <cmath>
#include <string>
#include <utility>

#include "autograd/custom_function.h"
#include "autograd/ops.h"
#include "quant/fake_quantize_kernel.h"
#include "tensor/cpu/cpu_features.h"
#include "tensor/factory.h"
#include "tensor/quant_math.h"

namespace kiln::quant {

using autograd::AutogradContext;
using autograd::TensorList;

namespace {

// Below this many elements one thread does the whole pass.
constexpr int64_t kGrain = int64_t{1} << 15;

// One grid per channel (a per-tensor grid is one channel); x is seen as
// (outer, channels, inner), contiguous.
struct Grid {
  std::vector<float> scales;       // float32 scales (scale_as_float)
  std::vector<float> inv_scales;   // 1 / scale in float32 (inverse_scale)
  std::vector<int32_t> zero_points;
  float lo = 0, hi = 0;            // quant_min, quant_max
  int64_t axis = -1;               // -1: per tensor
};

struct Layout {
  int64_t outer = 1, channels = 1, inner = 1;
};

Layout layout_of(const Tensor& x, int64_t axis) {
  Layout l;
  if (axis < 0) {
    l.inner = x.numel();
    return l;
  }
  l.channels = x.size(axis);
  for (int64_t d = 0; d < axis; ++d) l.outer *= x.size(d);
  for (int64_t d = axis + 1; d < x.dim(); ++d) l.inner *= x.size(d);
  return l;
}

void check_range(std::string_view op, int64_t quant_min, int64_t quant_max) {
  KILN_CHECK(quant_min <= quant_max, op, ": quant_min (", quant_min, ") must not exceed quant_max (", quant_max, ")");
  KILN_CHECK(quant_min >= INT32_MIN && quant_max <= INT32_MAX, op, ": the range [", quant_min, ", ", quant_max,
             "] does not fit int32");
}

void check_input(std::string_view op, const Tensor& x) {
  KILN_CHECK(x.defined(), op, ": the input is undefined");
  KILN_CHECK(x.is_floating_point(), op, ": expects a floating input, got ", x.dtype(),
             x.is_quantized() ? " (a quantized tensor; fake quantization takes the float values)" : "");
}

int64_t checked_axis(std::string_view op, const Tensor& x, int64_t axis) {
  KILN_CHECK(x.dim() >= 1 && axis >= -x.dim() && axis < x.dim(), op, ": axis ", axis,
             " is out of range for an input of shape ", x.shape());
  return axis < 0 ? axis + x.dim() : axis;
}

// The grid for scales and zero points, checked (naming `op`).
Grid make_grid(std::string_view op, const std::vector<double>& scales, const std::vector<int64_t>& zero_points,
               int64_t quant_min, int64_t quant_max) {
  check_range(op, quant_min, quant_max);
  Grid g;
  g.lo = static_cast<float>(quant_min);
  g.hi = static_cast<float>(quant_max);
  for (size_t c = 0; c < scales.size(); ++c) {
    const float s = quant_math::scale_as_float(scales[c]);
    KILN_CHECK(s > 0 && std::isfinite(s), op, ": scale must be positive and finite, got ", scales[c],
               scales.size() > 1 ? " (channel " + std::to_string(c) + ")" : std::string());
    KILN_CHECK(zero_points[c] >= quant_min && zero_points[c] <= quant_max, op, ": zero_point ", zero_points[c],
               scales.size() > 1 ? " (channel " + std::to_string(c) + ")" : std::string(), " is outside [", quant_min,
               ", ", quant_max, "]");
    g.scales.push_back(s);
    g.inv_scales.push_back(quant_math::inverse_scale(s));
    g.zero_points.push_back(static_cast<int32_t>(zero_points[c]));
  }
  return g;
}

// out = dequantize(quantize(x)) and, when mask is given, the straight-through
// mask. x, out: (outer, channels, inner) float32; mask: same, bool.
void fake_quantize_kernel(const float* x, float* out, bool* mask, const Layout& l, const Grid& g) {
  static const bool avx2 = cpu::simd_level() >= cpu::SimdLevel::Avx2;  // KILN_SIMD=scalar runs the baseline loop
  auto run = [](const detail::FakeQuantizeArgs& a, int64_t begin, int64_t end) {
    if (avx2) {
      detail::fake_quantize_rows_avx2(a, begin, end);
    } else {
      detail::fake_quantize_rows(a, begin, end);
    }
  };
  const detail::FakeQuantizeArgs args{x, out, mask, l.outer * l.channels, l.inner, l.channels, g.scales.data(),
                                      g.inv_scales.data(), g.zero_points.data(), g.lo, g.hi};
  if (l.channels > 1) {
#pragma omp parallel for if (args.rows * l.inner > kGrain && args.rows > 1)
    for (int64_t row = 0; row < args.rows; ++row) run(args, row, row + 1);
    return;
  }
  // One grid: the elements are one long row, cut in blocks for the threads.
  const int64_t total = args.rows * args.inner;
  const int64_t blocks = (total + kGrain - 1) / kGrain;
#pragma omp parallel for if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    detail::FakeQuantizeArgs block = args;
    const int64_t start = b * kGrain;
    block.x += start;
    block.out += start;
    if (block.mask != nullptr) block.mask += start;
    block.rows = 1;
    block.inner = std::min(kGrain, total - start);
    run(block, 0, 1);
  }
}

struct FakeQuantizeFunction : autograd::Function<FakeQuantizeFunction> {
  // x: any shape; returns x's shape and dtype.
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Grid& grid) {
    const Device device = x.device();
    Tensor xf = x.to(DType::Float32, kCPU).contiguous();
    Tensor out = empty(x.shape(), DType::Float32);
    Tensor mask;
    if (ctx->needs_input_grad(0)) mask = empty(x.shape(), DType::Bool);
    const Layout l = layout_of(xf, grid.axis);
    if (x.numel() > 0) {
      fake_quantize_kernel(xf.data<float>(), out.data<float>(), mask.defined() ? mask.data<bool>() : nullptr, l, grid);
    }
    if (mask.defined()) ctx->save_for_backward({mask.to(device)});
    return out.to(x.dtype(), device);
  }
  static TensorList backward(AutogradContext* ctx, const TensorList& grads) {
    Tensor mask = ctx->get_saved_variables()[0];
    // where() is differentiable, so the backward is too (its own gradient
    // is the same mask).
    return {kiln::where(mask, grads[0], 0.0), Tensor()};
  }
};

// ---- learnable (LSQ) ------------------------------------------------------------

struct LearnableSettings {
  int64_t axis = -1;  // -1: per tensor
  float lo = 0, hi = 0;
  double grad_factor = 1.0;
};

// The float32 values of a 1-d float tensor.
std::vector<float> float_values(const Tensor& t) {
  Tensor f = t.detach().to(DType::Float32, kCPU).contiguous();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

void check_learnable(std::string_view op, const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                     int64_t channels) {
  check_input(op, x);
  KILN_CHECK(scale.defined() && zero_point.defined() && scale.is_floating_point() && zero_point.is_floating_point(),
             op, ": scale and zero_point must be floating tensors");
  KILN_CHECK(scale.dim() <= 1 && scale.numel() == channels && zero_point.dim() <= 1 && zero_point.numel() == channels,
             op, ": scale and zero_point must hold ", channels, " value(s), got shapes ", scale.shape(), " and ",
             zero_point.shape());
}

struct LearnableFunction : autograd::Function<LearnableFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                        const LearnableSettings& s) {
    const char* op = s.axis < 0 ? "fake_quantize_learnable" : "fake_quantize_learnable_per_channel";
    std::vector<float> scales = float_values(scale), zps = float_values(zero_point);
    std::vector<double> scales_d(scales.begin(), scales.end());
    std::vector<int64_t> zps_forward;
    for (float z : zps) {
      zps_forward.push_back(static_cast<int64_t>(std::min(std::max(std::nearbyint(z), s.lo), s.hi)));
    }
    Grid grid = make_grid(op, scales_d, zps_forward, static_cast<int64_t>(s.lo), static_cast<int64_t>(s.hi));
    grid.axis = s.axis;
    Tensor xf = x.to(DType::Float32, kCPU).contiguous();
    Tensor out = empty(x.shape(), DType::Float32);
    if (x.numel() > 0) fake_quantize_kernel(xf.data<float>(), out.data<float>(), nullptr, layout_of(xf, s.axis), grid);
    ctx->save_for_backward({x, scale, zero_point});
    ctx->saved_data["settings"] = s;
    return out.to(x.dtype(), x.device());
  }

  // torch's _fake_quantize_grad_learnable kernels, element by element in
  // float32; the scale and zero-point gradients are summed per channel in
  // double.
  static TensorList backward(AutogradContext* ctx, const TensorList& grads) {
    TensorList saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    const auto s = std::any_cast<LearnableSettings>(ctx->saved_data["settings"]);
    std::vector<float> scales = float_values(saved[1]), zps = float_values(saved[2]);
    Tensor xf = x.detach().to(DType::Float32, kCPU).contiguous();
    Tensor gf = grads[0].detach().to(DType::Float32, kCPU).contiguous();
    Tensor dx = empty(x.shape(), DType::Float32);
    const Layout l = layout_of(xf, s.axis);
    const int64_t rows = l.outer * l.channels;
    std::vector<double> dscale_rows(rows, 0.0), dzp_rows(rows, 0.0);
    const float* xp = xf.data<float>();
    const float* gp = gf.data<float>();
    float* dxp = dx.data<float>();
    const auto factor = static_cast<float>(s.grad_factor);
#pragma omp parallel for if (x.numel() > kGrain && rows > 1)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t c = row % l.channels;
      const float scale = scales[c], inv = 1.0f / scale;
      // Per tensor, torch's backward rounds the zero point half up
      // (int(clamp(zp + 0.5))); per channel, to even as its forward.
      const float zp_rounded = s.axis < 0 ? std::min(std::max(zps[c] + 0.5f, s.lo), s.hi)
                                          : std::min(std::max(std::nearbyint(zps[c]), s.lo), s.hi);
      const auto zp = static_cast<float>(static_cast<int64_t>(zp_rounded));
      const float below = s.lo - zp, above = s.hi - zp;
      double dscale = 0.0, dzp = 0.0;
      for (int64_t i = row * l.inner; i < (row + 1) * l.inner; ++i) {
        const float q = std::nearbyint(zp + xp[i] * inv);
        const float dy = gp[i];
        if (q < s.lo || q > s.hi) {
          dxp[i] = 0.0f;
          dzp += dy * -scale * factor;
          dscale += (q < s.lo ? dy * below : dy * above) * factor;
        } else {
          dxp[i] = dy;
          const float fake = (q - zp) * scale;
          dscale += dy * (fake - xp[i]) * inv * factor;
        }
      }
      dscale_rows[row] = dscale;
      dzp_rows[row] = dzp;
    }
    std::vector<float> dscale(l.channels, 0.0f), dzp(l.channels, 0.0f);
    std::vector<double> dscale_sum(l.channels, 0.0), dzp_sum(l.channels, 0.0);
    for (int64_t row = 0; row < rows; ++row) {
      dscale_sum[row % l.channels] += dscale_rows[row];
      dzp_sum[row % l.channels] += dzp_rows[row];
    }
    for (int64_t c = 0; c < l.channels; ++c) {
      dscale[c] = static_cast<float>(dscale_sum[c]);
      dzp[c] = static_cast<float>(dzp_sum[c]);
    }
    const Tensor& scale_t = saved[1];
    const Tensor& zp_t = saved[2];
    Tensor dscale_t = from_vector<float>(dscale, scale_t.shape()).to(scale_t.dtype(), scale_t.device());
    Tensor dzp_t = from_vector<float>(dzp, zp_t.shape()).to(zp_t.dtype(), zp_t.device());
    return {ctx->needs_input_grad(0) ? dx.to(x.dtype(), x.device()) : Tensor(),
            ctx->needs_input_grad(1) ? dscale_t : Tensor(), ctx->needs_input_grad(2) ? dzp_t : Tensor(), Tensor()};
  }
};

std::shared_ptr<const QuantParams> per_tensor_params(double scale, int64_t zero_point) {
  auto p = std::make_shared<QuantParams>();
  p->scales = {scale};
  p->zero_points = {zero_point};
  return p;
}

}  // namespace

Tensor fake_quantize(const Tensor& x, double scale, int64_t zero_point, int64_t quant_min, int64_t quant_max) {
  check_input("fake_quantize", x);
  Grid grid = make_grid("fake_quantize", {scale}, {zero_point}, quant_min, quant_max);
  Tensor out = FakeQuantizeFunction::apply(x, grid);
  out.impl()->set_quant_params(per_tensor_params(grid.scales[0], zero_point));
  return out;
}

Tensor fake_quantize_per_channel(const Tensor& x, const std::vector<double>& scales,
                                 const std::vector<int64_t>& zero_points, int64_t axis, int64_t quant_min,
                                 int64_t quant_max) {
  constexpr const char* op = "fake_quantize_per_channel";
  check_input(op, x);
  const int64_t dim = checked_axis(op, x, axis);
  KILN_CHECK(static_cast<int64_t>(scales.size()) == x.size(dim) &&
                 static_cast<int64_t>(zero_points.size()) == x.size(dim),
             op, ": ", scales.size(), " scales and ", zero_points.size(), " zero points for ", x.size(dim),
             " channels (dim ", dim, " of shape ", x.shape(), ")");
  Grid grid = make_grid(op, scales, zero_points, quant_min, quant_max);
  grid.axis = dim;
  return FakeQuantizeFunction::apply(x, grid);
}

Tensor fake_quantize(const Tensor& x, const QParams& qparams) {
  if (qparams.per_channel) {
    return fake_quantize_per_channel(x, qparams.scales, qparams.zero_points, qparams.axis, qparams.quant_min,
                                     qparams.quant_max);
  }
  KILN_CHECK(qparams.scales.size() == 1 && qparams.zero_points.size() == 1, "fake_quantize: per-tensor qparams hold ",
             qparams.scales.size(), " scales and ", qparams.zero_points.size(), " zero points; expected one each");
  return fake_quantize(x, qparams.scales[0], qparams.zero_points[0], qparams.quant_min, qparams.quant_max);
}

Tensor fake_quantize_learnable(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t quant_min,
                               int64_t quant_max, double grad_factor) {
  constexpr const char* op = "fake_quantize_learnable";
  check_learnable(op, x, scale, zero_point, 1);
  check_range(op, quant_min, quant_max);
  LearnableSettings s{-1, static_cast<float>(quant_min), static_cast<float>(quant_max), grad_factor};
  Tensor out = LearnableFunction::apply(x, scale, zero_point, s);
  const float z = float_values(zero_point)[0];
  const auto zp = static_cast<int64_t>(std::min(std::max(std::nearbyint(z), s.lo), s.hi));
  out.impl()->set_quant_params(per_tensor_params(float_values(scale)[0], zp));
  return out;
}

Tensor fake_quantize_learnable_per_channel(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                           int64_t axis, int64_t quant_min, int64_t quant_max, double grad_factor) {
  constexpr const char* op = "fake_quantize_learnable_per_channel";
  check_input(op, x);
  const int64_t dim = checked_axis(op, x, axis);
  check_learnable(op, x, scale, zero_point, x.size(dim));
  check_range(op, quant_min, quant_max);
  LearnableSettings s{dim, static_cast<float>(quant_min), static_cast<float>(quant_max), grad_factor};
  return LearnableFunction::apply(x, scale, zero_point, s);
}

}  // namespace kiln::quant
