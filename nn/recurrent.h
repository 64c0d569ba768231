// RNN, LSTM and GRU, as torch.nn's: stacked, optionally bidirectional
// recurrences over a sequence, composites of linear and the cells' steps
// (Note [Composite layers] in nn/functional_composite.h). They return an
// output and final states, so they are called with a list (Note [Modules
// of several tensors] in nn/module.h):
//
//   auto lstm = std::make_shared<nn::LSTM>(nn::LSTMOptions(10, 20).num_layers(2).batch_first(true));
//   auto out = (*lstm)({x, h0, c0});    // x (N, L, 10), h0 and c0 (2, N, 20)
//   Tensor y = out[0], h_n = out[1], c_n = out[2];
//   auto gru = std::make_shared<nn::GRU>(nn::GRUOptions(10, 20).bidirectional(true));
//   TensorList out2 = (*gru)(TensorList{x});   // {output, h_n}; h0 is zeros
//   auto packed = nn::utils::rnn::pack_padded_sequence(x, lengths, true, /*enforce_sorted=*/false);
//   auto [y_packed, h_n2, c_n2] = lstm->forward_packed(packed);   // sequences of different lengths
//   auto rnn = std::make_shared<nn::RNN>(10, 20);   // input_size, hidden_size; the rest default
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"
#include "nn/rnn_cell.h"
#include "nn/utils/rnn.h"
#include "tensor/arg.h"
#include "tensor/random.h"

namespace kiln::nn {

// torch's arguments of RNN, LSTM and GRU (Note [Option builders] in
// tensor/arg.h); LSTMOptions and GRUOptions are the same class under
// LibTorch's names (an LSTM or GRU refuses a nonlinearity other than Tanh).
class RNNOptions {
 public:
  RNNOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}

  KILN_ARG(int64_t, input_size);
  KILN_ARG(int64_t, hidden_size);
  KILN_ARG(int64_t, num_layers) = 1;
  KILN_ARG(RNNNonlinearity, nonlinearity) = RNNNonlinearity::Tanh;  // RNN only
  KILN_ARG(bool, bias) = true;
  // Input and output (N, L, features) instead of (L, N, features); the
  // states stay (layers * directions, N, hidden_size), as in torch.
  KILN_ARG(bool, batch_first) = false;
  // Dropout on the outputs of every layer but the last, in training.
  KILN_ARG(double, dropout) = 0.0;
  KILN_ARG(bool, bidirectional) = false;
  // The dropout masks' generator; the default generator when null.
  KILN_ARG(Generator*, generator) = nullptr;
  // LSTM only: when > 0, each step's hidden state is projected from
  // hidden_size down to proj_size features (Sak et al.'s LSTMP, as torch).
  KILN_ARG(int64_t, proj_size) = 0;
};
using LSTMOptions = RNNOptions;
using GRUOptions = RNNOptions;

// The shared implementation (torch's RNNBase).
//
// Parameters, for each layer k and direction (suffix "" or "_reverse"),
// in this order: "weight_ih_l{k}{suffix}" (G*hidden_size, in_k),
// "weight_hh_l{k}{suffix}" (G*hidden_size, H), "bias_ih_l{k}{suffix}" and
// "bias_hh_l{k}{suffix}" (G*hidden_size, absent without bias), and, for an
// LSTM with proj_size > 0, "weight_hr_l{k}{suffix}" (proj_size,
// hidden_size). H, the size of the state h, is proj_size when it is given
// and hidden_size otherwise; in_0 = input_size and in_k = directions * H
// above; G = 1, 4 (LSTM gates i, f, g, o) or 3 (GRU gates r, z, n). All are
// drawn from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch.
//
// Inputs {input} or {input, h0} ({input, h0, c0} for the LSTM):
//   input (L, N, input_size), (N, L, input_size) when batch_first, or
//   unbatched (L, input_size); h0 (layers * directions, N, H) and c0
//   (layers * directions, N, hidden_size), without the N for an unbatched
//   input, zeros when not given. Entry k * directions + d is layer k,
//   direction d (0 forward, 1 reverse), as torch.
// Outputs {output, h_n} ({output, h_n, c_n} for the LSTM):
//   output (L, N, directions * H) (batch first or unbatched as the input):
//   the last layer's state at every step, the forward direction's features
//   first; h_n and c_n the final states, shaped as h0 and c0. The reverse
//   direction's final state is its state after step 0.
class RNNBase : public Module {
 public:
  TensorList forward_many(const TensorList& inputs) override;

