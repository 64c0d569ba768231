// The functional forms of the composite layers, as torch.nn.functional (and
// torch's rnn_*_cell, lstm_cell, gru_cell): group and instance norm, conv1d,
// pixel shuffle, padding, interpolation and the recurrent cells. Call them
// through the usual alias:
//
//   namespace F = kiln::nn::functional;
//   Tensor y = F::group_norm(x, /*num_groups=*/4, gamma, beta);   // x: (N, 16, H, W)
//   Tensor h = F::gru_cell(x, h, w_ih, w_hh, b_ih, b_hh);
//   Tensor p = F::pad(x, {1, 1, 2, 0}, F::PadMode::Reflect);
//   Tensor u = F::interpolate(x, {.scale_factor = {2}, .mode = F::InterpolateMode::Bilinear});
//
// Note [Composite layers]
// Every function here, and the layers of nn/group_norm.h, instance_norm.h,
// conv1d.h, pixel_shuffle.h, padding.h, upsampling.h, rnn_cell.h and
// recurrent.h built on them, is written only with differentiable kiln::
// functions (autograd/ops.h) and the other functional ops
// (nn/functional.h): reshape and permute, the fused layer_norm and
// batch_norm, conv2d, linear, sigmoid, tanh, stack, cat, dropout,
// index_select (constant padding is the one exception, below). That is what PyTorch calls CompositeImplicitAutograd: no
// backward is written, so the gradient is the chain rule through ops that
// are each tested against finite differences, it is differentiable to any
// order where they are, and every device and autocast rule the parts have
// the composite has too; a new backend gets these layers for free.
// The price is speed where a fused kernel would avoid intermediates (a
// GRU step is a dozen small ops instead of one; cuDNN's RNN fuses whole
// layers). The choices that keep it cheap:
// - group_norm is layer_norm over (N, G, C/G * spatial) followed by the
//   per-channel affine, so the statistics are the fused kernel's;
//   instance_norm is batch_norm over (1, N*C, spatial), exactly torch's
//   own instance_norm, so that batch_norm's kernel also updates the
//   running statistics (of the N copies, averaged back afterwards);
// - conv1d is conv2d on a height-1 image: x (N, C, L) -> (N, C, 1, L),
//   weight (OC, C/g, k) -> (OC, C/g, 1, k), stride (1, s), padding (0, p),
//   dilation (1, d); both unsqueezes are views, so nothing is copied;
// - pixel_shuffle is a reshape, a permute and a reshape (one copy);
// - pad and interpolate gather with index_select along one padded or
//   resized dim at a time, indices computed on the host (Note [Padding
//   and interpolation as gathers]); constant padding alone is one recorded
//   node, whose backward is constant padding by the negated amounts;
// - the recurrent layers compute the input's contribution to the gates of
//   a whole sequence with one linear (one GEMM over L*N rows) and only the
//   hidden state's contribution step by step, as torch's CPU path does.
// One consequence differs from torch's fused RNN kernels under autocast:
// the linears run in the lower precision, but the arithmetic that mixes in
// a state follows type promotion, so an LSTM's cell state and a GRU's
// interpolation with float32 states stay float32 (and so do their
// outputs), while an Elman RNN's state is the lower-precision tanh of
// lower-precision sums after the first step. torch casts every
// argument of its fused lstm / gru / rnn to the lower precision instead.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "autograd/ops.h"
#include "nn/conv_padding.h"
#include "tensor/random.h"

namespace kiln::nn::functional {

// ---- group and instance norm (nn/functional/group_norm.cpp) ----
// torch.nn.functional.group_norm: x (N, C, *), C divisible by num_groups.
// Each group of C / num_groups channels of each sample is normalised by its
// mean and biased variance over those channels and every spatial position;
// then y * weight[c] + bias[c] when weight / bias (C) are defined.
//   Tensor y = F::group_norm(x, 4, gamma, beta);   // x: (N, 16, H, W)
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

// torch.nn.functional.instance_norm: x (N, C, *) with at least one spatial
// dim. use_input_stats: each (sample, channel) plane is normalised by its own
// mean and biased variance (then there must be more than one spatial
// element), and running_mean / running_var (C), when defined, are updated in
// place as batch_norm's, with the average over the batch of the per-sample
// statistics; otherwise the planes are normalised with the running
// statistics, which are then required. weight, bias (C) or undefined.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor(),
                     const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

// ---- 1-d convolution (nn/functional/conv1d.cpp) ----
// torch.nn.functional.conv1d: x (N, C, L) or (C, L), weight (OC, C/groups, k),
// bias (OC) or undefined -> (N, OC, ol), with
// ol = (L + 2*padding - dilation*(k-1) - 1) / stride + 1; padding may be
// kiln::kValid (0) or kiln::kSame (ol = L, stride 1 only; Note [Same
// padding] in nn/conv_padding.h).
//   Tensor y = F::conv1d(x, w, b, /*stride=*/2, /*padding=*/1);
//   Tensor z = F::conv1d(x, w, b, /*stride=*/1, kiln::kSame);
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              Conv1dPadding padding = 0, int64_t dilation = 1, int64_t groups = 1);

