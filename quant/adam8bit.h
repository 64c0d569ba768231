// Adam with 8-bit state, as bitsandbytes' Adam8bit / AdamW8bit with
// block-wise quantization: the two moments cost 2 bytes per parameter
// instead of 8, and training follows float32 Adam's closely.
//
//   quant::Adam8bit opt(model->parameters(), quant::Adam8bitOptions(1e-3));
//   quant::AdamW8bit opt(model->parameters(), quant::AdamW8bitOptions(1e-3).weight_decay(0.1));
//   for (...) { opt.zero_grad(); loss.backward(); opt.step(); }
//
// An optim::Optimizer like any other: param groups, hyperparameters by name
// (lr, beta1, beta2, eps, weight_decay, maximize), lr schedulers, zero_grad
// and the state dict work as for optim::Adam.
//
// Note [Block-wise 8-bit optimizer state]
// Adam keeps two float32 numbers per parameter, twice the model itself.
// Dettmers et al. ("8-bit Optimizers via Block-wise Quantization", 2022)
// keep each as one byte, a code into a table of 256 values, and lose
// almost nothing in training. Three choices make that work:
//
// The dynamic map (quant/blockwise_quantize.h). A moment spans many orders
// of magnitude: most entries are tiny, a few large. A linear grid of 256
// steps would round every entry below max/256 to zero. The dynamic map
// spends its codes by decade instead: 1, 2, 4, ..., 64 values (of each
// sign) in the decades from 1e-6 to 1, so that small values keep a few
// digits of relative precision. The first moment uses the signed map; the
// second moment is never negative, so it uses the unsigned map, whose
// decades get twice the values (the sign bit goes to the fraction).
//
// Blocks. A value is stored as map[code] * absmax, where absmax is the
// largest |value| in its block of block_size (2048) consecutive elements.
// One absmax for the whole tensor would let a single outlier (a gradient
// spike in one row of an embedding) push every other value of the tensor
// down the map toward zero; per block, an outlier costs precision only to
// its 2047 neighbours, and blocks are independent, so they are updated in
// parallel with no reduction across the tensor. The absmax is float32, 4
// bytes per 2048 elements.
//
// Each step, per block: dequantize both moments (code -> map value ->
// times the block's old absmax), do Adam's float32 update of the moments
// and of the parameter (which sees the float32 moments, not their rounded
// codes), take the new absmax of each moment, and quantize each value
// divided by its absmax to the nearest map entry. Small tensors (fewer
// than min_8bit_size elements: biases, norms) keep float32 moments, as in
// bitsandbytes: they are a small part of the memory and the most sensitive
// to rounding. min_8bit_size = 0 quantizes every tensor.
//
// Per parameter p with gradient g (t counts the parameter's steps from 1),
// each element in float32:
//   g = -g                              if maximize
//   g = g + weight_decay * p            Adam8bit (L2 penalty)
//   p = p * (1 - lr * weight_decay)     AdamW8bit (decoupled_weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p + step_size * m / (sqrt(v) + eps_hat)
// with step_size = -lr * sqrt(1 - beta2^t) / (1 - beta1^t) and
// eps_hat = eps * sqrt(1 - beta2^t) computed in float64 and rounded once:
// Adam's update with the bias corrections moved out of the loop, as
// bitsandbytes writes it. An element whose gradient is not finite leaves its
// parameter as it is and its moments become 0, as in bitsandbytes: one
// NaN would otherwise make its block's absmax NaN and lose the whole block.
// Differences from bitsandbytes: weight decay follows torch's Adam and
// AdamW (bitsandbytes' block-wise kernel decays decoupled, after the
// update, for both); the codes are the nearest entries, where bitsandbytes
// also moves a negative first moment that rounds to 0 one code down; the
// update runs on the CPU only.
//
// State per parameter: "step" (float64 count) and, for a quantized one,
// "exp_avg" and "exp_avg_sq" (uint8, the parameter's shape: codes) with
// "exp_avg_absmax" and "exp_avg_sq_absmax" (float32, one per block); for a
// small one "exp_avg" and "exp_avg_sq" in float32. A state dict holds them
// as they are, so a loaded run continues bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"
#include "quant/blockwise_quantize.h"
#include "tensor/arg.h"

