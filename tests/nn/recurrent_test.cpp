// RNN, LSTM, GRU, their cells and the functional cells: against PyTorch on
// the same weights, inputs and initial states (outputs, final states and
// the gradients of inputs, states and every parameter, state-dict keys),
// gradcheck, initialisation, dropout between layers, and the errors.
#include <cmath>

#include "nn/functional_composite.h"
#include "nn/nn_test_util.h"
#include "nn/recurrent.h"
#include "nn/rnn_cell.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace F = kiln::nn::functional;
using gradtest::expect_gradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::make64;
using testing::expect_matches_torch;
using testing::OracleCase;

TEST(RecurrentLayers, MatchTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  // RNN
  cases.push_back({.name = "RNN tanh, h0 zeros",
                   .module = make64<RNN>(4, 3),
                   .torch_module = "nn.RNN(4, 3)",
                   .inputs = {leaf({5, 2, 4}, 1)},
                   .python = "o, h = m(in0)\nouts = [o, h]"});
  cases.push_back(
      {.name = "RNN relu, 2 layers, bidirectional, batch_first, h0",
       .module = make64<RNN>(
           RNNOptions(4, 3).num_layers(2).nonlinearity(RNNNonlinearity::ReLU).batch_first(true).bidirectional(true)),
       .torch_module = "nn.RNN(4, 3, num_layers=2, nonlinearity='relu', batch_first=True, bidirectional=True)",
       .inputs = {leaf({2, 5, 4}, 2), leaf({4, 2, 3}, 3)},
       .python = "o, h = m(in0, in1)\nouts = [o, h]"});
  cases.push_back({.name = "RNN without bias, unbatched, h0",
                   .module = make64<RNN>(RNNOptions(3, 4).num_layers(2).bias(false)),
                   .torch_module = "nn.RNN(3, 4, num_layers=2, bias=False)",
                   .inputs = {leaf({6, 3}, 4), leaf({2, 4}, 5)},
                   .python = "o, h = m(in0, in1)\nouts = [o, h]"});
  // LSTM
  cases.push_back({.name = "LSTM, 2 layers, bidirectional, (h0, c0)",
                   .module = make64<LSTM>(RNNOptions(3, 4).num_layers(2).bidirectional(true)),
                   .torch_module = "nn.LSTM(3, 4, num_layers=2, bidirectional=True)",
                   .inputs = {leaf({5, 2, 3}, 6), leaf({4, 2, 4}, 7), leaf({4, 2, 4}, 8)},
                   .python = "o, (h, c) = m(in0, (in1, in2))\nouts = [o, h, c]"});
  cases.push_back({.name = "LSTM batch_first, zero states",
                   .module = make64<LSTM>(RNNOptions(2, 3).batch_first(true)),
                   .torch_module = "nn.LSTM(2, 3, batch_first=True)",
                   .inputs = {leaf({3, 4, 2}, 9)},
                   .python = "o, (h, c) = m(in0)\nouts = [o, h, c]"});
  cases.push_back({.name = "LSTM unbatched, no bias, bidirectional, (h0, c0)",
                   .module = make64<LSTM>(RNNOptions(2, 3).bias(false).bidirectional(true)),
                   .torch_module = "nn.LSTM(2, 3, bias=False, bidirectional=True)",
                   .inputs = {leaf({4, 2}, 10), leaf({2, 3}, 11), leaf({2, 3}, 12)},
                   .python = "o, (h, c) = m(in0, (in1, in2))\nouts = [o, h, c]"});
  cases.push_back({.name = "LSTM, 2 layers, dropout 0.5 in eval: no dropout",
                   .module = make64<LSTM>(RNNOptions(3, 3).num_layers(2).dropout(0.5)),
                   .torch_module = "nn.LSTM(3, 3, num_layers=2, dropout=0.5)",
                   .training = false,
                   .inputs = {leaf({4, 2, 3}, 13)},
                   .python = "o, (h, c) = m(in0)\nouts = [o, h, c]"});
  // GRU
  cases.push_back({.name = "GRU, h0",
                   .module = make64<GRU>(3, 4),
                   .torch_module = "nn.GRU(3, 4)",
                   .inputs = {leaf({5, 3, 3}, 14), leaf({1, 3, 4}, 15)},
                   .python = "o, h = m(in0, in1)\nouts = [o, h]"});
  cases.push_back({.name = "GRU, 2 layers, bidirectional, batch_first, zero h0",
                   .module = make64<GRU>(RNNOptions(2, 3).num_layers(2).batch_first(true).bidirectional(true)),
                   .torch_module = "nn.GRU(2, 3, num_layers=2, batch_first=True, bidirectional=True)",
                   .inputs = {leaf({2, 4, 2}, 16)},
                   .python = "o, h = m(in0)\nouts = [o, h]"});
  // Dropout 1 zeroes the input of every layer but the first, deterministically.
  cases.push_back({.name = "GRU, 3 layers, dropout 1 in training, h0",
                   .module = make64<GRU>(RNNOptions(2, 3).num_layers(3).dropout(1.0)),
                   .torch_module = "nn.GRU(2, 3, num_layers=3, dropout=1.0)",
                   .inputs = {leaf({4, 2, 2}, 17), leaf({3, 2, 3}, 18)},
                   .python = "o, h = m(in0, in1)\nouts = [o, h]"});
  cases.push_back({.name = "GRU unbatched, no bias",
                   .module = make64<GRU>(RNNOptions(3, 2).bias(false)),
                   .torch_module = "nn.GRU(3, 2, bias=False)",
                   .inputs = {leaf({5, 3}, 19), leaf({1, 2}, 20)},
                   .python = "o, h = m(in0, in1)\nouts = [o, h]"});
  expect_matches_torch(cases);
}

