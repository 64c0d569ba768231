// The pass machinery behind every loader: batch lists, the worker pool and
// the in-order hand-over (Note [Loader workers] in data/dataloader.h), and
// the saved position (Note [Loader state] in data/any_batch_loader.h).
#include "data/any_batch_loader.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "tensor/allocator.h"
#include "tensor/error.h"
#include "tensor/factory.h"

namespace kiln::data {

// A built batch, or the message of the exception that building it threw.
struct BatchResult {
  std::any batch;
  bool failed = false;
  std::string error;
};

struct AnyBatchLoader::Pass {
  int64_t epoch = 0;
  std::vector<std::vector<int64_t>> batches;  // dataset indices of each batch, in order
  int64_t start = 0;                          // the first batch built: > 0 on a resume
  int64_t window = 0;                         // batches the workers may run ahead

  std::mutex mutex;
  std::condition_variable ready;  // a batch was finished (wakes the consumer)
  std::condition_variable space;  // the consumer took a batch, or stop (wakes workers)
  int64_t next = 0;               // the batch the consumer takes next
  std::map<int64_t, BatchResult> finished;  // built, not yet taken
  bool stop = false;
  bool over = false;  // next() said so: every batch taken, or one failed
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

}  // namespace

// Builds batch `b`, turning any exception into a message that names it, so
// that the consumer's error reads the same whichever thread built the batch.
static BatchResult build_batch(const AnyBatchLoader::BuildBatch& build, const std::vector<int64_t>& indices,
                               int64_t b, const std::string& loader_name, const std::string& dataset_name) {
  BatchResult result;
  std::string what;
  try {
    result.batch = build(indices);
    return result;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception not derived from std::exception";
  }
  result.failed = true;
  result.error = loader_name + ": building batch " + std::to_string(b) + " (dataset indices " +
                 describe_indices(indices) + ") of " + dataset_name + " failed: " + what;
  return result;
}

void AnyBatchLoader::run_worker(Pass* pass, const AnyBatchLoader* loader, int64_t worker) {
  const int64_t num_workers = loader->options_.num_workers;
  const int64_t num_batches = static_cast<int64_t>(pass->batches.size());
  // The first batch >= start that is this worker's: worker w always builds
  // the batches b with b % num_workers == w, from the start or on a resume.
  const int64_t first = pass->start + ((worker - pass->start % num_workers) + num_workers) % num_workers;
  for (int64_t b = first; b < num_batches; b += num_workers) {
    {
      std::unique_lock<std::mutex> lock(pass->mutex);
      pass->space.wait(lock, [&] { return pass->stop || b < pass->next + pass->window; });
      if (pass->stop) return;
    }
    BatchResult result =
        build_batch(loader->build_, pass->batches[static_cast<size_t>(b)], b, loader->loader_name_, loader->dataset_name_);
    {
      std::lock_guard<std::mutex> lock(pass->mutex);
      if (pass->stop) return;
      pass->finished.emplace(b, std::move(result));
    }
    pass->ready.notify_all();
  }
}

AnyBatchLoader::AnyBatchLoader(std::string loader_name, int64_t dataset_size, std::string dataset_name,
                               DataLoaderOptions options, BuildBatch build)
    : loader_name_(std::move(loader_name)),
      dataset_size_(dataset_size),
      dataset_name_(std::move(dataset_name)),
      options_(std::move(options)),
      build_(std::move(build)) {
  const std::string& op = loader_name_;
  KILN_CHECK(options_.batch_size >= 1, op, ": batch_size must be >= 1, got ", options_.batch_size);
  KILN_CHECK(options_.num_workers >= 0, op, ": num_workers must be >= 0, got ", options_.num_workers);
  KILN_CHECK(options_.prefetch_batches >= 1, op, ": prefetch_batches must be >= 1, got ", options_.prefetch_batches);
  KILN_CHECK(!(options_.sampler && options_.shuffle), op,
             ": shuffle=true cannot be combined with a sampler; shuffle in the sampler instead");
  // Fails here, naming the option, rather than in every batch.
  if (options_.pin_memory) pinned_allocator((op + "(pin_memory=true)").c_str());
  if (options_.sampler) {
    sampler_ = options_.sampler;
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_size_, options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_size_);
  }
}

AnyBatchLoader::~AnyBatchLoader() { end_pass(); }

