// The default batch builder and the in-memory TensorDataset.
//
// Loading is gradient-free, so this file calls the raw kiln::ops functions:
// a batch is input data, never part of an autograd graph, and the loader's
// worker threads should not touch the graph machinery at all.
#include "data/dataset.h"

#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/index.h"
#include "tensor/shape_ops.h"

namespace kiln::data {

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  KILN_CHECK(!indices.empty(), name(), ": get_batch needs at least one index");
  std::vector<Tensor> data, targets;
  data.reserve(indices.size());
  targets.reserve(indices.size());
  // Either every example has a target or none has: a batch cannot mix.
  bool with_target = false;
  for (size_t k = 0; k < indices.size(); ++k) {
    Example example = get(indices[k]);
    KILN_CHECK(example.data.defined(), name(), ": example ", indices[k], " has no data tensor");
    if (k == 0) with_target = example.target.defined();
    KILN_CHECK(example.target.defined() == with_target, name(), ": example ", indices[k],
               (with_target ? " has no target but example " : " has a target but example "), indices[0],
               " in the same batch ", (with_target ? "has one" : "has none"));
    data.push_back(std::move(example.data));
    if (with_target) targets.push_back(std::move(example.target));
  }
  Batch batch;
  batch.data = ops::stack(data, 0);
  if (!targets.empty()) batch.target = ops::stack(targets, 0);
  return batch;
}

TensorDataset::TensorDataset(Tensor data, Tensor targets) : data_(std::move(data)), targets_(std::move(targets)) {
  KILN_CHECK(data_.defined(), "TensorDataset: the data tensor is undefined");
  KILN_CHECK(data_.dim() >= 1, "TensorDataset: data must have a dim 0 over examples, got shape ", data_.shape());
  if (targets_.defined()) {
    KILN_CHECK(targets_.dim() >= 1, "TensorDataset: targets must have a dim 0 over examples, got shape ",
               targets_.shape());
    KILN_CHECK(targets_.size(0) == data_.size(0), "TensorDataset: data has ", data_.size(0), " examples (shape ",
               data_.shape(), ") but targets has ", targets_.size(0), " (shape ", targets_.shape(), ")");
  }
}

Example TensorDataset::get(int64_t index) const {
  check_index(index);
  Example example;
  example.data = data_.select(0, index);
  if (targets_.defined()) example.target = targets_.select(0, index);
  return example;
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  KILN_CHECK(!indices.empty(), name(), ": get_batch needs at least one index");
  for (int64_t index : indices) check_index(index);
  // index: (B,) Int64 on the data's device, so a CUDA dataset gathers there.
  Tensor index = from_vector<int64_t>(indices, {static_cast<int64_t>(indices.size())}, data_.device());
  Batch batch;
  batch.data = ops::index_select(data_, 0, index);
  if (targets_.defined()) {
    Tensor target_index = index.device() == targets_.device() ? index : index.to(targets_.device());
    batch.target = ops::index_select(targets_, 0, target_index);
  }
  return batch;
}

}  // namespace kiln::data
