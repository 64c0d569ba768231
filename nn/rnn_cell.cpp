#include "nn/rnn_cell.h"

#include <cmath>
#include <string>

#include "nn/functional_composite.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

namespace F = functional;

RNNCellBase::RNNCellBase(const char* name, int64_t input_size, int64_t hidden_size, bool bias, int64_t gates)
    : input_size(input_size), hidden_size(hidden_size) {
  KILN_CHECK(input_size > 0 && hidden_size > 0, name, ": input_size and hidden_size must be positive, got ",
             input_size, " and ", hidden_size);
  weight_ih = register_parameter("weight_ih", empty({gates * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", empty({gates * hidden_size, hidden_size}));
  bias_ih = register_parameter("bias_ih", bias ? empty({gates * hidden_size}) : Tensor());
  bias_hh = register_parameter("bias_hh", bias ? empty({gates * hidden_size}) : Tensor());
  reset_parameters();
}

void RNNCellBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (Tensor p : parameters(/*recurse=*/false)) init::uniform_(p, -bound, bound);
}

std::string RNNCellBase::extra_repr() const {
  std::string s = std::to_string(input_size) + ", " + std::to_string(hidden_size);
  if (!bias_ih.defined()) s += ", bias=False";
  return s;
}

TensorList RNNCellBase::batched_inputs(const TensorList& inputs, size_t states, bool* batched) const {
  const char* state_names = states == 1 ? "{input} or {input, h}" : "{input} or {input, h, c}";
  KILN_CHECK(inputs.size() == 1 || inputs.size() == 1 + states, name(), ": expected inputs ", state_names, ", got ",
             inputs.size(), " tensors");
  const Tensor& x = inputs[0];
  KILN_CHECK(x.defined() && (x.dim() == 1 || x.dim() == 2), name(), ": expected input of shape (N, ", input_size,
             ") or (", input_size, "), got ", x.defined() ? x.dim() : 0, "D input of shape ",
             x.defined() ? x.shape() : Shape{});
  KILN_CHECK(x.size(-1) == input_size, name(), ": expected input_size ", input_size,
             " (the last dim), got input of shape ", x.shape());
  *batched = x.dim() == 2;
  Shape state_shape = *batched ? Shape{x.size(0), hidden_size} : Shape{hidden_size};
  TensorList out{*batched ? x : x.unsqueeze(0)};
  for (size_t k = 1; k <= states; ++k) {
    if (inputs.size() == 1) {
      out.push_back(zeros({out[0].size(0), hidden_size}, TensorOptions(x.dtype(), x.device())));
      continue;
    }
    const Tensor& s = inputs[k];
    const char* what = k == 1 ? "h" : "c";
    KILN_CHECK(s.defined() && s.shape() == state_shape, name(), ": expected ", what, " of shape ", state_shape,
               " for input of shape ", x.shape(), ", got ", s.defined() ? s.shape() : Shape{});
    out.push_back(*batched ? s : s.unsqueeze(0));
  }
  return out;
}

namespace {

// The states of a batch of one back to unbatched shapes.
TensorList unbatched(TensorList states, bool batched) {
  if (!batched)
    for (Tensor& s : states) s = s.squeeze(0);
  return states;
}

}  // namespace

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, RNNNonlinearity nonlinearity)
    : RNNCellBase("RNNCell", input_size, hidden_size, bias, 1), nonlinearity(nonlinearity) {}

TensorList RNNCell::forward_many(const TensorList& inputs) {
  bool batched = true;
  TensorList in = batched_inputs(inputs, 1, &batched);
  Tensor h = nonlinearity == RNNNonlinearity::ReLU
                 ? F::rnn_relu_cell(in[0], in[1], weight_ih, weight_hh, bias_ih, bias_hh)
                 : F::rnn_tanh_cell(in[0], in[1], weight_ih, weight_hh, bias_ih, bias_hh);
  return unbatched({h}, batched);
}

std::string RNNCell::extra_repr() const {
  return RNNCellBase::extra_repr() + (nonlinearity == RNNNonlinearity::ReLU ? ", nonlinearity=relu" : "");
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase("LSTMCell", input_size, hidden_size, bias, 4) {}

TensorList LSTMCell::forward_many(const TensorList& inputs) {
  bool batched = true;
  TensorList in = batched_inputs(inputs, 2, &batched);
  F::LSTMState next = F::lstm_cell(in[0], {in[1], in[2]}, weight_ih, weight_hh, bias_ih, bias_hh);
  return unbatched({next.h, next.c}, batched);
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase("GRUCell", input_size, hidden_size, bias, 3) {}

TensorList GRUCell::forward_many(const TensorList& inputs) {
  bool batched = true;
  TensorList in = batched_inputs(inputs, 1, &batched);
  return unbatched({F::gru_cell(in[0], in[1], weight_ih, weight_hh, bias_ih, bias_hh)}, batched);
}

}  // namespace kiln::nn