int64_t AnyBatchLoader::size() const {
  const int64_t n = sampler_->size();
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

void AnyBatchLoader::end_pass() {
  if (!pass_) return;
  {
    std::lock_guard<std::mutex> lock(pass_->mutex);
    pass_->stop = true;
  }
  pass_->space.notify_all();
  for (std::thread& worker : pass_->workers) worker.join();
  pass_.reset();
}

void AnyBatchLoader::begin_epoch(int64_t epoch) {
  end_pass();
  sampler_->set_epoch(epoch);
  const std::vector<int64_t> order = sampler_->indices();

  auto pass = std::make_unique<Pass>();
  pass->epoch = epoch;
  const int64_t bs = options_.batch_size;
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(bs)) {
    const size_t stop = std::min(order.size(), start + static_cast<size_t>(bs));
    if (options_.drop_last && stop - start < static_cast<size_t>(bs)) break;
    pass->batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                               order.begin() + static_cast<std::ptrdiff_t>(stop));
  }
  if (resume_ && resume_->epoch == epoch) pass->start = resume_->batches_consumed;
  resume_.reset();
  pass->next = pass->start;
  pass->window = options_.num_workers * options_.prefetch_batches;
  pass_ = std::move(pass);
  for (int64_t w = 0; w < options_.num_workers; ++w) pass_->workers.emplace_back(run_worker, pass_.get(), this, w);
  epoch_ = epoch + 1;
}

std::optional<std::any> AnyBatchLoader::next() {
  if (!pass_ || pass_->over) return std::nullopt;
  if (pass_->next >= static_cast<int64_t>(pass_->batches.size())) {
    pass_->over = true;
    return std::nullopt;
  }
  const int64_t b = pass_->next;
  BatchResult result;
  if (options_.num_workers == 0) {
    result = build_batch(build_, pass_->batches[static_cast<size_t>(b)], b, loader_name_, dataset_name_);
  } else {
    std::unique_lock<std::mutex> lock(pass_->mutex);
    pass_->ready.wait(lock, [&] { return pass_->finished.count(b) != 0; });
    auto it = pass_->finished.find(b);
    result = std::move(it->second);
    pass_->finished.erase(it);
  }
  if (result.failed) {
    // The pass ends here, and its position stays at the failed batch: it was
    // not consumed (Note [Loader state]).
    {
      std::lock_guard<std::mutex> lock(pass_->mutex);
      pass_->stop = true;
      pass_->over = true;
    }
    pass_->space.notify_all();
    for (std::thread& worker : pass_->workers) worker.join();
    pass_->workers.clear();
    KILN_FAIL(result.error);
  }
  {
    std::lock_guard<std::mutex> lock(pass_->mutex);
    ++pass_->next;
  }
  pass_->space.notify_all();
  return std::move(result.batch);
}

// ---- Loader state (Note [Loader state]) ---------------------------------------

namespace {

constexpr const char* kStateKeys[] = {"epoch",      "batches_consumed", "dataset_size", "sampler_size",     "batch_size",
                                      "drop_last", "shuffle",          "seed",         "order_fingerprint"};

Tensor int64_scalar(int64_t value) { return scalar_tensor(value, DType::Int64); }

// The int64 under `key`; throws naming the key when it is missing or not a 0-dim int64.
int64_t state_value(const TensorDict& state, const std::string& key, const std::string& op) {
  KILN_CHECK(state.contains(key), op, ": the state has no '", key, "'");
  const Tensor& t = state.at(key);
  KILN_CHECK(t.dim() == 0 && t.dtype() == DType::Int64, op, ": '", key, "' must be a 0-dim int64 tensor, got ",
             t.dtype(), " of shape ", t.shape());
  return t.item<int64_t>();
}

}  // namespace

