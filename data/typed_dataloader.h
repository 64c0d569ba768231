// TypedDataLoader: batches of any structure from a TypedDataset, as
// torch.utils.data.DataLoader(dataset, collate_fn=...): the dataset returns
// examples, a collate function makes the batch out of a std::vector of them.
//
//   // Examples (image (3, 32, 32), label): default_collate makes them
//   // (images (B, 3, 32, 32), labels (B,) int64).
//   std::shared_ptr<TypedDataset<std::pair<Tensor, int64_t>>> ds = ...;
//   TypedDataLoader loader(ds, {.batch_size = 64, .shuffle = true});
//   for (auto& [images, labels] : loader) ...
//
//   // Any callable Batch(std::vector<Example>) instead:
//   TypedDataLoader padded(sentences, {.batch_size = 8},
//                          [](std::vector<Sentence> examples) { return pad(examples); });
//
// Note [Typed loaders]
// What one example is and what a batch is are two separate choices, as in
// torch: the dataset's example type, and the collate function's result. The
// loader is a template over both, TypedDataLoader<Example, Batch>; with
// class-template argument deduction the two come from the dataset's
// example_type and the collate's return type, so user code rarely names them.
// Everything else is AnyBatchLoader's (data/any_batch_loader.h), the same
// machinery as data::DataLoader's: the sampler, shuffle, drop_last and epochs
// (Note [Loader epochs]), the worker threads with batches identical for any
// worker count (Note [Loader workers]) and the saved position (Note [Loader
// state]). A worker builds a batch by calling dataset.get(i) for each of its
// indices and then collate on the examples, so both run on worker threads
// and must be safe to call concurrently. data::DataLoader stays the loader of
// (data, target) datasets because of Dataset::get_batch, a fast path that
// gathers a whole batch at once where get() + collate would copy example by
// example.
//
// With pin_memory, every tensor of a batch is pinned by the thread that built
// it (Note [Loader pinned memory]): tensors inside std::tuple, std::pair,
// std::array, std::vector, std::map and data::Batch are found, and a batch
// type of your own is pinned by its `T pin_memory() const` member. For a
// batch type with neither, pin_memory = true is refused by the constructor.
#pragma once

#include <any>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "data/any_batch_loader.h"
#include "data/collate.h"
#include "data/typed_dataset.h"
#include "tensor/error.h"
#include "tensor/tensor.h"
#include "tensor/tensor_dict.h"

namespace kiln::data {

// ---- Pinning a batch of any structure -------------------------------------------

// PinMemory<T>::apply(batch) pins every tensor of `batch` in place; types
// without a specialization (and without a pin_memory() member) cannot be
// pinned.
template <class T, class = void>
struct PinMemory;

template <class T>
concept Pinnable = requires(T& batch) { PinMemory<T>::apply(batch); };

template <>
struct PinMemory<Tensor> {
  static void apply(Tensor& t) {
    if (t.defined()) t = t.pin_memory();
  }
};

template <>
struct PinMemory<Batch> {
  static void apply(Batch& b) {
    PinMemory<Tensor>::apply(b.data);
    PinMemory<Tensor>::apply(b.target);
  }
};

// Numbers and strings hold no tensor: nothing to pin.
template <class T>
struct PinMemory<T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_same_v<T, std::string>>> {
  static void apply(T&) {}
};

template <Pinnable... T>
struct PinMemory<std::tuple<T...>> {
  static void apply(std::tuple<T...>& t) {
    std::apply([](T&... parts) { (PinMemory<T>::apply(parts), ...); }, t);
  }
};

template <Pinnable A, Pinnable B>
struct PinMemory<std::pair<A, B>> {
  static void apply(std::pair<A, B>& p) {
    PinMemory<A>::apply(p.first);
    PinMemory<B>::apply(p.second);
  }
};

template <Pinnable T, size_t N>
struct PinMemory<std::array<T, N>> {
  static void apply(std::array<T, N>& a) {
    for (T& part : a) PinMemory<T>::apply(part);
  }
};

template <Pinnable T>
struct PinMemory<std::vector<T>> {
  static void apply(std::vector<T>& v) {
    for (T& part : v) PinMemory<T>::apply(part);
  }
};

template <Pinnable T>
struct PinMemory<std::map<std::string, T>> {
  static void apply(std::map<std::string, T>& m) {
    for (auto& entry : m) PinMemory<T>::apply(entry.second);
  }
};

// A batch type of your own with `T pin_memory() const`, as torch's custom batches.
template <class T>
struct PinMemory<T, std::enable_if_t<std::is_same_v<decltype(std::declval<const T&>().pin_memory()), T> &&
                                     !std::is_same_v<T, Tensor>>> {
  static void apply(T& batch) { batch = batch.pin_memory(); }
};

// ---- The loader ------------------------------------------------------------------------

// The batch type of TypedDataLoader<ExampleT> when no collate is named:
// default_collate's, or NoDefaultCollate when it cannot batch ExampleT.
struct NoDefaultCollate {};
template <class ExampleT>
struct DefaultBatch {
  using type = NoDefaultCollate;
};
template <DefaultCollatable ExampleT>
struct DefaultBatch<ExampleT> {
  using type = default_collate_t<ExampleT>;
};

template <class ExampleT, class BatchT = typename DefaultBatch<ExampleT>::type>
class TypedDataLoader {
  static_assert(!std::is_same_v<BatchT, NoDefaultCollate>,
                "TypedDataLoader: default_collate cannot batch this example type (Note [Default collate] in "
                "data/collate.h); pass a collate function, or specialize kiln::data::DefaultCollate for it");

