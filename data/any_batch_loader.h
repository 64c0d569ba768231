// AnyBatchLoader: the machinery every loader shares, over batches of any
// type: the sampler and the epochs, the split of an epoch's order into
// batches, the worker threads and the in-order hand-over, and the position
// a checkpoint saves. data::DataLoader and data::TypedDataLoader are thin
// typed fronts over it; train with those, not with this class.
//
// A batch is built by a function from its dataset indices to the batch,
// held as a std::any (so a batch type must be copy-constructible, as
// std::any requires; tensors and structures of them are). The function is
// called from the worker threads at once and must be safe to call so.
//
// Note [Loader state]
// A loader's position is (epoch, batches_consumed): the epoch of the pass in
// progress and the batches of it that next() has handed out. Batches the
// workers built ahead but nobody took do not count, so they are built again
// after a resume. Since the order of an epoch is a pure function of the
// sampler's settings and the epoch (Note [Sampler epochs]), and a batch a
// function of its indices, the position is all a resume needs:
// load_state_dict() sets the loader's epoch to the saved one, and the next
// pass at that epoch (begin(), begin_epoch(epoch), or the range-for) starts
// at batch `batches_consumed`, yielding exactly the batches the saved run had
// left, with the same contents; later passes are ordinary epochs. A pass
// begun at another epoch forgets the loaded position.
//   state_dict() during a pass:             (that epoch, batches taken so far)
//   ... after the pass's last batch was taken but before next() said the
//       pass is over:                         (that epoch, all of its batches):
//       the resumed pass is empty, then the next epoch follows
//   ... after next() said the pass is over: (the next epoch, 0)
//   ... after a batch failed:               (that epoch, the failed batch), so
//       a resume builds it again
//   ... before any pass, or after load_state_dict: the epoch the next pass
//       runs and the position it starts at
// The state dict holds that position and what it is only valid for, all as
// 0-dim int64 tensors so that it fits a safetensors checkpoint:
//   "epoch", "batches_consumed"
//   "dataset_size", "sampler_size", "batch_size", "drop_last", "shuffle",
//   "seed" (the bits of the uint64), and "order_fingerprint": a 64-bit
//   FNV-1a hash of the epoch's order, which catches a sampler with another
//   seed, rank or kind that no option shows.
// load_state_dict refuses, naming the key and both values, a state saved for
// another dataset size, batch size, sampler, drop_last, shuffle or seed, and a
// malformed one (a missing or unknown key, a tensor that is not a 0-dim int64,
// a position outside the epoch); then the loader is as it was. The worker
// count and prefetch depth are not part of the state: batches are the same
// for any number of workers (Note [Loader workers] in data/dataloader.h), so a
// run may resume with another. Randomness of the dataset's own (augmentation
// seeded by epoch, as Cifar10Dataset::set_epoch) is the dataset's to restore.
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "tensor/tensor_dict.h"

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

class AnyBatchLoader {
 public:
  // Builds the batch of `indices` (dataset indices, in batch order).
  using BuildBatch = std::function<std::any(const std::vector<int64_t>& indices)>;

  // `loader_name` ("DataLoader") and `dataset_name` name the two in errors;
  // `dataset_size` sizes the default sampler and is checked on a resume.
  // Throws kiln::Error naming the option on bad options.
  AnyBatchLoader(std::string loader_name, int64_t dataset_size, std::string dataset_name, DataLoaderOptions options,
                 BuildBatch build);
  ~AnyBatchLoader();
  AnyBatchLoader(const AnyBatchLoader&) = delete;
  AnyBatchLoader& operator=(const AnyBatchLoader&) = delete;

  // Batches per epoch: ceil(sampler size / batch_size), floor with drop_last.
  int64_t size() const;
  // The epoch the next pass runs (Note [Loader epochs] in data/dataloader.h).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // Starts a pass at `epoch`, ending any pass in progress; from a loaded
  // position when `epoch` is the loaded one (Note [Loader state]).
  void begin_epoch(int64_t epoch);
  // The pass's next batch, or nullopt once the pass is over (or before any
  // pass began). Rethrows a failed batch's error as kiln::Error.
  std::optional<std::any> next();

  // The position and what it is valid for (Note [Loader state]).
  TensorDict state_dict() const;
  // Ends any pass in progress and makes the next pass resume at the saved
  // position; throws kiln::Error saying what differs or is malformed, and
  // then changes nothing.
  void load_state_dict(const TensorDict& state);

  const Sampler& sampler() const { return *sampler_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  struct Pass;  // the batches, queue and threads of one pass (any_batch_loader.cpp)
  struct Position {
    int64_t epoch = 0;
    int64_t batches_consumed = 0;
  };

  void end_pass();
  // Worker `worker` of `num_workers` builds the pass's batches b >= its start
  // with b % num_workers == worker.
  static void run_worker(Pass* pass, const AnyBatchLoader* loader, int64_t worker);
  // FNV-1a of the sampler's order at `epoch`; leaves the sampler's epoch as it was.
  uint64_t order_fingerprint(int64_t epoch) const;

  std::string loader_name_;
  int64_t dataset_size_;
  std::string dataset_name_;
  DataLoaderOptions options_;
  BuildBatch build_;
  std::shared_ptr<Sampler> sampler_;
  int64_t epoch_ = 0;
  std::unique_ptr<Pass> pass_;
  std::optional<Position> resume_;  // set by load_state_dict, used by the next pass
};

// A loader's state_dict() as strings, for the `extra` of a training
// checkpoint (optim::TrainingState::extra, whose values are strings), under
// "<prefix><key>"; and back from the strings with that prefix (others are
// ignored). Throws naming the key when a value is not an integer.
//   state.extra = loader_state_to_strings(loader.state_dict());
//   loader.load_state_dict(loader_state_from_strings(loaded.extra));
std::map<std::string, std::string> loader_state_to_strings(const TensorDict& state,
                                                           const std::string& prefix = "data_loader.");
TensorDict loader_state_from_strings(const std::map<std::string, std::string>& strings,
                                     const std::string& prefix = "data_loader.");

// An input iterator over the batches of one pass of `Loader` (which has
// std::optional<BatchT> next()); all copies share the loader.
template <class Loader, class BatchT>
class LoaderIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = BatchT;
  using difference_type = std::ptrdiff_t;
  using pointer = BatchT*;
  using reference = BatchT&;

  LoaderIterator() = default;  // the end
  explicit LoaderIterator(Loader* loader) : loader_(loader), current_(loader->next()) {}

  BatchT& operator*() { return *current_; }
  BatchT* operator->() { return &*current_; }
  LoaderIterator& operator++() {
    current_ = loader_->next();
    return *this;
  }
  // Iterators compare equal when both are at the end.
  bool operator==(const LoaderIterator& other) const { return current_.has_value() == other.current_.has_value(); }

 private:
  Loader* loader_ = nullptr;
  std::optional<BatchT> current_;
};

}  // namespace kiln::data
