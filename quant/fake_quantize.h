// Fake quantization: float values rounded onto a quantization grid and
// back, so that a float model computes what its int8 conversion will, while
// gradients still flow (quantization-aware training), as
// torch.fake_quantize_per_tensor_affine and torch.ao's FakeQuantize.
//
//   Tensor y = quant::fake_quantize(x, 0.05, 128, 0, 255);      // y = dequantize(quantize(x))
//   auto fq = std::make_shared<quant::FakeQuantize>(std::make_shared<quant::MovingAverageMinMaxObserver>());
//   Tensor a = (*fq)(x);   // observes x, then fake-quantizes it with the observer's grid
//
// The forward of every op here is, element by element,
//   q = quantize_value(x, 1/scale, zero_point, quant_min, quant_max)
//   y = dequantize_value(q, zero_point, scale)
// from tensor/quant_math.h (Note [Quantization arithmetic]), on float32
// with scale = float(scale): exactly what ops::quantize_per_tensor followed
// by ops::dequantize computes, bit for bit, ties (x * inv_scale = k + 0.5,
// to even), saturation and NaN (to quant_min) included. A converted int8
// model runs the same arithmetic, so a fake-quantized model and its
// conversion agree to the bit where every rounding point is fake-quantized
// with the scales the converted model uses; the prepared layers of
// quant/fake_quant_modules.h make sure of the rest (Note [Bit-exact fake
// quantization] there).
// Inputs of another floating dtype are converted to float32, fake-quantized
// and converted back: float64 outputs hold the float32 results exactly;
// float16 and bfloat16 ones are those rounded to 16 bits, so they can lie
// off the grid (QAT in float32, or convert the result before comparing).
// CUDA inputs are computed on the CPU and copied back (correct, not fast).
//
// The gradient is the straight-through estimator: dL/dx = dL/dy where the
// unclamped value nearbyint(x / scale) + zero_point lies in
// [quant_min, quant_max], 0 elsewhere (and at NaN), as torch's cachemask
// kernels. It is not the derivative of the forward (which is 0 almost
// everywhere), so gradcheck does not apply; the tests check the mask.
//
// A per-tensor fake-quantized result carries QuantParams (tensor/tensor.h):
// a float tensor with QuantParams means "these values lie on this grid";
// relu, max pooling and views keep them, and the fake-quantized modules of
// quant/ read their input's grid from them (the input scale of a conv, the
// scales of a residual add). Per-channel results carry none.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/module.h"
#include "quant/observer.h"
#include "tensor/tensor.h"