 public:
  using example_type = ExampleT;
  using batch_type = BatchT;
  using Collate = std::function<BatchT(std::vector<ExampleT>)>;
  using Iterator = LoaderIterator<TypedDataLoader, BatchT>;

  // Batches made by default_collate.
  explicit TypedDataLoader(std::shared_ptr<const TypedDataset<ExampleT>> dataset, DataLoaderOptions options = {})
      : TypedDataLoader(std::move(dataset), std::move(options), default_collator()) {}

  // Batches made by `collate`, called with the examples of a batch in order.
  TypedDataLoader(std::shared_ptr<const TypedDataset<ExampleT>> dataset, DataLoaderOptions options, Collate collate)
      : dataset_(checked(std::move(dataset), collate != nullptr, options.pin_memory)),
        collate_(std::move(collate)),
        loader_("TypedDataLoader", dataset_->size(), dataset_->name(), options,
                // Runs on the worker threads; the raw pointer is safe because
                // loader_ (and its workers) end before dataset_ and collate_.
                [this, pin = options.pin_memory](const std::vector<int64_t>& indices) {
                  return std::any(build(indices, pin));
                }) {}

  TypedDataLoader(const TypedDataLoader&) = delete;
  TypedDataLoader& operator=(const TypedDataLoader&) = delete;

  // As DataLoader's (data/dataloader.h).
  int64_t size() const { return loader_.size(); }
  void set_epoch(int64_t epoch) { loader_.set_epoch(epoch); }
  int64_t epoch() const { return loader_.epoch(); }
  void begin_epoch(int64_t epoch) { loader_.begin_epoch(epoch); }
  std::optional<BatchT> next() {
    std::optional<std::any> batch = loader_.next();
    if (!batch) return std::nullopt;
    return std::any_cast<BatchT>(std::move(*batch));
  }
  Iterator begin() {
    loader_.begin_epoch(loader_.epoch());
    return Iterator(this);
  }
  Iterator end() { return Iterator(); }

  // Note [Loader state] in data/any_batch_loader.h.
  TensorDict state_dict() const { return loader_.state_dict(); }
  void load_state_dict(const TensorDict& state) { loader_.load_state_dict(state); }

  const TypedDataset<ExampleT>& dataset() const { return *dataset_; }
  const Sampler& sampler() const { return loader_.sampler(); }
  const DataLoaderOptions& options() const { return loader_.options(); }

 private:
  static Collate default_collator() {
    if constexpr (DefaultCollatable<ExampleT>) {
      return [](std::vector<ExampleT> examples) -> BatchT { return default_collate(std::move(examples)); };
    } else {
      static_assert(DefaultCollatable<ExampleT>,
                    "TypedDataLoader: default_collate cannot batch this example type; pass a collate function");
      return nullptr;
    }
  }

  static std::shared_ptr<const TypedDataset<ExampleT>> checked(std::shared_ptr<const TypedDataset<ExampleT>> dataset,
                                                              bool has_collate, bool pin) {
    KILN_CHECK(dataset != nullptr, "TypedDataLoader: the dataset is null");
    KILN_CHECK(has_collate, "TypedDataLoader: the collate function is empty");
    KILN_CHECK(!pin || Pinnable<BatchT>,
               "TypedDataLoader: pin_memory=true needs a batch of tensors (in tuples, pairs, arrays, vectors or "
               "string maps) or a batch type with a pin_memory() member");
    return dataset;
  }

  // The batch of `indices`: get() per index, then collate; pinned with `pin`.
  BatchT build(const std::vector<int64_t>& indices, bool pin) const {
    const TypedDataset<ExampleT>& dataset = *dataset_;
    std::vector<ExampleT> examples;
    examples.reserve(indices.size());
    for (int64_t index : indices) {
      // A sampler for a larger dataset: said here, whatever get() checks.
      KILN_CHECK(index >= 0 && index < dataset.size(), dataset.name(), ": index ", index,
                 " is out of range for a dataset of size ", dataset.size());
      examples.push_back(dataset.get(index));
    }
    BatchT batch = collate_(std::move(examples));
    if constexpr (Pinnable<BatchT>) {
      if (pin) PinMemory<BatchT>::apply(batch);
    }
    return batch;
  }

  std::shared_ptr<const TypedDataset<ExampleT>> dataset_;
  Collate collate_;
  AnyBatchLoader loader_;  // last: its workers use dataset_ and collate_
};

// Deduction: the example type from the dataset (any class derived from
// TypedDataset<E> has example_type E), the batch type from the collate.
template <class DatasetT>
TypedDataLoader(std::shared_ptr<DatasetT>, DataLoaderOptions = {}) -> TypedDataLoader<typename DatasetT::example_type>;

template <class DatasetT, class CollateFn>
TypedDataLoader(std::shared_ptr<DatasetT>, DataLoaderOptions, CollateFn)
    -> TypedDataLoader<typename DatasetT::example_type,
                       std::remove_cvref_t<std::invoke_result_t<CollateFn&, std::vector<typename DatasetT::example_type>>>>;

}  // namespace kiln::data
