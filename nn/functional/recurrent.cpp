// The recurrent cells as compositions of linear, sigmoid, tanh and chunk
// (Note [Composite layers] in nn/functional_composite.h). The arithmetic
// follows ATen's cells term for term (gates of the hidden state added to
// those of the input; the GRU's h' as n + z * (h - n)), so that float64
// results agree with torch's to a few ulps.
#include "nn/functional_composite.h"

namespace kiln::nn::functional {

namespace {

// Checks one cell call: x (N, I), h (N, H), w_ih (G*H, I), w_hh (G*H, H),
// biases (G*H) or undefined.
void check_cell(const char* op, int64_t gates, const Tensor& x, const Tensor& h, const Tensor& w_ih,
                const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  KILN_CHECK(x.defined() && h.defined() && w_ih.defined() && w_hh.defined(),
             op, ": x, h, w_ih and w_hh must be defined");
  KILN_CHECK(w_hh.dim() == 2 && w_hh.size(0) == gates * w_hh.size(1), op, ": expected w_hh of shape (", gates,
             "*H, H), got ", w_hh.shape());
  const int64_t hidden = w_hh.size(1);
  KILN_CHECK(w_ih.dim() == 2 && w_ih.size(0) == gates * hidden, op, ": expected w_ih of shape [", gates * hidden,
             ", input_size] to go with w_hh of shape ", w_hh.shape(), ", got ", w_ih.shape());
  KILN_CHECK(x.dim() == 2 && x.size(1) == w_ih.size(1), op, ": expected x of shape [N, ", w_ih.size(1),
             "] (w_ih is ", w_ih.shape(), "), got ", x.shape());
  KILN_CHECK(h.dim() == 2 && h.size(0) == x.size(0) && h.size(1) == hidden, op, ": expected h of shape [",
             x.size(0), ", ", hidden, "] for x of shape ", x.shape(), ", got ", h.shape());
  for (const Tensor* b : {&b_ih, &b_hh}) {
    KILN_CHECK(!b->defined() || (b->dim() == 1 && b->size(0) == gates * hidden), op, ": expected ",
               b == &b_ih ? "b_ih" : "b_hh", " of shape [", gates * hidden, "], got ", b->shape());
  }
}

}  // namespace

Tensor rnn_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh, bool relu) {
  Tensor pre = kiln::add(kiln::linear(h, w_hh, b_hh), gi);  // (N, H)
  return relu ? kiln::relu(pre) : kiln::tanh(pre);
}

LSTMState lstm_step(const Tensor& gi, const LSTMState& state, const Tensor& w_hh, const Tensor& b_hh) {
  // gates: (N, 4H), chunks i, f, g, o.
  std::vector<Tensor> gates = kiln::chunk(kiln::add(kiln::linear(state.h, w_hh, b_hh), gi), 4, 1);
  Tensor in = kiln::sigmoid(gates[0]), forget = kiln::sigmoid(gates[1]);
  Tensor cell = kiln::tanh(gates[2]), out = kiln::sigmoid(gates[3]);
  Tensor c = kiln::add(kiln::mul(forget, state.c), kiln::mul(in, cell));
  return {kiln::mul(out, kiln::tanh(c)), c};
}

Tensor gru_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh) {
  // Chunks r, z, n of the input's and the hidden state's gates: (N, H) each.
  std::vector<Tensor> xg = kiln::chunk(gi, 3, 1);
  std::vector<Tensor> hg = kiln::chunk(kiln::linear(h, w_hh, b_hh), 3, 1);
  Tensor reset = kiln::sigmoid(kiln::add(hg[0], xg[0]));
  Tensor update = kiln::sigmoid(kiln::add(hg[1], xg[1]));
  Tensor candidate = kiln::tanh(kiln::add(xg[2], kiln::mul(hg[2], reset)));
  return kiln::add(kiln::mul(kiln::sub(h, candidate), update), candidate);
}

Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  check_cell("rnn_tanh_cell", 1, x, h, w_ih, w_hh, b_ih, b_hh);
  return rnn_step(kiln::linear(x, w_ih, b_ih), h, w_hh, b_hh, /*relu=*/false);
}

Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                     const Tensor& b_hh) {
  check_cell("rnn_relu_cell", 1, x, h, w_ih, w_hh, b_ih, b_hh);
  return rnn_step(kiln::linear(x, w_ih, b_ih), h, w_hh, b_hh, /*relu=*/true);
}

LSTMState lstm_cell(const Tensor& x, const LSTMState& state, const Tensor& w_ih, const Tensor& w_hh,
                    const Tensor& b_ih, const Tensor& b_hh) {
  check_cell("lstm_cell", 4, x, state.h, w_ih, w_hh, b_ih, b_hh);
  KILN_CHECK(state.c.defined() && state.c.shape() == state.h.shape(), "lstm_cell: expected c of shape ",
             state.h.shape(), " (that of h), got ", state.c.defined() ? state.c.shape() : Shape{});
  return lstm_step(kiln::linear(x, w_ih, b_ih), state, w_hh, b_hh);
}

Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                const Tensor& b_hh) {
  check_cell("gru_cell", 3, x, h, w_ih, w_hh, b_ih, b_hh);
  return gru_step(kiln::linear(x, w_ih, b_ih), h, w_hh, b_hh);
}

}  // namespace kiln::nn::functional