TEST(RecurrentCells, MatchTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  cases.push_back({.name = "RNNCell tanh, h",
                   .module = make64<RNNCell>(4, 3),
                   .torch_module = "nn.RNNCell(4, 3)",
                   .inputs = {leaf({2, 4}, 1), leaf({2, 3}, 2)},
                   .python = "outs = [m(in0, in1)]"});
  cases.push_back({.name = "RNNCell relu, no bias, unbatched",
                   .module = make64<RNNCell>(4, 3, false, RNNNonlinearity::ReLU),
                   .torch_module = "nn.RNNCell(4, 3, bias=False, nonlinearity='relu')",
                   .inputs = {leaf({4}, 3), leaf({3}, 4)},
                   .python = "outs = [m(in0, in1)]"});
  cases.push_back({.name = "LSTMCell, (h, c)",
                   .module = make64<LSTMCell>(3, 4),
                   .torch_module = "nn.LSTMCell(3, 4)",
                   .inputs = {leaf({2, 3}, 5), leaf({2, 4}, 6), leaf({2, 4}, 7)},
                   .python = "h, c = m(in0, (in1, in2))\nouts = [h, c]"});
  cases.push_back({.name = "LSTMCell unbatched, zero states",
                   .module = make64<LSTMCell>(3, 2),
                   .torch_module = "nn.LSTMCell(3, 2)",
                   .inputs = {leaf({3}, 8)},
                   .python = "h, c = m(in0)\nouts = [h, c]"});
  cases.push_back({.name = "GRUCell, h",
                   .module = make64<GRUCell>(3, 4),
                   .torch_module = "nn.GRUCell(3, 4)",
                   .inputs = {leaf({3, 3}, 9), leaf({3, 4}, 10)},
                   .python = "outs = [m(in0, in1)]"});
  cases.push_back({.name = "GRUCell, no bias, zero h",
                   .module = make64<GRUCell>(2, 3, false),
                   .torch_module = "nn.GRUCell(2, 3, bias=False)",
                   .inputs = {leaf({2, 2}, 11)},
                   .python = "outs = [m(in0)]"});
  cases.push_back({.name = "F::lstm_cell, weights as inputs",
                   .inputs = {leaf({2, 3}, 12), leaf({2, 2}, 13), leaf({2, 2}, 14), leaf({8, 3}, 15), leaf({8, 2}, 16),
                              leaf({8}, 17), leaf({8}, 18)},
                   .python = "h, c = torch.lstm_cell(in0, (in1, in2), in3, in4, in5, in6)\nouts = [h, c]",
                   .kiln = [](const TensorList& in) {
                     F::LSTMState s = F::lstm_cell(in[0], {in[1], in[2]}, in[3], in[4], in[5], in[6]);
                     return TensorList{s.h, s.c};
                   }});
  cases.push_back({.name = "F::gru_cell, weights as inputs",
                   .inputs = {leaf({2, 3}, 19), leaf({2, 2}, 20), leaf({6, 3}, 21), leaf({6, 2}, 22), leaf({6}, 23),
                              leaf({6}, 24)},
                   .python = "outs = [torch.gru_cell(in0, in1, in2, in3, in4, in5)]",
                   .kiln = [](const TensorList& in) {
                     return TensorList{F::gru_cell(in[0], in[1], in[2], in[3], in[4], in[5])};
                   }});
  cases.push_back({.name = "F::rnn_tanh_cell and F::rnn_relu_cell",
                   .inputs = {leaf({2, 3}, 25), leaf({2, 2}, 26), leaf({2, 3}, 27), leaf({2, 2}, 28), leaf({2}, 29)},
                   .python = "outs = [torch.rnn_tanh_cell(in0, in1, in2, in3, in4, None), "
                             "torch.rnn_relu_cell(in0, in1, in2, in3, None, in4)]",
                   .kiln = [](const TensorList& in) {
                     return TensorList{F::rnn_tanh_cell(in[0], in[1], in[2], in[3], in[4], Tensor()),
                                       F::rnn_relu_cell(in[0], in[1], in[2], in[3], Tensor(), in[4])};
                   }});
  expect_matches_torch(cases);
}

