#include "nn/recurrent.h"

#include <cmath>
#include <string>
#include <vector>

#include "nn/functional.h"
#include "nn/functional_composite.h"
#include "nn/init.h"
#include "nn/repr.h"
#include "tensor/factory.h"

namespace kiln::nn {

namespace F = functional;

RNNBase::RNNBase(Kind kind, const char* name, const RNNOptions& options)
    : input_size(options.input_size()), hidden_size(options.hidden_size()), options(options), kind_(kind) {
  KILN_CHECK(input_size > 0 && hidden_size > 0, name, ": input_size and hidden_size must be positive, got ",
             input_size, " and ", hidden_size);
  KILN_CHECK(options.num_layers() > 0, name, ": num_layers must be positive, got ", options.num_layers());
  KILN_CHECK(options.dropout() >= 0.0 && options.dropout() <= 1.0, name,
             ": dropout must be a probability in [0, 1], got ", options.dropout());
  KILN_CHECK(kind == Kind::RNN || options.nonlinearity() == RNNNonlinearity::Tanh, name,
             ": nonlinearity applies to RNN only (", name, "'s gates have their fixed activations)");
  KILN_CHECK(options.proj_size() >= 0, name, ": proj_size must be positive, or 0 for no projection, got ",
             options.proj_size());
  KILN_CHECK(options.proj_size() == 0 || kind == Kind::LSTM, name, ": proj_size applies to LSTM only, got ",
             options.proj_size());
  KILN_CHECK(options.proj_size() < hidden_size, name, ": proj_size (", options.proj_size(),
             ") must be smaller than hidden_size (", hidden_size, ")");
  const int64_t gates = kind == Kind::LSTM ? 4 : kind == Kind::GRU ? 3 : 1;
  // Registered layer by layer, forward direction first, as torch's
  // _flat_weights_names, so that state-dict keys come in torch's order.
  for (int64_t layer = 0; layer < options.num_layers(); ++layer) {
    const int64_t layer_input = layer == 0 ? input_size : directions() * state_size();
    for (int64_t d = 0; d < directions(); ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      register_parameter("weight_ih" + suffix, empty({gates * hidden_size, layer_input}));
      register_parameter("weight_hh" + suffix, empty({gates * hidden_size, state_size()}));
      if (options.bias()) {
        register_parameter("bias_ih" + suffix, empty({gates * hidden_size}));
        register_parameter("bias_hh" + suffix, empty({gates * hidden_size}));
      }
      if (options.proj_size() > 0) register_parameter("weight_hr" + suffix, empty({options.proj_size(), hidden_size}));
    }
  }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (Tensor p : parameters(/*recurse=*/false)) init::uniform_(p, -bound, bound);
}

Tensor RNNBase::layer_parameter(const char* kind, int64_t layer, bool reverse) const {
  const std::string name = std::string(kind) + "_l" + std::to_string(layer) + (reverse ? "_reverse" : "");
  if (!options.bias() && name[0] == 'b') return Tensor();
  if (options.proj_size() == 0 && name.rfind("weight_hr", 0) == 0) return Tensor();
  return get_parameter(name);
}

RNNBase::Sequence RNNBase::run_direction(const Tensor& x, const Tensor& h0, const Tensor& c0, int64_t layer,
                                         bool reverse, const std::vector<int64_t>* batch_sizes) const {
  const Tensor w_hh = layer_parameter("weight_hh", layer, reverse);
  const Tensor b_hh = layer_parameter("bias_hh", layer, reverse);
  const Tensor w_hr = layer_parameter("weight_hr", layer, reverse);  // (proj_size, hidden_size) or undefined
  // The input's part of every step's gates at once: (L, N, G*hidden_size).
  const Tensor gi = kiln::linear(x, layer_parameter("weight_ih", layer, reverse), layer_parameter("bias_ih", layer, reverse));
  const int64_t steps = x.size(0), batch = x.size(1);
  std::vector<Tensor> hs(steps);
  F::LSTMState state{h0, c0};
  const bool lstm = kind_ == Kind::LSTM;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    // Packed: the first `running` sequences (the longest) have step t.
    const int64_t running = batch_sizes ? (*batch_sizes)[static_cast<size_t>(t)] : batch;
    auto rows = [&](const Tensor& v) { return running == batch ? v : v.narrow(0, 0, running); };
    const Tensor g = rows(gi.select(0, t));  // (running, G*hidden_size)
    F::LSTMState next{rows(state.h), lstm ? rows(state.c) : Tensor()};
    switch (kind_) {
      case Kind::RNN:
        next.h = F::rnn_step(g, next.h, w_hh, b_hh, options.nonlinearity() == RNNNonlinearity::ReLU);
        break;
      case Kind::LSTM:
        next = F::lstm_step(g, next, w_hh, b_hh);
        if (w_hr.defined()) next.h = kiln::linear(next.h, w_hr);
        break;
      case Kind::GRU:
        next.h = F::gru_step(g, next.h, w_hh, b_hh);
        break;
    }
    if (running == batch) {
      state = next;
      hs[t] = state.h;
      continue;
    }
    // The sequences without step t keep their state and output zeros.
    auto rest = [&](const Tensor& v) { return v.narrow(0, running, batch - running); };
    state.h = kiln::cat({next.h, rest(state.h)}, 0);
    if (lstm) state.c = kiln::cat({next.c, rest(state.c)}, 0);
    hs[t] = kiln::cat({next.h, zeros_like(rest(state.h))}, 0);
  }
  return {kiln::stack(hs, 0), state.h, lstm ? state.c : Tensor()};
}

