// TypedDataset: an indexable collection of examples of any type, the
// map-style dataset of torch.utils.data. What one example is (a Tensor, a
// std::tuple of tensors, a struct with an image, a label and a caption) is
// the dataset's business; how examples become a batch is the collate
// function's (data/collate.h), and TypedDataLoader puts the two together
// (data/typed_dataloader.h).
//
//   struct Sample { Tensor image; int64_t label; };
//   class MyDataset : public kiln::data::TypedDataset<Sample> {
//    public:
//     int64_t size() const override { return n_; }
//     Sample get(int64_t i) const override { check_index(i); return {images_[i], labels_[i]}; }
//   };
//
// data::Dataset (data/dataset.h) is the TypedDataset whose examples are
// data::Example, (data, target), with a batched get_batch() fast path that
// data::DataLoader uses. get() is called from the loader's worker threads
// at once, so it must be safe to call concurrently (Note [Dataset threading]
// in data/dataset.h).
#pragma once

#include <cstdint>
#include <string>

#include "tensor/error.h"

namespace kiln::data {

template <class ExampleT>
class TypedDataset {
 public:
  using example_type = ExampleT;

  virtual ~TypedDataset() = default;

  // The number of examples; valid indices are [0, size()).
  virtual int64_t size() const = 0;
  // Example `index`; throws kiln::Error naming the dataset and the index
  // when it is out of range (check_index does that).
  virtual ExampleT get(int64_t index) const = 0;
  // The name error messages use, e.g. "TensorDataset", "CIFAR10(train)".
  virtual std::string name() const { return "Dataset"; }

 protected:
  // Throws "<name>: index <i> is out of range for a dataset of size <n>".
  void check_index(int64_t index) const {
    KILN_CHECK(index >= 0 && index < size(), name(), ": index ", index, " is out of range for a dataset of size ",
               size());
  }
};

}  // namespace kiln::data