TEST(RecurrentLayers, Gradcheck) {
  // The cells in every argument.
  expect_gradcheck(
      [](const TensorList& in) {
        F::LSTMState s = F::lstm_cell(in[0], {in[1], in[2]}, in[3], in[4], in[5], in[6]);
        return TensorList{s.h, s.c};
      },
      {leaf({2, 3}, 1), leaf({2, 2}, 2), leaf({2, 2}, 3), leaf({8, 3}, 4), leaf({8, 2}, 5), leaf({8}, 6),
       leaf({8}, 7)});
  expect_gradcheck([](const TensorList& in) { return TensorList{F::gru_cell(in[0], in[1], in[2], in[3], in[4], in[5])}; },
                   {leaf({2, 3}, 8), leaf({2, 2}, 9), leaf({6, 3}, 10), leaf({6, 2}, 11), leaf({6}, 12), leaf({6}, 13)});
  expect_gradcheck([](const TensorList& in) { return TensorList{F::rnn_tanh_cell(in[0], in[1], in[2], in[3], in[4])}; },
                   {leaf({2, 3}, 14), leaf({2, 2}, 15), leaf({2, 3}, 16), leaf({2, 2}, 17), leaf({2}, 18)});
  // The stacked layers in their input and initial states.
  auto lstm = make64<LSTM>(RNNOptions(2, 2).num_layers(2).bidirectional(true));
  expect_gradcheck([&](const TensorList& in) { return (*lstm)(in); },
                   {leaf({3, 2, 2}, 19), leaf({4, 2, 2}, 20), leaf({4, 2, 2}, 21)});
  auto gru = make64<GRU>(RNNOptions(2, 3).num_layers(2).batch_first(true));
  expect_gradcheck([&](const TensorList& in) { return (*gru)(in); }, {leaf({2, 3, 2}, 22), leaf({2, 2, 3}, 23)});
  auto rnn = make64<RNN>(RNNOptions(3, 2).nonlinearity(RNNNonlinearity::ReLU).bidirectional(true));
  expect_gradcheck([&](const TensorList& in) { return (*rnn)(in); }, {leaf({4, 3}, 24), leaf({2, 2}, 25)});
  // Second derivatives, through the gates' nonlinearities.
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) {
        F::LSTMState s = F::lstm_cell(in[0], {in[1], in[2]}, in[3], in[4]);
        return TensorList{s.h, s.c};
      },
      {leaf({2, 2}, 26), leaf({2, 1}, 27), leaf({2, 1}, 28), leaf({4, 2}, 29), leaf({4, 1}, 30)});
  gradtest::expect_gradgradcheck(
      [](const TensorList& in) { return TensorList{F::gru_cell(in[0], in[1], in[2], in[3], in[4], in[5])}; },
      {leaf({2, 2}, 31), leaf({2, 2}, 32), leaf({6, 2}, 33), leaf({6, 2}, 34), leaf({6}, 35), leaf({6}, 36)});
}

