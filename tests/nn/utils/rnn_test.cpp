// torch.nn.utils.rnn's packing and padding (nn/utils/rnn.h): against torch
// 1.13 on the same inputs (data, batch sizes, indices, padded results and
// the gradients flowing through them), round trips, and the errors.
#include "kiln.h"
#include "nn/nn_test_util.h"
#include "nn/torch_oracle.h"

namespace kiln::nn {
namespace {

namespace rnn = kiln::nn::utils::rnn;
using gradtest::leaf;
using gradtest::uniform64;
using testing::expect_error;
using testing::expect_matches_torch;
using testing::OracleCase;
using testing::values_of;

TensorList packed_outputs(const rnn::PackedSequence& p) {
  TensorList outs{p.data, p.batch_sizes};
  if (p.sorted_indices.defined()) {
    outs.push_back(p.sorted_indices);
    outs.push_back(p.unsorted_indices);
  }
  return outs;
}

const char* kTorchPacked =
    "\nouts = [p.data, p.batch_sizes] + ([p.sorted_indices, p.unsorted_indices] if p.sorted_indices is not None "
    "else [])";

TEST(RnnUtils, MatchesTorch) {
  SKIP_WITHOUT_TORCH();
  std::vector<OracleCase> cases = {
      {.name = "pack_padded_sequence, sorted",
       .inputs = {leaf({5, 3, 2}, 1)},
       .python =
           std::string("from torch.nn.utils.rnn import *\np = pack_padded_sequence(in0, [5, 3, 2])") + kTorchPacked,
       .kiln =
           [](const TensorList& in) {
             return packed_outputs(rnn::pack_padded_sequence(in[0], {5, 3, 2}));
           }},
      {.name = "pack_padded_sequence, batch_first, unsorted",
       .inputs = {leaf({4, 5, 3}, 2)},
       .python = std::string("from torch.nn.utils.rnn import *\n"
                             "p = pack_padded_sequence(in0, [2, 5, 1, 3], batch_first=True, enforce_sorted=False)") +
                 kTorchPacked,
       .kiln =
           [](const TensorList& in) {
             return packed_outputs(rnn::pack_padded_sequence(in[0], {2, 5, 1, 3}, /*batch_first=*/true, false));
           }},
      {.name = "pad_packed_sequence of an unsorted pack",
       .inputs = {leaf({4, 3, 2}, 3)},
       .python = "from torch.nn.utils.rnn import *\n"
                 "p = pack_padded_sequence(in0, [2, 4, 3], enforce_sorted=False)\n"
                 "u, l = pad_packed_sequence(p, batch_first=True, padding_value=-1.5, total_length=6)\n"
                 "outs = [u, l]",
       .kiln =
           [](const TensorList& in) {
             auto [u, l] = rnn::pad_packed_sequence(rnn::pack_padded_sequence(in[0], {2, 4, 3}, false, false),
                                                    /*batch_first=*/true, -1.5, 6);
             return TensorList{u, l};
           }},
      {.name = "pad_sequence",
       .inputs = {leaf({4, 2}, 4), leaf({2, 2}, 5), leaf({3, 2}, 6)},
       .python = "from torch.nn.utils.rnn import *\n"
                 "outs = [pad_sequence([in0, in1, in2], batch_first=True, padding_value=0.5), "
                 "pad_sequence([in0, in1, in2])]",
       .kiln =
           [](const TensorList& in) {
             return TensorList{rnn::pad_sequence({in[0], in[1], in[2]}, true, 0.5),
                               rnn::pad_sequence({in[0], in[1], in[2]})};
           }},
      {.name = "pack_sequence",
       .inputs = {leaf({2}, 7), leaf({5}, 8), leaf({3}, 9)},
       .python = std::string("from torch.nn.utils.rnn import *\np = pack_sequence([in0, in1, in2], "
                             "enforce_sorted=False)") +
                 kTorchPacked,
       .kiln =
           [](const TensorList& in) {
             return packed_outputs(rnn::pack_sequence({in[0], in[1], in[2]}, false));
           }},
  };
  expect_matches_torch(cases);
}

TEST(RnnUtils, RoundTrip) {
  // Padding past each end is dropped by packing and restored as padding_value.
  Tensor x = uniform64({2, 6, 3}, 1);  // (B, T, *)
  const std::vector<int64_t> lengths{3, 6};
  auto [padded, got_lengths] = rnn::pad_packed_sequence(rnn::pack_padded_sequence(x, lengths, true, false), true);
  EXPECT_EQ(values_of(got_lengths), (std::vector<double>{3, 6}));
  EXPECT_EQ(padded.shape(), x.shape());
  EXPECT_EQ(values_of(padded.select(0, 1)), values_of(x.select(0, 1)));
  EXPECT_EQ(values_of(padded.select(0, 0).narrow(0, 0, 3)), values_of(x.select(0, 0).narrow(0, 0, 3)));
  EXPECT_EQ(values_of(padded.select(0, 0).narrow(0, 3, 3)), std::vector<double>(9, 0.0));
  // Equal lengths keep their order (a stable sort).
  rnn::PackedSequence p = rnn::pack_padded_sequence(uniform64({3, 3}, 2), {2, 3, 2}, false, false);
  EXPECT_EQ(values_of(p.sorted_indices), (std::vector<double>{1, 0, 2}));
  EXPECT_EQ(values_of(p.batch_sizes), (std::vector<double>{3, 3, 1}));
}

TEST(RnnUtils, Errors) {
  Tensor x = uniform64({4, 3, 2}, 1);
  expect_error(
      [&] {
        rnn::pack_padded_sequence(x, {2, 4, 3});
      },
      "pack_padded_sequence: lengths [2, 4, 3] are not in decreasing order");
  expect_error(
      [&] {
        rnn::pack_padded_sequence(x, {4, 3, 0});
      },
      "pack_padded_sequence: every length must be in [1, 4] (the input's steps), got lengths [4, 3, 0]");
  expect_error([&] { rnn::pack_padded_sequence(x, {5, 3, 1}); }, "every length must be in [1, 4]");
  expect_error([&] { rnn::pack_padded_sequence(x, {4, 3}); }, "pack_padded_sequence: 2 lengths for a batch of 3");
  expect_error(
      [&] {
        rnn::pad_packed_sequence(rnn::pack_padded_sequence(x, {4, 3, 1}), false, 0.0, 3);
      },
      "pad_packed_sequence: total_length 3 is shorter than the longest sequence, 4");
}

}  // namespace
}  // namespace kiln::nn