uint64_t AnyBatchLoader::order_fingerprint(int64_t epoch) const {
  const int64_t saved_epoch = sampler_->epoch();
  sampler_->set_epoch(epoch);
  const std::vector<int64_t> order = sampler_->indices();
  sampler_->set_epoch(saved_epoch);
  // FNV-1a over the indices' bytes: a checksum, not a secret; two orders
  // that differ anywhere differ in it but for a 2^-64 chance.
  uint64_t hash = 14695981039346656037ull;
  for (int64_t index : order) {
    uint64_t bits = static_cast<uint64_t>(index);
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (bits >> (8 * byte)) & 0xff;
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

TensorDict AnyBatchLoader::state_dict() const {
  Position position{epoch_, 0};
  if (pass_ && !pass_->over) {
    position = {pass_->epoch, pass_->next};
  } else if (pass_ && pass_->next < static_cast<int64_t>(pass_->batches.size())) {
    position = {pass_->epoch, pass_->next};  // ended by a failed batch
  } else if (resume_ && resume_->epoch == epoch_) {
    position = *resume_;
  }
  TensorDict state;
  state.insert("epoch", int64_scalar(position.epoch));
  state.insert("batches_consumed", int64_scalar(position.batches_consumed));
  state.insert("dataset_size", int64_scalar(dataset_size_));
  state.insert("sampler_size", int64_scalar(sampler_->size()));
  state.insert("batch_size", int64_scalar(options_.batch_size));
  state.insert("drop_last", int64_scalar(options_.drop_last ? 1 : 0));
  state.insert("shuffle", int64_scalar(options_.shuffle ? 1 : 0));
  state.insert("seed", int64_scalar(std::bit_cast<int64_t>(options_.seed)));
  state.insert("order_fingerprint", int64_scalar(std::bit_cast<int64_t>(order_fingerprint(position.epoch))));
  return state;
}

void AnyBatchLoader::load_state_dict(const TensorDict& state) {
  const std::string op = loader_name_ + "::load_state_dict";
  for (const auto& entry : state) {
    const std::string& key = entry.first;
    KILN_CHECK(std::find(std::begin(kStateKeys), std::end(kStateKeys), key) != std::end(kStateKeys), op,
               ": unexpected key '", key, "' (not a loader state?)");
  }
  const int64_t epoch = state_value(state, "epoch", op);
  const int64_t consumed = state_value(state, "batches_consumed", op);
  // What the state is valid for, checked before the position so that the
  // message names the setting that changed rather than a symptom of it.
  auto check_same = [&](const char* key, int64_t now, const char* what) {
    const int64_t saved = state_value(state, key, op);
    KILN_CHECK(saved == now, op, ": the state was saved with ", key, " ", saved, " but this loader has ", now, " (",
               what, ")");
  };
  check_same("dataset_size", dataset_size_, "another dataset");
  check_same("sampler_size", sampler_->size(), "another sampler, or another number of processes");
  check_same("batch_size", options_.batch_size, "the batches would differ");
  check_same("drop_last", options_.drop_last ? 1 : 0, "the batches would differ");
  check_same("shuffle", options_.shuffle ? 1 : 0, "the order would differ");
  const int64_t seed = state_value(state, "seed", op);
  // The seed only orders the loader's own RandomSampler; a given sampler has
  // its own, which the fingerprint covers.
  if (options_.shuffle) {
    KILN_CHECK(seed == std::bit_cast<int64_t>(options_.seed), op, ": the state was saved with seed ",
               std::bit_cast<uint64_t>(seed), " but this loader has ", options_.seed, " (the order would differ)");
  }
  KILN_CHECK(epoch >= 0, op, ": 'epoch' must be >= 0, got ", epoch);
  KILN_CHECK(consumed >= 0 && consumed <= size(), op, ": 'batches_consumed' is ", consumed,
             " but an epoch of this loader has ", size(), " batches");
  const int64_t fingerprint = state_value(state, "order_fingerprint", op);
  KILN_CHECK(fingerprint == std::bit_cast<int64_t>(order_fingerprint(epoch)), op, ": the sampler's order for epoch ",
             epoch, " is not the one the state was saved with (another sampler, seed or rank?)");

  end_pass();
  epoch_ = epoch;
  resume_ = Position{epoch, consumed};
}

std::map<std::string, std::string> loader_state_to_strings(const TensorDict& state, const std::string& prefix) {
  std::map<std::string, std::string> strings;
  for (const auto& [key, t] : state) {
    KILN_CHECK(t.dim() == 0 && t.dtype() == DType::Int64, "loader_state_to_strings: '", key,
               "' must be a 0-dim int64 tensor, got ", t.dtype(), " of shape ", t.shape());
    strings[prefix + key] = std::to_string(t.item<int64_t>());
  }
  return strings;
}

TensorDict loader_state_from_strings(const std::map<std::string, std::string>& strings, const std::string& prefix) {
  TensorDict state;
  for (const auto& [key, text] : strings) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    int64_t value = 0;
    const char* end = text.data() + text.size();
    auto [stop, error] = std::from_chars(text.data(), end, value);
    KILN_CHECK(error == std::errc() && stop == end && !text.empty(), "loader_state_from_strings: '", key, "' is \"",
               text, "\", not an integer");
    state.insert(key.substr(prefix.size()), int64_scalar(value));
  }
  return state;
}

}  // namespace kiln::data