TEST(RecurrentLayers, ParameterNamesShapesAndInit) {
  LSTM lstm(RNNOptions(3, 4).num_layers(2).bidirectional(true));
  // torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True).state_dict(), by hand.
  EXPECT_EQ(testing::keys_and_shapes(lstm.state_dict()),
            "weight_ih_l0:[16,3] weight_hh_l0:[16,4] bias_ih_l0:[16] bias_hh_l0:[16] "
            "weight_ih_l0_reverse:[16,3] weight_hh_l0_reverse:[16,4] bias_ih_l0_reverse:[16] bias_hh_l0_reverse:[16] "
            "weight_ih_l1:[16,8] weight_hh_l1:[16,4] bias_ih_l1:[16] bias_hh_l1:[16] "
            "weight_ih_l1_reverse:[16,8] weight_hh_l1_reverse:[16,4] bias_ih_l1_reverse:[16] bias_hh_l1_reverse:[16]");
  GRU gru(RNNOptions(2, 5).bias(false));
  EXPECT_EQ(testing::keys_and_shapes(gru.state_dict()), "weight_ih_l0:[15,2] weight_hh_l0:[15,5]");
  GRUCell cell(2, 5);
  EXPECT_EQ(testing::keys_and_shapes(cell.state_dict()),
            "weight_ih:[15,2] weight_hh:[15,5] bias_ih:[15] bias_hh:[15]");
  // Every parameter ~ U(-1/sqrt(4), 1/sqrt(4)), spread over the range.
  double largest = 0;
  for (const Tensor& p : lstm.parameters())
    for (double v : testing::values_of(p)) largest = std::max(largest, std::abs(v));
  EXPECT_LE(largest, 0.5);
  EXPECT_GT(largest, 0.45);
  EXPECT_EQ(lstm.extra_repr(), "3, 4, num_layers=2, bidirectional=True");
  EXPECT_EQ(RNN(RNNOptions(2, 3).bias(false).batch_first(true).dropout(0.25)).extra_repr(),
            "2, 3, bias=False, batch_first=True, dropout=0.25");
  EXPECT_EQ(RNNCell(2, 3, true, RNNNonlinearity::ReLU).extra_repr(), "2, 3, nonlinearity=relu");
  EXPECT_EQ(LSTMCell(2, 3, false).extra_repr(), "2, 3, bias=False");
}

TEST(RecurrentLayers, DropoutBetweenLayersOnlyInTraining) {
  Generator gen_a(7), gen_b(7);
  auto make = [](Generator* gen) {
    auto m = make64<GRU>(RNNOptions(3, 4).num_layers(2).dropout(0.5).generator(gen));
    return m;
  };
  auto a = make(&gen_a);
  auto b = make(&gen_b);
  b->load_state_dict(a->state_dict());
  Tensor x = uniform64({5, 2, 3}, 1);
  Tensor train_a = (*a)(TensorList{x})[0], train_b = (*b)(TensorList{x})[0];
  EXPECT_EQ(testing::values_of(train_a), testing::values_of(train_b));  // same generator state, same masks
  a->eval();
  Tensor eval_a = (*a)(TensorList{x})[0];
  EXPECT_NE(testing::values_of(train_a), testing::values_of(eval_a));
  // The last layer's output is not dropped: no exact zeros in it.
  for (double v : testing::values_of(train_a)) EXPECT_NE(v, 0.0);
}