  // Sequences of different lengths, as torch's layers take a PackedSequence:
  // each sequence runs only over its own steps, so its output is its own
  // steps' states (packed as the input: same batch_sizes and indices) and
  // h_n (c_n) is its state after its last step (after step 0 for the
  // reverse direction, which starts at the sequence's own last step). h0 and
  // c0 as for forward_many, batched, in the batch's original order (the
  // order of the lengths given to pack_padded_sequence), and so are h_n and
  // c_n; undefined h0 or c0 are zeros. c_n is undefined but for the LSTM.
  struct PackedResult {
    utils::rnn::PackedSequence output;
    Tensor h_n, c_n;
  };
  PackedResult forward_packed(const utils::rnn::PackedSequence& input, const Tensor& h0 = Tensor(),
                              const Tensor& c0 = Tensor());
  // "10, 20", then proj_size, num_layers, bias, batch_first, dropout and
  // bidirectional when not their defaults, as torch.
  std::string extra_repr() const override;
  // Draws every parameter afresh from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  void reset_parameters();

  const int64_t input_size;
  const int64_t hidden_size;
  const RNNOptions options;

 protected:
  enum class Kind { RNN, LSTM, GRU };
  RNNBase(Kind kind, const char* name, const RNNOptions& options);

 private:
  struct Sequence {
    Tensor output;  // (L, N, H)
    Tensor h;       // (N, H), the final state
    Tensor c;       // (N, hidden_size), the LSTM's final cell state, else undefined
  };
  // One direction of one layer over x (L, N, in_k) from the states h0 (N, H)
  // and c0 (N, hidden_size). With batch_sizes (packed sequences, sorted by
  // decreasing length), step t runs only the first batch_sizes[t] rows: the
  // others keep their state, and their output at t is zero.
  Sequence run_direction(const Tensor& x, const Tensor& h0, const Tensor& c0, int64_t layer, bool reverse,
                         const std::vector<int64_t>* batch_sizes) const;
  // Every layer over x (L, N, input_size) from initial = {h0[, c0]}, each
  // (layers * directions, N, features): {output (L, N, directions * H), h_n[, c_n]}.
  TensorList run_layers(const Tensor& x, const TensorList& initial, const std::vector<int64_t>* batch_sizes);
  // The initial states for a batch of `batch`, from inputs [1, 1 + states)
  // when given (checked against `input` for the messages), else zeros.
  TensorList initial_states(const TensorList& given, int64_t batch, bool batched, const Tensor& input) const;
  // The parameter "{kind}_l{layer}{_reverse}", e.g. ("weight_ih", 1, true) -> weight_ih_l1_reverse.
  Tensor layer_parameter(const char* kind, int64_t layer, bool reverse) const;
  int64_t directions() const { return options.bidirectional() ? 2 : 1; }
  // H: the size of h, proj_size when projecting, else hidden_size.
  int64_t state_size() const { return options.proj_size() > 0 ? options.proj_size() : hidden_size; }

  const Kind kind_;
};

// The Elman RNN: h_t = act(x_t weight_ih^T + bias_ih + h_{t-1} weight_hh^T + bias_hh),
// act = tanh or relu (options.nonlinearity()).
class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size) : RNN(RNNOptions(input_size, hidden_size)) {}
  explicit RNN(const RNNOptions& options) : RNNBase(Kind::RNN, "RNN", options) {}
};

// The LSTM of F::lstm_cell at every step; with proj_size, each step's h is
// then h weight_hr^T, and that projected h is what the next step, the next
// layer and the outputs see.
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size) : LSTM(RNNOptions(input_size, hidden_size)) {}
  explicit LSTM(const RNNOptions& options) : RNNBase(Kind::LSTM, "LSTM", options) {}
};

// The GRU of F::gru_cell at every step.
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size) : GRU(RNNOptions(input_size, hidden_size)) {}
  explicit GRU(const RNNOptions& options) : RNNBase(Kind::GRU, "GRU", options) {}
};

}  // namespace kiln::nn
