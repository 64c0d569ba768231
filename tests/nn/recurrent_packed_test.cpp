// RNN, LSTM and GRU over a PackedSequence (RNNBase::forward_packed): against
// torch 1.13 on the same weights, packed inputs and initial states (packed
// outputs, final states and every gradient), against running each sequence
// alone through forward_many (no torch needed), and the errors.
#include <algorithm>

#include "nn/nn_test_util.h"
#include "nn/recurrent.h"
#include "nn/torch_oracle.h"
#include "nn/utils/rnn.h"

namespace kiln::nn {
namespace {

namespace rnn = kiln::nn::utils::rnn;
using gradtest::leaf;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::make64;
using testing::OracleCase;
using testing::values_of;

// The case's layer over in0 packed with `lengths`, from in1 (and in2) when
// given: {output data, h_n[, c_n]}.
std::function<TensorList(const TensorList&)> packed_run(std::shared_ptr<RNNBase> m, std::vector<int64_t> lengths,
                                                        bool batch_first, bool sorted) {
  return [m, lengths, batch_first, sorted](const TensorList& in) {
    const auto p = rnn::pack_padded_sequence(in[0], lengths, batch_first, sorted);
    const auto r = m->forward_packed(p, in.size() > 1 ? in[1] : Tensor(), in.size() > 2 ? in[2] : Tensor());
    TensorList out{r.output.data, r.h_n};
    if (r.c_n.defined()) out.push_back(r.c_n);
    return out;
  };
}

TEST(RecurrentPacked, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases;
  {
    auto m = make64<LSTM>(RNNOptions(3, 4).num_layers(2).bidirectional(true));
    cases.push_back({.name = "LSTM, 2 layers, bidirectional, unsorted lengths, (h0, c0)",
                     .module = m,
                     .torch_module = "nn.LSTM(3, 4, num_layers=2, bidirectional=True)",
                     .inputs = {leaf({5, 3, 3}, 1), leaf({4, 3, 4}, 2), leaf({4, 3, 4}, 3)},
                     .python = "from torch.nn.utils.rnn import *\n"
                               "p = pack_padded_sequence(in0, [3, 5, 2], enforce_sorted=False)\n"
                               "o, (h, c) = m(p, (in1, in2))\nouts = [o.data, h, c]",
                     .kiln = packed_run(m, {3, 5, 2}, false, false)});
  }
  {
    auto m = make64<GRU>(RNNOptions(3, 4).batch_first(true));
    cases.push_back({.name = "GRU, batch_first, sorted lengths with a tie, zero h0",
                     .module = m,
                     .torch_module = "nn.GRU(3, 4, batch_first=True)",
                     .inputs = {leaf({3, 4, 3}, 4)},
                     .python = "from torch.nn.utils.rnn import *\n"
                               "p = pack_padded_sequence(in0, [4, 4, 1], batch_first=True)\n"
                               "o, h = m(p)\nouts = [o.data, h]",
                     .kiln = packed_run(m, {4, 4, 1}, true, true)});
  }
  {
    auto m = make64<RNN>(RNNOptions(2, 3).nonlinearity(RNNNonlinearity::ReLU).bidirectional(true));
    cases.push_back({.name = "RNN relu, bidirectional, unsorted, h0",
                     .module = m,
                     .torch_module = "nn.RNN(2, 3, nonlinearity='relu', bidirectional=True)",
                     .inputs = {leaf({4, 4, 2}, 5), leaf({2, 4, 3}, 6)},
                     .python = "from torch.nn.utils.rnn import *\n"
                               "p = pack_padded_sequence(in0, [2, 4, 1, 3], enforce_sorted=False)\n"
                               "o, h = m(p, in1)\nouts = [o.data, h]",
                     .kiln = packed_run(m, {2, 4, 1, 3}, false, false)});
  }
  {
    auto m = make64<LSTM>(RNNOptions(3, 5).proj_size(2));
    cases.push_back({.name = "LSTM with proj_size, sorted, zero states",
                     .module = m,
                     .torch_module = "nn.LSTM(3, 5, proj_size=2)",
                     .inputs = {leaf({4, 2, 3}, 7)},
                     .python = "from torch.nn.utils.rnn import *\n"
                               "p = pack_padded_sequence(in0, [4, 2])\n"
                               "o, (h, c) = m(p)\nouts = [o.data, h, c]",
                     .kiln = packed_run(m, {4, 2}, false, true)});
  }
  expect_matches_torch(cases);
}

// Each sequence of a packed batch gives what it gives alone, unpadded: its
// output steps and its final states (both directions, both layers).
TEST(RecurrentPacked, EachSequenceAsIfRunAlone) {
  auto m = make64<LSTM>(RNNOptions(2, 3).num_layers(2).bidirectional(true));
  m->eval();
  const std::vector<int64_t> lengths = {2, 5, 1, 4};
  const Tensor x = gradtest::uniform64({5, 4, 2}, 20);
  const Tensor h0 = gradtest::uniform64({4, 4, 3}, 21), c0 = gradtest::uniform64({4, 4, 3}, 22);
  const auto r = m->forward_packed(rnn::pack_padded_sequence(x, lengths, false, false), h0, c0);
  const auto [padded, got_lengths] = rnn::pad_packed_sequence(r.output);
  EXPECT_EQ(values_of(got_lengths), (std::vector<double>{2, 5, 1, 4}));
  for (int64_t b = 0; b < 4; ++b) {
    const int64_t len = lengths[static_cast<size_t>(b)];
    const TensorList alone = (*m)(TensorList{x.narrow(0, 0, len).select(1, b), h0.select(1, b), c0.select(1, b)});
    EXPECT_EQ(values_of(padded.narrow(0, 0, len).select(1, b)), values_of(alone[0])) << "sequence " << b;
    EXPECT_EQ(values_of(r.h_n.select(1, b)), values_of(alone[1])) << "sequence " << b;
    EXPECT_EQ(values_of(r.c_n.select(1, b)), values_of(alone[2])) << "sequence " << b;
  }
  // The output keeps the input's packing.
  const auto in = rnn::pack_padded_sequence(x, lengths, false, false);
  EXPECT_EQ(values_of(r.output.batch_sizes), values_of(in.batch_sizes));
  EXPECT_EQ(values_of(r.output.sorted_indices), values_of(in.sorted_indices));
  EXPECT_EQ(values_of(r.output.unsorted_indices), values_of(in.unsorted_indices));
}

TEST(RecurrentPacked, BadInputsAreErrors) {
  auto lstm = make64<LSTM>(3, 4);
  auto gru = make64<GRU>(3, 4);
  const Tensor x = gradtest::uniform64({4, 2, 3}, 30);
  const auto p = rnn::pack_padded_sequence(x, {4, 2});
  rnn::PackedSequence wide = p;
  wide.data = gradtest::uniform64({6, 5}, 31);
  expect_error([&] { lstm->forward_packed(wide); }, "LSTM: expected a PackedSequence of data (sum of the lengths, 3)");
  rnn::PackedSequence no_sizes = p;
  no_sizes.batch_sizes = Tensor();
  expect_error([&] { lstm->forward_packed(no_sizes); }, "LSTM: the PackedSequence has no batch_sizes");
  rnn::PackedSequence short_data = p;
  short_data.data = p.data.narrow(0, 0, 5);
  expect_error([&] { gru->forward_packed(short_data); }, "GRU: the PackedSequence's batch_sizes add up to 6 steps but its data has 5");
  expect_error([&] { gru->forward_packed(p, Tensor(), gradtest::uniform64({1, 2, 4}, 32)); },
               "GRU: c0 is the LSTM's only");
  expect_error([&] { lstm->forward_packed(p, gradtest::uniform64({1, 3, 4}, 33)); },
               "LSTM: expected h0 of shape [1, 2, 4]");
}

}  // namespace
}  // namespace kiln::nn
