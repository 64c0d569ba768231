// RNNCell, LSTMCell and GRUCell, as torch.nn's: one step of a recurrence,
// composites of linear and the gate functions (Note [Composite layers] in
// nn/functional_composite.h). They return several tensors where torch
// returns a tuple, so they are called with a list (Note [Modules of
// several tensors] in nn/module.h):
//
//   auto cell = std::make_shared<nn::LSTMCell>(10, 20);
//   auto hc = (*cell)({x, h, c});       // x (N, 10), h and c (N, 20) -> {h', c'}
//   auto first = (*cell)(TensorList{x}); // h and c start at zeros
//   auto gru = std::make_shared<nn::GRUCell>(10, 20);
//   Tensor h1 = (*gru)({x, h})[0];
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace kiln::nn {

// The activation of an Elman RNN, torch's nonlinearity='tanh' | 'relu'.
enum class RNNNonlinearity { Tanh, ReLU };

// The shared part of the cells (torch's RNNCellBase). Parameters
// "weight_ih" (G*hidden_size, input_size), "weight_hh" (G*hidden_size,
// hidden_size), "bias_ih" and "bias_hh" (G*hidden_size), the biases absent
// when bias is false, with G = 1 (RNN), 4 (LSTM: gates i, f, g, o) or 3
// (GRU: r, z, n); all ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as
// torch's reset_parameters.
//
// Inputs: {x} or {x, states...}, x of shape (N, input_size) or, unbatched,
// (input_size), each state (N, hidden_size) or (hidden_size) to match; the
// states start at zeros when not given. Outputs: the new states, shaped as
// the states.
class RNNCellBase : public Module {
 public:
  // "10, 20", then "bias=False" without biases (and the RNNCell's
  // nonlinearity when relu), as torch.
  std::string extra_repr() const override;
  // Draws every parameter afresh from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  void reset_parameters();

  const int64_t input_size;
  const int64_t hidden_size;
  Tensor weight_ih;
  Tensor weight_hh;
  Tensor bias_ih;
  Tensor bias_hh;

 protected:
  RNNCellBase(const char* name, int64_t input_size, int64_t hidden_size, bool bias, int64_t gates);

  // The checked inputs as a batch: x (N, input_size) and `states` states
  // (N, hidden_size), zeros for those not given. Sets *batched.
  TensorList batched_inputs(const TensorList& inputs, size_t states, bool* batched) const;
};

// h' = act(x weight_ih^T + bias_ih + h weight_hh^T + bias_hh); inputs
// {x} or {x, h}, output {h'}.
class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh);
  TensorList forward_many(const TensorList& inputs) override;
  std::string extra_repr() const override;

  const RNNNonlinearity nonlinearity;
};

// The LSTM step of F::lstm_cell; inputs {x} or {x, h, c}, outputs {h', c'}.
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  TensorList forward_many(const TensorList& inputs) override;
};

// The GRU step of F::gru_cell; inputs {x} or {x, h}, output {h'}.
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  TensorList forward_many(const TensorList& inputs) override;
};

}  // namespace kiln::nn