// ---- pixel shuffle (nn/functional/pixel_shuffle.cpp) ----
// torch.nn.functional.pixel_shuffle: (*, C*r*r, H, W) -> (*, C, H*r, W*r),
// out[..., c, h*r + i, w*r + j] = x[..., c*r*r + i*r + j, h, w]; and
// pixel_unshuffle, its inverse: (*, C, H*r, W*r) -> (*, C*r*r, H, W).
// Any number of leading dims, r >= 1.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

// ---- padding (nn/functional/pad.cpp) ----
// torch.nn.functional.pad's modes: constant fills with `value`, reflect
// mirrors about the edge without repeating it (d c b | a b c d | c b a),
// replicate repeats the edge (a a | a b c d | d d), circular wraps around
// (c d | a b c d | a b).
enum class PadMode { Constant, Reflect, Replicate, Circular };

// torch.nn.functional.pad(x, pad, mode, value). `pad` holds pairs for the
// last dims, the last dim first: {left, right} pads dim -1, {left, right,
// top, bottom} dims -1 and -2, {left, right, top, bottom, front, back} dims
// -1 to -3; a negative entry removes that many elements instead. The
// result has x's dtype; a padded dim of size s becomes s + before + after.
// - Constant pads any number of the last dims (pad.size() / 2 <= x.dim())
//   with value (0 when not given), of any dtype.
// - Reflect, replicate and circular pad the last 1, 2 or 3 dims of a
//   batched or unbatched input, as torch: pad.size() 2 with a 2-d or 3-d x,
//   4 with 3-d or 4-d, 6 with 4-d or 5-d; they take no value. Reflect and
//   replicate need every dim but a batched x's first to be non-empty;
//   reflect needs each pad < the size of its dim, circular each pad <= it.
// Differentiable in x: the gradient of a padded element goes back to the
// element it copies (summed where reflect, replicate or circular copy one
// element several times), that of a constant one nowhere.
//   Tensor y = F::pad(x, {1, 2}, F::PadMode::Reflect);   // x: (N, C, L) -> (N, C, L + 3)
//   Tensor z = F::pad(x, {0, 0, -1, 1}, F::PadMode::Constant, 0.5);
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode = PadMode::Constant,
           std::optional<double> value = std::nullopt);

// Note [Padding and interpolation as gathers]
// Non-constant padding and every interpolation mode copy or mix input
// elements at positions that depend only on the sizes, so each is one
// index_select per padded or resized dim, with Int64 indices computed on
// the host and copied to x's device. Output position j of a dim of size n
// padded by (before, after) reads input position k = j - before mirrored
// (reflect: -k below 0, 2(n-1) - k above n-1), clamped to [0, n-1]
// (replicate), or wrapped around the part a negative pad keeps (circular).
// An interpolating mode's dim is a sum of taps, x[i_k] * w_k: two for the
// linear modes (x[i0] * (1 - w) + x[i1] * w), four for bicubic, each tap a
// gather and its weights (broadcast along the dim) in x's dtype, with the
// indices and weights as torch's CPU kernel computes them; the modes of
// several dims resize W, then H, then D, the order in which that kernel
// nests its sums. Area mode is the one exception: it is adaptive average
// pooling, the pooling kernel itself, as in torch. The gradient is index_select's, a
// scatter-add into zeros, so an element read several times gets the sum
// of the gradients of its copies (as torch's backward kernels accumulate
// them), and it differentiates again. The cost against a fused kernel is
// one intermediate per dim and index tensors as long as the output dims;
// the gain is that nothing is written per device. Constant padding is
// instead a fill and one copy into the interior.

// ---- interpolation (nn/functional/interpolate.cpp) ----
// torch.nn.functional.interpolate's modes: nearest (torch's legacy
// nearest, source index floor(dst * scale)), nearest-exact (floor((dst +
// 0.5) * scale), as Pillow and scikit-image), linear (3-d input), bilinear
// and bicubic (4-d input), trilinear (5-d input), and area (adaptive
// average pooling, 3-d to 5-d input).
enum class InterpolateMode { Nearest, NearestExact, Linear, Bilinear, Bicubic, Trilinear, Area };

// "bilinear": the mode as torch's mode string, for messages and printing.
const char* interpolate_mode_name(InterpolateMode mode);
// Whether align_corners may be given: linear, bilinear, bicubic, trilinear.
bool interpolate_mode_takes_align_corners(InterpolateMode mode);