namespace kiln::quant {

// ---- the ops (differentiable; quant/fake_quantize.cpp) ----

// y = dequantize(quantize(x)) on one grid. Requires x floating, scale > 0
// and finite, quant_min <= zero_point <= quant_max (within int32).
// Result: x's shape and dtype, contiguous, carrying the per-tensor
// QuantParams {scale, zero_point}.
Tensor fake_quantize(const Tensor& x, double scale, int64_t zero_point, int64_t quant_min, int64_t quant_max);

// One grid per index of dim `axis` (negative counts from the end): scales
// and zero_points hold x.size(axis) values each.
Tensor fake_quantize_per_channel(const Tensor& x, const std::vector<double>& scales,
                                 const std::vector<int64_t>& zero_points, int64_t axis, int64_t quant_min,
                                 int64_t quant_max);

// The grid an observer chose: per tensor or per channel as qparams says.
Tensor fake_quantize(const Tensor& x, const QParams& qparams);

// Learned Step Size Quantization (LSQ, Esser et al.): scale and zero_point
// are float32 tensors of one element that receive gradients, as torch's
// _fake_quantize_learnable_per_tensor_affine:
// - forward: fake_quantize(x, scale, clamp(nearbyint(zero_point)), ...);
// - dL/dx: the straight-through mask (with q = nearbyint(zp + x / scale));
// - dL/dscale, summed over elements and times grad_factor:
//     inside the range  dy * (fake_quantized(x) - x) / scale
//     below / above     dy * (quant_min - zp) / dy * (quant_max - zp)
// - dL/dzero_point: -dy * scale outside the range, 0 inside, times grad_factor;
// where the backward's zp is int(clamp(zero_point + 0.5)) as torch 1.13's
// (which rounds half up where its forward rounds half to even). The
// gradients are computed in float32 and summed in double; they are not
// themselves differentiable.
Tensor fake_quantize_learnable(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t quant_min,
                               int64_t quant_max, double grad_factor = 1.0);
// Per channel along `axis`: scale and zero_point of x.size(axis) elements;
// zp is nearbyint + clamp in the forward and backward both (as torch's
// _fake_quantize_learnable_per_channel_affine).
Tensor fake_quantize_learnable_per_channel(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                           int64_t axis, int64_t quant_min, int64_t quant_max,
                                           double grad_factor = 1.0);

// ---- the module (quant/fake_quantize_module.cpp) ----

struct FakeQuantizeOptions {
  // scale and zero_point are Parameters trained by LSQ
  // (fake_quantize_learnable) instead of buffers the observer sets, as
  // torch's _LearnableFakeQuantize; the observer (while enabled) still
  // overwrites them on every forward, so disable it once they should learn.
  bool learnable = false;
  // LSQ's gradient scale 1 / sqrt(x.numel() * quant_max); 1 without it.
  bool use_grad_scaling = false;
};

// An observer and the fake quantization it feeds, as torch.ao's
// FakeQuantize: forward(x)
//   1. if the observer is enabled: observe x, and set scale and zero_point
//      from its calculate_qparams();
//   2. if fake quantization is enabled: return fake_quantize(x) on that
//      grid (per channel along the observer's ch_axis for a per-channel
//      observer), a per-tensor result carrying its QuantParams (Note
//      [Bit-exact fake quantization]); else return x itself.
// Both are enabled at construction. QAT freezes the grid by disabling the
// observer after some epochs.
//
// State (torch's names): submodule "activation_post_process" (the
// observer), buffers "fake_quant_enabled" and "observer_enabled" (uint8,
// (1)), and "scale" (float32) and "zero_point" (int32) of shape (1), or
// (C) once a per-channel observer has run; with `learnable`, "scale" and
// "zero_point" are float32 parameters. load_state_dict resizes scale and
// zero_point to the saved shape.
class FakeQuantize : public nn::Module {
 public:
  explicit FakeQuantize(std::shared_ptr<Observer> observer, FakeQuantizeOptions options = {});

  Tensor forward(const Tensor& x) override;

  void enable_observer(bool enabled = true);
  void disable_observer() { enable_observer(false); }
  bool is_observer_enabled() const;
  void enable_fake_quant(bool enabled = true);
  void disable_fake_quant() { enable_fake_quant(false); }
  bool is_fake_quant_enabled() const;

  // The observer's choice now (Observer::calculate_qparams).
  QParams calculate_qparams() const;
  // The grid forward fake-quantizes with: scale and zero_point as they
  // stand (a learnable zero point rounded as the forward rounds it). This
  // is what convert() gives the quantized module, so that it computes what
  // this module did.
  QParams qparams() const;
  // The observer has seen data (or its statistics were loaded).
  bool has_statistics() const { return activation_post_process->has_statistics(); }

  // "fake_quant_enabled=True, observer_enabled=True, quant_min=0, quant_max=255, dtype=torch.quint8, ..."
  std::string extra_repr() const override;

  const FakeQuantizeOptions options;
  std::shared_ptr<Observer> activation_post_process;
  Tensor scale;
  Tensor zero_point;

 private:
  // Sets scale and zero_point (resizing them for per-channel) from qp.
  void set_qparams(const QParams& qp);
  // The per-channel axis of x for the observer's ch_axis.
  int64_t channel_axis(const Tensor& x) const;

  Tensor fake_quant_enabled_;
  Tensor observer_enabled_;
};

}  // namespace kiln::quant
