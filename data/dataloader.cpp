// The pass machinery behind DataLoader: batch lists, the worker pool and the
// in-order hand-over (Note [Loader workers] in data/dataloader.h).
#include "data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "tensor/allocator.h"
#include "tensor/error.h"

namespace kiln::data {

// A built batch, or the message of the exception that building it threw.
struct BatchResult {
  Batch batch;
  bool failed = false;
  std::string error;
};

struct DataLoader::Pass {
  std::vector<std::vector<int64_t>> batches;  // dataset indices of each batch, in order
  int64_t window = 0;                         // batches the workers may run ahead

  std::mutex mutex;
  std::condition_variable ready;  // a batch was finished (wakes the consumer)
  std::condition_variable space;  // the consumer took a batch, or stop (wakes workers)
  int64_t next = 0;               // the batch the consumer takes next
  std::map<int64_t, BatchResult> finished;  // built, not yet taken
  bool stop = false;
  std::vector<std::thread> workers;
};

namespace {

std::string describe_indices(const std::vector<int64_t>& indices) {
  constexpr size_t kShown = 8;  // enough to find the example; a batch of 512 would drown the message
  std::string text = "[";
  for (size_t k = 0; k < indices.size() && k < kShown; ++k) {
    if (k) text += ", ";
    text += std::to_string(indices[k]);
  }
  if (indices.size() > kShown) text += ", ... (" + std::to_string(indices.size()) + " in all)";
  return text + "]";
}

// Builds batch `b`, turning any exception into a message that names it, so
// that the consumer's error reads the same whichever thread built the batch.
// With `pin`, the batch's tensors are copied into pinned memory here, in
// the thread that built them (Note [Loader pinned memory]).
BatchResult build_batch(const Dataset& dataset, const std::vector<int64_t>& indices, int64_t b, bool pin) {
  BatchResult result;
  std::string what;
  try {
    result.batch = dataset.get_batch(indices);
    if (pin) {
      if (result.batch.data.defined()) result.batch.data = result.batch.data.pin_memory();
      if (result.batch.target.defined()) result.batch.target = result.batch.target.pin_memory();
    }
    return result;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception not derived from std::exception";
  }
  result.failed = true;
  result.error = "DataLoader: building batch " + std::to_string(b) + " (dataset indices " +
                 describe_indices(indices) + ") of " + dataset.name() + " failed: " + what;
  return result;
}

}  // namespace

void DataLoader::run_worker(Pass* pass, const Dataset* dataset, int64_t worker, int64_t num_workers, bool pin) {
  const int64_t num_batches = static_cast<int64_t>(pass->batches.size());
  for (int64_t b = worker; b < num_batches; b += num_workers) {
    {
      std::unique_lock<std::mutex> lock(pass->mutex);
      pass->space.wait(lock, [&] { return pass->stop || b < pass->next + pass->window; });
      if (pass->stop) return;
    }
    BatchResult result = build_batch(*dataset, pass->batches[static_cast<size_t>(b)], b, pin);
    {
      std::lock_guard<std::mutex> lock(pass->mutex);
      if (pass->stop) return;
      pass->finished.emplace(b, std::move(result));
    }
    pass->ready.notify_all();
  }
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  KILN_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  KILN_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
  KILN_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers);
  KILN_CHECK(options_.prefetch_batches >= 1, "DataLoader: prefetch_batches must be >= 1, got ",
             options_.prefetch_batches);
  KILN_CHECK(!(options_.sampler && options_.shuffle),
             "DataLoader: shuffle=true cannot be combined with a sampler; shuffle in the sampler instead");
  // Fails here, naming the option, rather than in every batch.
  if (options_.pin_memory) pinned_allocator("DataLoader(pin_memory=true)");
  if (options_.sampler) {
    sampler_ = options_.sampler;
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

DataLoader::~DataLoader() { end_pass(); }

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size();
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

void DataLoader::end_pass() {
  if (!pass_) return;
  {
    std::lock_guard<std::mutex> lock(pass_->mutex);
    pass_->stop = true;
  }
  pass_->space.notify_all();
  for (std::thread& worker : pass_->workers) worker.join();
  pass_.reset();
}

void DataLoader::begin_epoch(int64_t epoch) {
  end_pass();
  epoch_ = epoch;
  sampler_->set_epoch(epoch);
  const std::vector<int64_t> order = sampler_->indices();

  auto pass = std::make_unique<Pass>();
  const int64_t bs = options_.batch_size;
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(bs)) {
    const size_t stop = std::min(order.size(), start + static_cast<size_t>(bs));
    if (options_.drop_last && stop - start < static_cast<size_t>(bs)) break;
    pass->batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                               order.begin() + static_cast<std::ptrdiff_t>(stop));
  }
  pass->window = options_.num_workers * options_.prefetch_batches;
  pass_ = std::move(pass);
  for (int64_t w = 0; w < options_.num_workers; ++w) {
    pass_->workers.emplace_back(run_worker, pass_.get(), dataset_.get(), w, options_.num_workers,
                                options_.pin_memory);
  }
  epoch_ = epoch + 1;
}

std::optional<Batch> DataLoader::next() {
  if (!pass_ || pass_->next >= static_cast<int64_t>(pass_->batches.size())) return std::nullopt;
  const int64_t b = pass_->next;
  BatchResult result;
  if (options_.num_workers == 0) {
    result = build_batch(*dataset_, pass_->batches[static_cast<size_t>(b)], b, options_.pin_memory);
    ++pass_->next;
  } else {
    {
      std::unique_lock<std::mutex> lock(pass_->mutex);
      pass_->ready.wait(lock, [&] { return pass_->finished.count(b) != 0; });
      auto it = pass_->finished.find(b);
      result = std::move(it->second);
      pass_->finished.erase(it);
      ++pass_->next;
    }
    pass_->space.notify_all();
  }
  if (result.failed) {
    end_pass();
    KILN_FAIL(result.error);
  }
  return std::move(result.batch);
}

DataLoader::Iterator DataLoader::begin() {
  begin_epoch(epoch_);
  return Iterator(this);
}

DataLoader::Iterator DataLoader::end() { return Iterator(); }

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader), current_(loader->next()) {}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  current_ = loader_->next();
  return *this;
}

}  // namespace kiln::data