TensorList RNNBase::initial_states(const TensorList& given, int64_t batch, bool batched, const Tensor& input) const {
  const bool lstm = kind_ == Kind::LSTM;
  const size_t states = lstm ? 2 : 1;
  const int64_t layers = options.num_layers() * directions();
  TensorList initial;
  for (size_t k = 0; k < states; ++k) {
    const int64_t features = k == 0 ? state_size() : hidden_size;
    if (k >= given.size() || !given[k].defined()) {
      initial.push_back(zeros({layers, batch, features}, TensorOptions(input.dtype(), input.device())));
      continue;
    }
    const Shape state_shape = batched ? Shape{layers, batch, features} : Shape{layers, features};
    const char* size_name = k == 0 && options.proj_size() > 0 ? "proj_size" : "hidden_size";
    const Tensor& s = given[k];
    KILN_CHECK(s.shape() == state_shape, name(), ": expected ", k == 0 ? "h0" : "c0", " of shape ", state_shape,
               " (num_layers * directions, ", batched ? "N, " : "", size_name, ") for input of shape ", input.shape(),
               ", got ", s.shape());
    initial.push_back(batched ? s : s.unsqueeze(1));
  }
  return initial;
}

TensorList RNNBase::run_layers(const Tensor& x, const TensorList& initial, const std::vector<int64_t>* batch_sizes) {
  const bool lstm = kind_ == Kind::LSTM;
  Tensor layer_input = x;
  std::vector<Tensor> h_n, c_n;
  for (int64_t layer = 0; layer < options.num_layers(); ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < directions(); ++d) {
      const int64_t at = layer * directions() + d;
      Sequence seq = run_direction(layer_input, initial[0].select(0, at), lstm ? initial[1].select(0, at) : Tensor(),
                                   layer, d == 1, batch_sizes);
      outputs.push_back(seq.output);
      h_n.push_back(seq.h);
      if (lstm) c_n.push_back(seq.c);
    }
    layer_input = outputs.size() == 1 ? outputs[0] : kiln::cat(outputs, 2);
    if (layer + 1 < options.num_layers())
      layer_input = F::dropout(layer_input, options.dropout(), is_training(), options.generator());
  }
  TensorList out{layer_input, kiln::stack(h_n, 0)};
  if (lstm) out.push_back(kiln::stack(c_n, 0));
  return out;
}

TensorList RNNBase::forward_many(const TensorList& inputs) {
  const bool lstm = kind_ == Kind::LSTM;
  const size_t states = lstm ? 2 : 1;
  KILN_CHECK(inputs.size() == 1 || inputs.size() == 1 + states, name(), ": expected inputs ",
             lstm ? "{input} or {input, h0, c0}" : "{input} or {input, h0}", ", got ", inputs.size(), " tensors");
  const Tensor& input = inputs[0];
  const char* layout = options.batch_first() ? "(N, L, " : "(L, N, ";
  KILN_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3), name(), ": expected input of shape ", layout,
             input_size, ") or, unbatched, (L, ", input_size, "), got ", input.defined() ? input.dim() : 0,
             "D input of shape ", input.defined() ? input.shape() : Shape{});
  KILN_CHECK(input.size(-1) == input_size, name(), ": expected input_size ", input_size,
             " (the last dim), got input of shape ", input.shape());
  const bool batched = input.dim() == 3;
  // x: (L, N, input_size) from here on.
  Tensor x = !batched ? input.unsqueeze(1) : options.batch_first() ? input.transpose(0, 1) : input;
  KILN_CHECK(x.size(0) > 0, name(), ": expected a sequence of at least one step, got input of shape ", input.shape());
  for (size_t k = 1; k < inputs.size(); ++k)
    KILN_CHECK(inputs[k].defined(), name(), ": ", k == 1 ? "h0" : "c0", " is undefined");
  const TensorList given(inputs.begin() + 1, inputs.end());
  TensorList out = run_layers(x, initial_states(given, x.size(1), batched, input), nullptr);
  if (!batched) {
    for (Tensor& t : out) t = t.squeeze(1);
  } else if (options.batch_first()) {
    out[0] = out[0].transpose(0, 1);
  }
  return out;
}