TEST(RecurrentLayers, Errors) {
  expect_error([] { LSTM(3, 0); }, "LSTM: input_size and hidden_size must be positive, got 3 and 0");
  expect_error([] { GRU(RNNOptions(3, 4).num_layers(0)); }, "GRU: num_layers must be positive, got 0");
  expect_error([] { RNN(RNNOptions(3, 4).dropout(1.5)); }, "RNN: dropout must be a probability in [0, 1], got 1.5");
  expect_error([] { LSTM(RNNOptions(3, 4).nonlinearity(RNNNonlinearity::ReLU)); },
               "LSTM: nonlinearity applies to RNN only");
  auto lstm = make64<LSTM>(RNNOptions(3, 4).num_layers(2));
  expect_error([&] { (*lstm)(TensorList{uniform64({5, 2, 3, 1}, 1)}); },
               "LSTM: expected input of shape (L, N, 3) or, unbatched, (L, 3), got 4D input of shape [5, 2, 3, 1]");
  expect_error([&] { (*lstm)(TensorList{uniform64({5, 2, 2}, 1)}); },
               "LSTM: expected input_size 3 (the last dim), got input of shape [5, 2, 2]");
  expect_error([&] { (*lstm)({uniform64({5, 2, 3}, 1), uniform64({2, 2, 4}, 2)}); },
               "LSTM: expected inputs {input} or {input, h0, c0}, got 2 tensors");
  expect_error([&] { (*lstm)({uniform64({5, 2, 3}, 1), uniform64({1, 2, 4}, 2), uniform64({2, 2, 4}, 3)}); },
               "LSTM: expected h0 of shape [2, 2, 4] (num_layers * directions, N, hidden_size) for input of shape "
               "[5, 2, 3], got [1, 2, 4]");
  expect_error([&] { (*lstm)({uniform64({5, 2, 3}, 1), uniform64({2, 2, 4}, 2), uniform64({2, 3, 4}, 3)}); },
               "LSTM: expected c0 of shape [2, 2, 4]");
  expect_error([&] { (*lstm)({uniform64({5, 3}, 1), uniform64({2, 1, 4}, 2), uniform64({2, 1, 4}, 3)}); },
               "LSTM: expected h0 of shape [2, 4] (num_layers * directions, hidden_size) for input of shape [5, 3]");
  expect_error([&] { (*lstm)(TensorList{uniform64({0, 2, 3}, 1)}); }, "LSTM: expected a sequence of at least one step");
  auto gru = make64<GRU>(RNNOptions(3, 4).batch_first(true));
  expect_error([&] { (*gru)(TensorList{uniform64({3}, 1)}); }, "GRU: expected input of shape (N, L, 3)");
  expect_error([&] { (*gru)({uniform64({2, 5, 3}, 1), uniform64({1, 5, 4}, 2)}); },
               "GRU: expected h0 of shape [1, 2, 4]");

  expect_error([] { LSTMCell(0, 4); }, "LSTMCell: input_size and hidden_size must be positive");
  auto cell = make64<GRUCell>(3, 4);
  expect_error([&] { (*cell)(TensorList{uniform64({2, 3, 1}, 1)}); },
               "GRUCell: expected input of shape (N, 3) or (3), got 3D input of shape [2, 3, 1]");
  expect_error([&] { (*cell)(TensorList{uniform64({2, 5}, 1)}); },
               "GRUCell: expected input_size 3 (the last dim), got input of shape [2, 5]");
  expect_error([&] { (*cell)({uniform64({2, 3}, 1), uniform64({3, 4}, 2)}); },
               "GRUCell: expected h of shape [2, 4] for input of shape [2, 3], got [3, 4]");
  expect_error([&] { (*cell)({uniform64({2, 3}, 1), uniform64({2, 4}, 2), uniform64({2, 4}, 3)}); },
               "GRUCell: expected inputs {input} or {input, h}, got 3 tensors");
  auto lstm_cell = make64<LSTMCell>(3, 4);
  expect_error([&] { (*lstm_cell)({uniform64({2, 3}, 1), uniform64({2, 4}, 2)}); },
               "LSTMCell: expected inputs {input} or {input, h, c}, got 2 tensors");
  expect_error([&] { (*lstm_cell)({uniform64({3}, 1), uniform64({4}, 2), uniform64({2, 4}, 3)}); },
               "LSTMCell: expected c of shape [4] for input of shape [3], got [2, 4]");

  expect_error([] { F::gru_cell(uniform64({2, 3}, 1), uniform64({2, 2}, 2), uniform64({6, 3}, 3), uniform64({4, 2}, 4)); },
               "gru_cell: expected w_hh of shape (3*H, H), got [4, 2]");
  expect_error([] { F::rnn_tanh_cell(uniform64({2, 3}, 1), uniform64({2, 2}, 2), uniform64({2, 4}, 3), uniform64({2, 2}, 4)); },
               "rnn_tanh_cell: expected x of shape [N, 4] (w_ih is [2, 4]), got [2, 3]");
  expect_error([] {
    F::lstm_cell(uniform64({2, 3}, 1), {uniform64({2, 2}, 2), uniform64({2, 3}, 2)}, uniform64({8, 3}, 3),
                 uniform64({8, 2}, 4));
  }, "lstm_cell: expected c of shape [2, 2] (that of h), got [2, 3]");
  expect_error([] {
    F::lstm_cell(uniform64({2, 3}, 1), {uniform64({2, 2}, 2), uniform64({2, 2}, 2)}, uniform64({8, 3}, 3),
                 uniform64({8, 2}, 4), uniform64({6}, 5));
  }, "lstm_cell: expected b_ih of shape [8], got [6]");
}

}  // namespace
}  // namespace kiln::nn