namespace kiln::quant {

// As optim::AdamOptions: lr defaults to 1e-3, the rest are chained setters
// (Note [Option builders] in tensor/arg.h).
class Adam8bitOptions {
 public:
  static constexpr const char* kOptimizerName = "Adam8bit";

  Adam8bitOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit, as optim::AdamOptions

  static std::vector<optim::OptionField<Adam8bitOptions>> fields();
  // Throws naming `op` for a negative lr, eps or weight decay, a beta
  // outside [0, 1), a block_size below 1 or a negative min_8bit_size.
  void validate(std::string_view op) const;

  KILN_ARG(double, lr);
  KILN_ARG(double, beta1) = 0.9;
  KILN_ARG(double, beta2) = 0.999;
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 0.0;
  KILN_ARG(bool, maximize) = false;
  // AdamW8bit's update: decay the parameter, not the gradient. Chooses the
  // algorithm, so it is not a hyperparameter by name (as optim::AdamOptions').
  KILN_ARG(bool, decoupled_weight_decay) = false;
  // Elements per quantization block (bitsandbytes' blocksize for optimizer
  // state was 2048). Fixed once a parameter has state.
  KILN_ARG(int64_t, block_size) = 2048;
  // Tensors with fewer elements keep float32 moments; 0 quantizes all.
  KILN_ARG(int64_t, min_8bit_size) = 4096;
};

// AdamW8bit's options differ from Adam8bit's only in the default weight
// decay (and decoupled_weight_decay, which is always on).
class AdamW8bitOptions {
 public:
  AdamW8bitOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit, as optim::AdamWOptions

  KILN_ARG(double, lr);
  KILN_ARG(double, beta1) = 0.9;
  KILN_ARG(double, beta2) = 0.999;
  KILN_ARG(double, eps) = 1e-8;
  KILN_ARG(double, weight_decay) = 1e-2;
  KILN_ARG(bool, maximize) = false;
  KILN_ARG(int64_t, block_size) = 2048;
  KILN_ARG(int64_t, min_8bit_size) = 4096;
};

class Adam8bit : public optim::OptimizerWithOptions<Adam8bitOptions> {
 public:
  Adam8bit(const std::vector<Tensor>& params, Adam8bitOptions defaults);
  Adam8bit(const std::vector<optim::ParamGroup>& groups, Adam8bitOptions defaults);

  // "Adam8bit", or "AdamW8bit" for an AdamW8bit.
  std::string name() const override { return name_; }
  // Updates every float CPU parameter that has a grad. Throws naming the
  // optimizer, the parameter and its device for a parameter off the CPU,
  // and for state that does not fit the group's block_size.
  void step() override;

  // Bytes of optimizer state held now (every state tensor, step counts
  // included); optimizer_state_bytes(*this).
  int64_t state_bytes() const;

 protected:
  Adam8bit(const std::vector<optim::ParamGroup>& groups, Adam8bitOptions defaults, std::string name);
  std::vector<optim::StateEntry> state_entries(size_t group) const override;
  std::vector<optim::StateEntry> param_state_entries(size_t group, const Tensor& param) const override;

 private:
  std::string name_;
};

// Adam8bit with decoupled weight decay.
class AdamW8bit : public Adam8bit {
 public:
  AdamW8bit(const std::vector<Tensor>& params, AdamW8bitOptions defaults);
  AdamW8bit(const std::vector<optim::ParamGroup>& groups, AdamW8bitOptions defaults);
};

// Whether `options` keeps `param`'s moments in 8 bits.
inline bool quantizes_state(const Adam8bitOptions& options, const Tensor& param) {
  return param.numel() >= options.min_8bit_size();
}

// The bytes of every state tensor of any optimizer (its state dict's
// "state.*" entries): what Adam8bit's and Adam's state cost side by side.
int64_t optimizer_state_bytes(const optim::Optimizer& optimizer);

}  // namespace kiln::quant
