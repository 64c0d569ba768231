// The leaves of default_collate (Note [Default collate] in data/collate.h):
// stacking tensors, (data, target) examples and numbers.
#include "data/collate.h"

#include "tensor/factory.h"
#include "tensor/shape_ops.h"

namespace kiln::data {

namespace collate_detail {

void check_not_empty(size_t batch_size) { KILN_CHECK(batch_size > 0, "default_collate: the batch is empty"); }

Tensor numbers_to_tensor(const std::vector<bool>& values) {
  return from_vector<bool>(values, {static_cast<int64_t>(values.size())});
}
Tensor numbers_to_tensor(const std::vector<int64_t>& values) {
  return from_vector<int64_t>(values, {static_cast<int64_t>(values.size())});
}
Tensor numbers_to_tensor(const std::vector<float>& values) {
  return from_vector<float>(values, {static_cast<int64_t>(values.size())});
}
Tensor numbers_to_tensor(const std::vector<double>& values) {
  return from_vector<double>(values, {static_cast<int64_t>(values.size())});
}

}  // namespace collate_detail

namespace {

// The checks ops::stack would make, worded for a batch: which example of it
// differs and how to fix that, rather than "stack: shapes differ".
void check_stackable(const std::vector<Tensor>& examples, const char* what) {
  collate_detail::check_not_empty(examples.size());
  for (size_t k = 0; k < examples.size(); ++k) {
    KILN_CHECK(examples[k].defined(), "default_collate: the ", what, " of example ", k,
               " of the batch is an undefined tensor");
    KILN_CHECK(examples[k].shape() == examples[0].shape(), "default_collate: the ", what, " of example ", k,
               " of the batch has shape ", examples[k].shape(), " but example 0 has ", examples[0].shape(),
               "; make them equal in a collate function (e.g. by padding)");
    KILN_CHECK(examples[k].dtype() == examples[0].dtype(), "default_collate: the ", what, " of example ", k,
               " of the batch is ", examples[k].dtype(), " but example 0 is ", examples[0].dtype());
    KILN_CHECK(examples[k].device() == examples[0].device(), "default_collate: the ", what, " of example ", k,
               " of the batch is on ", examples[k].device(), " but example 0 is on ", examples[0].device());
  }
}

}  // namespace

Tensor DefaultCollate<Tensor>::apply(std::vector<Tensor> examples) {
  check_stackable(examples, "tensor");
  return ops::stack(examples, 0);
}

Batch DefaultCollate<Example>::apply(std::vector<Example> examples) {
  collate_detail::check_not_empty(examples.size());
  // Either every example has a target or none has: a batch cannot mix.
  const bool with_target = examples[0].target.defined();
  std::vector<Tensor> data, targets;
  data.reserve(examples.size());
  targets.reserve(examples.size());
  for (size_t k = 0; k < examples.size(); ++k) {
    KILN_CHECK(examples[k].target.defined() == with_target, "default_collate: example ", k, " of the batch ",
               (with_target ? "has no target but example 0 has one" : "has a target but example 0 has none"));
    data.push_back(std::move(examples[k].data));
    if (with_target) targets.push_back(std::move(examples[k].target));
  }
  check_stackable(data, "data");
  Batch batch;
  batch.data = ops::stack(data, 0);
  if (with_target) {
    check_stackable(targets, "target");
    batch.target = ops::stack(targets, 0);
  }
  return batch;
}

}  // namespace kiln::data
