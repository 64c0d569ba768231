// LSTM with proj_size (torch's LSTMP): against PyTorch on the same weights,
// inputs and states (outputs, final states, the gradients of inputs,
// states and every parameter, weight_hr included, and the state-dict keys),
// the parameters' names and shapes by hand, gradcheck, and the errors.
#include <cmath>

#include "nn/nn_test_util.h"
#include "nn/recurrent.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

using gradtest::expect_gradcheck;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::make64;
using testing::expect_matches_torch;
using testing::OracleCase;

TEST(LSTMProjection, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  const std::string call = "o, (h, c) = m(in0, (in1, in2))\nouts = [o, h, c]";
  std::vector<OracleCase> cases = {
      {.name = "LSTM(3, 5, proj_size=2), (h0, c0)",
       .module = make64<LSTM>(LSTMOptions(3, 5).proj_size(2)),
       .torch_module = "nn.LSTM(3, 5, proj_size=2)",
       .inputs = {leaf({4, 2, 3}, 1), leaf({1, 2, 2}, 2), leaf({1, 2, 5}, 3)},
       .python = call},
      {.name = "LSTM, 2 layers, bidirectional, batch_first, proj_size 3",
       .module = make64<LSTM>(LSTMOptions(2, 4).num_layers(2).bidirectional(true).batch_first(true).proj_size(3)),
       .torch_module = "nn.LSTM(2, 4, num_layers=2, bidirectional=True, batch_first=True, proj_size=3)",
       .inputs = {leaf({2, 5, 2}, 4), leaf({4, 2, 3}, 5), leaf({4, 2, 4}, 6)},
       .python = call},
      {.name = "LSTM unbatched, no bias, proj_size 1, zero states",
       .module = make64<LSTM>(LSTMOptions(3, 2).bias(false).proj_size(1)),
       .torch_module = "nn.LSTM(3, 2, bias=False, proj_size=1)",
       .inputs = {leaf({6, 3}, 7)},
       .python = "o, (h, c) = m(in0)\nouts = [o, h, c]"},
  };
  expect_matches_torch(cases);
}

TEST(LSTMProjection, ParametersAndShapes) {
  LSTM lstm(LSTMOptions(3, 5).num_layers(2).bidirectional(true).proj_size(2));
  // torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2).state_dict(): weight_hr after the biases.
  EXPECT_EQ(testing::keys_and_shapes(lstm.state_dict()),
            "weight_ih_l0:[20,3] weight_hh_l0:[20,2] bias_ih_l0:[20] bias_hh_l0:[20] weight_hr_l0:[2,5] "
            "weight_ih_l0_reverse:[20,3] weight_hh_l0_reverse:[20,2] bias_ih_l0_reverse:[20] "
            "bias_hh_l0_reverse:[20] weight_hr_l0_reverse:[2,5] "
            "weight_ih_l1:[20,4] weight_hh_l1:[20,2] bias_ih_l1:[20] bias_hh_l1:[20] weight_hr_l1:[2,5] "
            "weight_ih_l1_reverse:[20,4] weight_hh_l1_reverse:[20,2] bias_ih_l1_reverse:[20] "
            "bias_hh_l1_reverse:[20] weight_hr_l1_reverse:[2,5]");
  EXPECT_EQ(lstm.extra_repr(), "3, 5, proj_size=2, num_layers=2, bidirectional=True");
  // Every parameter, weight_hr too, ~ U(-1/sqrt(5), 1/sqrt(5)).
  const double bound = 1 / std::sqrt(5.0);
  for (double v : testing::values_of(lstm.get_parameter("weight_hr_l1_reverse"))) EXPECT_LE(std::abs(v), bound);
  // h has proj_size features, c hidden_size.
  const TensorList out = lstm(TensorList{uniform64({7, 3, 3}, 1).to(DType::Float32)});
  EXPECT_EQ(out[0].shape(), (Shape{7, 3, 4}));
  EXPECT_EQ(out[1].shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(out[2].shape(), (Shape{4, 3, 5}));
}

TEST(LSTMProjection, Gradcheck) {
  auto lstm = make64<LSTM>(LSTMOptions(2, 3).num_layers(2).proj_size(2));
  expect_gradcheck([&](const TensorList& in) { return (*lstm)(in); },
                   {leaf({3, 2, 2}, 1), leaf({2, 2, 2}, 2), leaf({2, 2, 3}, 3)});
}

TEST(LSTMProjection, Errors) {
  expect_error([] { GRU(GRUOptions(3, 4).proj_size(2)); }, "GRU: proj_size applies to LSTM only, got 2");
  expect_error([] { RNN(RNNOptions(3, 4).proj_size(1)); }, "RNN: proj_size applies to LSTM only");
  expect_error([] { LSTM(LSTMOptions(3, 4).proj_size(4)); },
               "LSTM: proj_size (4) must be smaller than hidden_size (4)");
  expect_error([] { LSTM(LSTMOptions(3, 4).proj_size(-1)); },
               "LSTM: proj_size must be positive, or 0 for no projection, got -1");
  auto lstm = make64<LSTM>(LSTMOptions(3, 4).proj_size(2));
  expect_error(
      [&] {
        (*lstm)({uniform64({5, 2, 3}, 1), uniform64({1, 2, 4}, 2), uniform64({1, 2, 4}, 3)});
      },
      "LSTM: expected h0 of shape [1, 2, 2] (num_layers * directions, N, proj_size) for input of shape "
      "[5, 2, 3], got [1, 2, 4]");
  expect_error(
      [&] {
        (*lstm)({uniform64({5, 2, 3}, 1), uniform64({1, 2, 2}, 2), uniform64({1, 2, 2}, 3)});
      },
      "LSTM: expected c0 of shape [1, 2, 4] (num_layers * directions, N, hidden_size)");
}

}  // namespace
}  // namespace kiln::nn
