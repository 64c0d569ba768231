// Datasets: indexable collections of (data, target) examples, the input side
// of the data pipeline (samplers choose indices, the DataLoader batches them).
//
// Note [Dataset threading]
// A DataLoader with num_workers > 0 calls get() and get_batch() of one
// Dataset from several threads at once, so both must be safe to call
// concurrently: they are const and must not mutate shared state without
// their own locking. Datasets that read files open them per call (or guard a
// shared handle); in-memory datasets only read.
//
//   auto ds = std::make_shared<kiln::data::TensorDataset>(images, labels);
//   kiln::data::Batch b = ds->get_batch({0, 5, 7});  // b.data: (3, ...)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/typed_dataset.h"
#include "tensor/tensor.h"

namespace kiln::data {

// One example. `target` may be undefined for unlabelled data.
struct Example {
  Tensor data;
  Tensor target;
};

// Examples stacked along a new dim 0: data (B, ...) and target (B, ...),
// target undefined when the examples have none.
struct Batch {
  Tensor data;
  Tensor target;
};

// The TypedDataset of (data, target) examples (data/typed_dataset.h gives
// size(), get(), name() and check_index()), with a batched fast path.
class Dataset : public TypedDataset<Example> {
 public:
  // The examples at `indices`, stacked along dim 0, in the order given. The
  // default calls get() per index and stacks; datasets with their data in
  // one tensor override it with a gather (TensorDataset). `indices` must be
  // non-empty and the examples' shapes equal.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// A dataset held in memory as two tensors whose dim 0 runs over examples:
// example i is (data[i], targets[i]). get() returns views into the tensors,
// get_batch() one index_select per tensor. `targets` may be undefined.
class TensorDataset : public Dataset {
 public:
  // data: (N, ...), targets: (N, ...) or undefined.
  TensorDataset(Tensor data, Tensor targets);

  int64_t size() const override { return data_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  std::string name() const override { return "TensorDataset"; }

  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_;     // (N, ...)
  Tensor targets_;  // (N, ...) or undefined
};

}  // namespace kiln::data
