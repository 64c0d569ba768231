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
// and their contents are the same for every W (0 included). Workers stay at
// most W * prefetch_batches batches ahead of the consumer, which bounds the
// memory held in finished batches. A worker's exception is not lost: it is
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
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace kiln::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;         // a RandomSampler(dataset size, seed); not with `sampler`
  bool drop_last = false;       // drop the last batch when it is short of batch_size
  int64_t num_workers = 0;      // 0: batches are built in next(), on the caller's thread
  int64_t prefetch_batches = 2;  // per worker (Note [Loader workers])
  uint64_t seed = 0;             // of the shuffling, with the epoch
  std::shared_ptr<Sampler> sampler;  // the order of indices; default sequential or shuffled
  bool pin_memory = false;           // batches in page-locked memory (Note [Loader pinned memory])
};

class DataLoader {
 public:
  class Iterator;

  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch: ceil(sampler size / batch_size), floor with drop_last.
  int64_t size() const;
  // The epoch the next pass runs (Note [Loader epochs]).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // Starts a pass at `epoch`, ending any pass in progress.
  void begin_epoch(int64_t epoch);
  // The pass's next batch, or nullopt once the pass is over (or before any
  // pass began). Rethrows a failed batch's error as kiln::Error.
  std::optional<Batch> next();

  // Range-for over one pass at the current epoch: begin() starts the pass.
  Iterator begin();
  Iterator end();

  const Dataset& dataset() const { return *dataset_; }
  const Sampler& sampler() const { return *sampler_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  struct Pass;  // the batches, queue and threads of one pass (dataloader.cpp)

  void end_pass();
  // Worker `worker` of `num_workers`: builds batches worker, worker + num_workers, ...
  // (pinned when `pin`).
  static void run_worker(Pass* pass, const Dataset* dataset, int64_t worker, int64_t num_workers, bool pin);

  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  int64_t epoch_ = 0;
  std::unique_ptr<Pass> pass_;
};

// An input iterator over the batches of one pass; all copies share the loader.
class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = Batch*;
  using reference = Batch&;

  Iterator() = default;  // the end
  explicit Iterator(DataLoader* loader);

  Batch& operator*() { return *current_; }
  Batch* operator->() { return &*current_; }
  Iterator& operator++();
  // Iterators compare equal when both are at the end.
  bool operator==(const Iterator& other) const { return current_.has_value() == other.current_.has_value(); }

 private:
  DataLoader* loader_ = nullptr;
  std::optional<Batch> current_;
};

}  // namespace kiln::data