RNNBase::PackedResult RNNBase::forward_packed(const utils::rnn::PackedSequence& input, const Tensor& h0,
                                              const Tensor& c0) {
  const Tensor& data = input.data;
  KILN_CHECK(data.defined() && data.dim() == 2 && data.size(1) == input_size, name(), ": expected a PackedSequence ",
             "of data (sum of the lengths, ", input_size, "), got data of shape ", data.defined() ? data.shape() : Shape{});
  KILN_CHECK(input.batch_sizes.defined() && input.batch_sizes.dim() == 1 && input.batch_sizes.numel() > 0, name(),
             ": the PackedSequence has no batch_sizes (build it with pack_padded_sequence or pack_sequence)");
  KILN_CHECK(kind_ == Kind::LSTM || !c0.defined(), name(), ": c0 is the LSTM's only");
  const Tensor sizes_host = input.batch_sizes.to(DType::Int64, kCPU).contiguous();
  const std::vector<int64_t> batch_sizes(sizes_host.data<int64_t>(), sizes_host.data<int64_t>() + sizes_host.numel());
  const int64_t batch = batch_sizes[0];
  int64_t total = 0;
  for (size_t t = 0; t < batch_sizes.size(); ++t) {
    KILN_CHECK(batch_sizes[t] >= 1 && batch_sizes[t] <= (t == 0 ? batch : batch_sizes[t - 1]), name(),
               ": the PackedSequence's batch_sizes must not grow, got ", batch_sizes);
    total += batch_sizes[t];
  }
  KILN_CHECK(total == data.size(0), name(), ": the PackedSequence's batch_sizes add up to ", total,
             " steps but its data has ", data.size(0));

  // x (T, B, input_size) in the sorted order: step t's rows are the first
  // batch_sizes[t] sequences, the rest zeros (never read).
  std::vector<Tensor> steps;
  int64_t offset = 0;
  for (int64_t running : batch_sizes) {
    Tensor rows = data.narrow(0, offset, running);
    if (running < batch) rows = kiln::cat({rows, zeros({batch - running, input_size}, TensorOptions(data.dtype(), data.device()))}, 0);
    steps.push_back(rows);
    offset += running;
  }
  const Tensor x = kiln::stack(steps, 0);

  // States come and go in the original order; inside they are sorted.
  const bool sorted = !input.sorted_indices.defined();
  auto to_sorted = [&](const Tensor& s) {
    return sorted || !s.defined() ? s : index_select(s, 1, input.sorted_indices.to(s.device()));
  };
  auto to_original = [&](const Tensor& s) {
    return sorted || !s.defined() ? s : index_select(s, 1, input.unsorted_indices.to(s.device()));
  };
  TensorList out = run_layers(x, initial_states({to_sorted(h0), to_sorted(c0)}, batch, true, data), &batch_sizes);

  // The output packed as the input: step t's first batch_sizes[t] rows.
  std::vector<Tensor> packed;
  for (size_t t = 0; t < batch_sizes.size(); ++t)
    packed.push_back(out[0].select(0, static_cast<int64_t>(t)).narrow(0, 0, batch_sizes[t]));
  PackedResult result;
  result.output = {kiln::cat(packed, 0), input.batch_sizes, input.sorted_indices, input.unsorted_indices};
  result.h_n = to_original(out[1]);
  if (kind_ == Kind::LSTM) result.c_n = to_original(out[2]);
  return result;
}

std::string RNNBase::extra_repr() const {
  std::string s = std::to_string(input_size) + ", " + std::to_string(hidden_size);
  if (options.proj_size() != 0) s += ", proj_size=" + std::to_string(options.proj_size());
  if (options.num_layers() != 1) s += ", num_layers=" + std::to_string(options.num_layers());
  if (!options.bias()) s += ", bias=False";
  if (options.batch_first()) s += ", batch_first=True";
  if (options.dropout() != 0.0) s += ", dropout=" + repr::floating(options.dropout());
  if (options.bidirectional()) s += ", bidirectional=True";
  return s;
}

}  // namespace kiln::nn
