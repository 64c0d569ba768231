// DataLoader: batches of a Dataset in a Sampler's order, optionally built
// ahead of the training loop by a pool of worker threads.
//
//   DataLoaderOptions opts;
//   opts.batch_size = 64; opts.shuffle = true; opts.num_workers = 4;
//   DataLoader loader(dataset, opts);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);
//     for (Batch& batch : loader) train_step(batch.data, batch.target);
//   }
//
// A DataLoader is an AnyBatchLoader (data/any_batch_loader.h) whose batches
// are Dataset::get_batch(indices); data::TypedDataLoader
// (data/typed_dataloader.h) is the one for examples of any type with a
// collate function. Both save and resume their position mid-epoch through
// state_dict() / load_state_dict() (Note [Loader state] in
// data/any_batch_loader.h).
//
// Note [Loader epochs]
// A pass over the data is one epoch. Every pass (begin() or begin_epoch())
// runs at the loader's current epoch, calls sampler.set_epoch(epoch) so that
// shuffling reseeds (Note [Sampler epochs] in data/sampler.h), and then
// advances the current epoch by one. Without set_epoch() the passes thus run
// epochs 0, 1, 2, ... and each sees a different order; set_epoch(e) pins the
// next pass to epoch e, which is how a resumed run or a set of distributed
// ranks agree on the order. The order depends only on (seed, epoch).
//
// Note [Loader workers]
// With num_workers = W > 0, W std::threads build batches while the consumer
// trains. Batch b of a pass always goes to worker b % W, and the consumer
// takes batches strictly in order 0, 1, 2, ..., so the batches, their order
// and their contents are the same for every W (0 included); a pass resumed
// from a saved position (Note [Loader state]) keeps that assignment from its
// first batch on. Workers stay at most W * prefetch_batches batches ahead of
// the consumer, which bounds the memory held in finished batches. A worker's exception is not lost: it is
// rethrown as kiln::Error to the consumer when that batch's turn comes,
// naming the batch, its dataset indices and the original message; the pass
// then ends. Destroying the loader, or starting another pass, mid-pass stops
// the workers: each finishes the batch in hand and exits, no batch is waited
// for. The dataset must allow concurrent get()/get_batch() (Note [Dataset
// threading] in data/dataset.h).
//
// Note [Loader pinned memory]
// With pin_memory = true, every tensor of a batch is copied into page-locked
// host memory (Tensor::pin_memory, Note [Pinned memory] in
// tensor/allocator.h) by whoever builds the batch: a worker thread, so that
// the copy overlaps the training step, or next() itself with num_workers = 0.
// The consumer then moves the batch to the GPU without the driver's staging
// copy. The constructor throws when no pinned allocator is registered (a
// CPU-only build, or no usable GPU) rather than letting every batch fail.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "data/any_batch_loader.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "tensor/tensor_dict.h"

namespace kiln::data {

// DataLoaderOptions: data/any_batch_loader.h.

class DataLoader {
 public:
  using Iterator = LoaderIterator<DataLoader, Batch>;

  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {});

  // Batches per epoch: ceil(sampler size / batch_size), floor with drop_last.
  int64_t size() const { return loader_.size(); }
  // The epoch the next pass runs (Note [Loader epochs]).
  void set_epoch(int64_t epoch) { loader_.set_epoch(epoch); }
  int64_t epoch() const { return loader_.epoch(); }

  // Starts a pass at `epoch`, ending any pass in progress.
  void begin_epoch(int64_t epoch) { loader_.begin_epoch(epoch); }
  // The pass's next batch, or nullopt once the pass is over (or before any
  // pass began). Rethrows a failed batch's error as kiln::Error.
  std::optional<Batch> next();

  // Range-for over one pass at the current epoch: begin() starts the pass.
  Iterator begin();
  Iterator end() { return Iterator(); }

  // The position in the epoch, to save with a checkpoint, and the resume
  // from it (Note [Loader state] in data/any_batch_loader.h):
  //   save_safetensors("loader.safetensors", loader.state_dict());
  //   loader.load_state_dict(load_safetensors("loader.safetensors"));
  //   for (Batch& batch : loader) ...  // the rest of the saved epoch
  TensorDict state_dict() const { return loader_.state_dict(); }
  void load_state_dict(const TensorDict& state) { loader_.load_state_dict(state); }

  const Dataset& dataset() const { return *dataset_; }
  const Sampler& sampler() const { return loader_.sampler(); }
  const DataLoaderOptions& options() const { return loader_.options(); }

 private:
  // Checks the dataset before loader_ is built from it.
  static std::shared_ptr<Dataset> checked(std::shared_ptr<Dataset> dataset);

  std::shared_ptr<Dataset> dataset_;
  AnyBatchLoader loader_;  // batches are Dataset::get_batch(indices), pinned with pin_memory
};

}  // namespace kiln::data
