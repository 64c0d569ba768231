// torch.nn.utils.rnn: sequences of different lengths as one padded tensor
// or as a PackedSequence, and the conversions between them.
//
//   namespace rnn = kiln::nn::utils::rnn;
//   Tensor padded = rnn::pad_sequence({a, b, c});                 // (max L, 3, *)
//   rnn::PackedSequence p = rnn::pack_padded_sequence(padded, {5, 2, 4}, false, /*enforce_sorted=*/false);
//   auto [unpacked, lengths] = rnn::pad_packed_sequence(p);     // padded again, lengths {5, 2, 4}
//
// Every function is a composite of differentiable ops (narrow, cat, pad,
// index_select; Note [Composite layers] in nn/functional_composite.h), so
// gradients flow between the padded and the packed forms. RNN, LSTM and
// GRU take one through RNNBase::forward_packed (nn/recurrent.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tensor/tensor.h"

namespace kiln::nn::utils::rnn {

// torch.nn.utils.rnn.PackedSequence: the time steps of a batch of
// sequences sorted by decreasing length, step after step: data holds the
// batch_sizes[0] sequences' first elements, then the batch_sizes[1] that are
// still running at step 1, and so on. batch_sizes (T), sorted_indices and
// unsorted_indices (B) are Int64 on the CPU; the indices are undefined when
// the batch was packed already sorted (enforce_sorted), else
// sorted_indices[i] is the original batch index of the i-th longest
// sequence and unsorted_indices its inverse.
struct PackedSequence {
  Tensor data;  // (sum of the lengths, *)
  Tensor batch_sizes;
  Tensor sorted_indices;
  Tensor unsorted_indices;
};

// input (T, B, *), or (B, T, *) with batch_first, whose sequence b is the
// first lengths[b] steps. Each length must be in [1, T]; with
// enforce_sorted they must be in decreasing order, else the batch is sorted
// first (stably: equal lengths keep their order).
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);

struct PaddedSequence {
  Tensor padded;   // (T, B, *), or (B, T, *) with batch_first
  Tensor lengths;  // (B) Int64 on the CPU, in the original batch order
};
// pack_padded_sequence's inverse: steps past a sequence's end hold
// padding_value; T is the longest length, or total_length (which may not be
// shorter).
PaddedSequence pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false, double padding_value = 0.0,
                                   std::optional<int64_t> total_length = std::nullopt);

// sequences (L_b, *), the * alike -> (max L, B, *), or (B, max L, *) with
// batch_first, padded after each end with padding_value.
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0);

// pack_padded_sequence of pad_sequence(sequences) with their lengths.
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);

}  // namespace kiln::nn::utils::rnn