// torch.nn.functional.interpolate's keyword arguments. Exactly one of size
// and scale_factor is given (non-empty): one entry per spatial dim, or one
// entry for all of them (torch's single int or float).
struct InterpolateOptions {
  std::vector<int64_t> size{};         // the output's spatial sizes
  std::vector<double> scale_factor{};  // output size = floor(input size * scale_factor)
  InterpolateMode mode = InterpolateMode::Nearest;
  // The linear modes and bicubic only (false when not given): true maps the
  // centres of the corner pixels onto each other, false the outer edges of
  // the pixels.
  std::optional<bool> align_corners{};
  // With scale_factor: true interpolates with scale input / output size,
  // as if the computed size had been given; false or not given (torch's
  // default) with 1 / scale_factor itself.
  std::optional<bool> recompute_scale_factor{};
  // Bilinear and bicubic only: filter as Pillow does, the filter stretched by
  // the downscale factor (Note [Antialiased interpolation] in
  // nn/functional/interpolate.cpp), as torch's antialias=True.
  bool antialias = false;
};

// torch.nn.functional.interpolate on x (N, C, d1, ...) with 1, 2 or 3
// spatial dims for nearest, nearest-exact and area, (N, C, W) for linear,
// (N, C, H, W) for bilinear and bicubic and (N, C, D, H, W) for trilinear
// -> (N, C, o1, ...), floating dtypes (the nearest modes take any).
// Output position o of a spatial dim of input size n and output size m
// reads source position
//   nearest        floor(o * scale), at most n - 1
//   nearest-exact  floor((o + 0.5) * scale), at most n - 1
//   linear modes   align_corners:  o * (n - 1) / (m - 1)   (0 when m = 1)
//                  otherwise:      max((o + 0.5) * scale - 0.5, 0)
//   bicubic        as linear, without the max
// with scale = n / m, or 1 / scale_factor when one is given and not
// recomputed, in x's precision (float32 for 16-bit floats) as torch's CPU
// kernels. The linear modes mix the two neighbours of a fractional position
// p with weights 1 - frac(p) and frac(p); a dim whose size does not change
// is copied. Bicubic mixes the four at floor(p) - 1 ... floor(p) + 2, each
// clamped into [0, n - 1] (the border repeats), with the Keys kernel of
// A = -0.75 (torch's get_cubic_upsample_coefficients); its values may
// overshoot the input's range, and an unchanged size with a scale factor
// other than 1 is resampled (torch's CPU backward copies the gradient
// there instead; Kiln's is the gradient of the forward). Area averages the window [floor(o * n / m),
// ceil((o + 1) * n / m)), as adaptive_avg_pool; align_corners and
// scale_factor's scale play no part in it. Differentiable in x (Note
// [Padding and interpolation as gathers]).
//   Tensor y = F::interpolate(x, {.size = {8, 12}, .mode = F::InterpolateMode::Bilinear, .align_corners = true});
//   Tensor z = F::interpolate(x, {.scale_factor = {1.5}});   // nearest, each spatial dim * 1.5
//   Tensor a = F::interpolate(x, {.size = {7, 7}, .mode = F::InterpolateMode::Area});   // as adaptive_avg_pool2d
//   Tensor t = F::interpolate(x, {.size = {32, 32}, .mode = F::InterpolateMode::Bilinear, .antialias = true});
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

// ---- recurrent cells (nn/functional/recurrent.cpp) ----
// One step of each recurrence, as torch's rnn_tanh_cell, rnn_relu_cell,
// lstm_cell and gru_cell: x (N, I), h and c (N, H); w_ih (G*H, I), w_hh
// (G*H, H), b_ih and b_hh (G*H) or undefined, with G = 1, 4 (gates i, f, g,
// o) and 3 (r, z, n) for the RNN, LSTM and GRU. The formulas are torch's:
//   RNN:  h' = act(x w_ih^T + b_ih + h w_hh^T + b_hh), act = tanh or relu
//   LSTM: i, f, g, o = chunks of x w_ih^T + b_ih + h w_hh^T + b_hh
//         c' = sigmoid(f) * c + sigmoid(i) * tanh(g),  h' = sigmoid(o) * tanh(c')
//   GRU:  r = sigmoid(xr + hr), z = sigmoid(xz + hz), n = tanh(xn + r * hn),
//         h' = (1 - z) * n + z * h, where x* and h* are the chunks of
//         x w_ih^T + b_ih and h w_hh^T + b_hh
// (the GRU's reset gate multiplies hn including b_hh's chunk, as torch and
// cuDNN, not the Cho et al. form r * h before the product).
struct LSTMState {
  Tensor h;  // (N, H)
  Tensor c;  // (N, H)
};
Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
LSTMState lstm_cell(const Tensor& x, const LSTMState& state, const Tensor& w_ih, const Tensor& w_hh,
                    const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());

// The same steps given the input's part of the gates, gi = x w_ih^T + b_ih
// (N, G*H), which the sequence layers compute for every time step at once
// (Note [Composite layers]). relu chooses the RNN's activation.
Tensor rnn_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh, bool relu);
LSTMState lstm_step(const Tensor& gi, const LSTMState& state, const Tensor& w_hh, const Tensor& b_hh);
Tensor gru_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh);

}  // namespace kiln::nn::functional
