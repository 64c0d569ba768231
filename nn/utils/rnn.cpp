#include "nn/utils/rnn.h"

#include <algorithm>
#include <numeric>

#include "autograd/ops.h"
#include "nn/functional_composite.h"
#include "tensor/factory.h"

namespace kiln::nn::utils::rnn {

namespace {

// x (rows, *) padded after its first dim to `rows` rows of `value`.
Tensor pad_rows(const Tensor& x, int64_t rows, double value) {
  if (x.size(0) == rows) return x;
  std::vector<int64_t> pad(static_cast<size_t>(2 * x.dim()), 0);
  pad.back() = rows - x.size(0);  // the last pair is dim 0's
  return functional::pad(x, pad, functional::PadMode::Constant, value);
}

Tensor int64_vector(const std::vector<int64_t>& v) { return from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }

std::vector<int64_t> int64_values(const Tensor& t) {
  Tensor host = t.to(DType::Int64, kCPU).contiguous();
  return std::vector<int64_t>(host.data<int64_t>(), host.data<int64_t>() + host.numel());
}

}  // namespace

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  KILN_CHECK(input.defined() && input.dim() >= 2, "pack_padded_sequence: expected input of shape ",
             batch_first ? "(B, T, *)" : "(T, B, *)", ", got ", input.defined() ? input.shape() : Shape{});
  const int64_t batch_dim = batch_first ? 0 : 1;
  const int64_t batch = input.size(batch_dim), steps = input.size(1 - batch_dim);
  KILN_CHECK(static_cast<int64_t>(lengths.size()) == batch, "pack_padded_sequence: ", lengths.size(),
             " lengths for a batch of ", batch, " (input of shape ", input.shape(), ")");
  for (int64_t length : lengths)
    KILN_CHECK(length >= 1 && length <= steps, "pack_padded_sequence: every length must be in [1, ", steps,
               "] (the input's steps), got lengths ", lengths);
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  PackedSequence packed;
  Tensor time_major = batch_first ? input.transpose(0, 1) : input;  // (T, B, *)
  if (enforce_sorted) {
    KILN_CHECK(std::is_sorted(lengths.rbegin(), lengths.rend()), "pack_padded_sequence: lengths ", lengths,
               " are not in decreasing order; sort the batch or pass enforce_sorted=false");
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    packed.sorted_indices = int64_vector(order);
    packed.unsorted_indices = int64_vector(inverse);
    time_major = index_select(time_major, 1, packed.sorted_indices.to(input.device()));
  }
  // Step t keeps the sequences longer than t: a prefix of the sorted batch.
  const int64_t longest = lengths[static_cast<size_t>(order[0])];
  std::vector<int64_t> batch_sizes(static_cast<size_t>(longest));
  std::vector<Tensor> steps_data;
  for (int64_t t = 0; t < longest; ++t) {
    const auto running = std::count_if(lengths.begin(), lengths.end(), [t](int64_t l) { return l > t; });
    batch_sizes[static_cast<size_t>(t)] = running;
    steps_data.push_back(time_major.select(0, t).narrow(0, 0, running));
  }
  packed.data = cat(steps_data, 0);
  packed.batch_sizes = int64_vector(batch_sizes);
  return packed;
}

PaddedSequence pad_packed_sequence(const PackedSequence& sequence, bool batch_first, double padding_value,
                                   std::optional<int64_t> total_length) {
  const std::vector<int64_t> batch_sizes = int64_values(sequence.batch_sizes);
  KILN_CHECK(!batch_sizes.empty() && sequence.data.defined(), "pad_packed_sequence: the sequence is empty");
  const int64_t batch = batch_sizes[0], longest = static_cast<int64_t>(batch_sizes.size());
  const int64_t steps = total_length.value_or(longest);
  KILN_CHECK(steps >= longest, "pad_packed_sequence: total_length ", steps, " is shorter than the longest sequence, ",
             longest);
  std::vector<Tensor> rows;  // one (B, *) per step
  int64_t offset = 0;
  for (int64_t bs : batch_sizes) {
    rows.push_back(pad_rows(sequence.data.narrow(0, offset, bs), batch, padding_value));
    offset += bs;
  }
  Tensor padded = pad_rows(stack(rows, 0), steps, padding_value);  // (T, B, *)
  std::vector<int64_t> lengths(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    lengths[static_cast<size_t>(b)] =
        std::count_if(batch_sizes.begin(), batch_sizes.end(), [b](int64_t bs) { return bs > b; });
  Tensor length_tensor = int64_vector(lengths);
  if (sequence.unsorted_indices.defined()) {
    padded = index_select(padded, 1, sequence.unsorted_indices.to(padded.device()));
    length_tensor = index_select(length_tensor, 0, sequence.unsorted_indices);
  }
  return {batch_first ? padded.transpose(0, 1) : padded, length_tensor};
}

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value) {
  KILN_CHECK(!sequences.empty(), "pad_sequence: no sequences given");
  int64_t longest = 0;
  for (const Tensor& s : sequences) {
    KILN_CHECK(s.defined() && s.dim() >= 1, "pad_sequence: every sequence needs a first (time) dim");
    longest = std::max(longest, s.size(0));
  }
  std::vector<Tensor> padded;
  for (const Tensor& s : sequences) padded.push_back(pad_rows(s, longest, padding_value));
  return stack(padded, batch_first ? 0 : 1);
}

PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted) {
  std::vector<int64_t> lengths;
  for (const Tensor& s : sequences) lengths.push_back(s.defined() && s.dim() >= 1 ? s.size(0) : 0);
  return pack_padded_sequence(pad_sequence(sequences), lengths, /*batch_first=*/false, enforce_sorted);
}

}  // namespace kiln::nn::utils::rnn
