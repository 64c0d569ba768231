// Saving a loader's position and resuming from it (Note [Loader state] in
// data/any_batch_loader.h): for DataLoader and TypedDataLoader, saved at
// several positions of an epoch (the start, the middle, before and after the
// last batch, with drop_last) and resumed with another worker count, the
// resumed run yields exactly the batches the uninterrupted run had left, then
// ordinary epochs; through a safetensors file too; every refusal of a state
// that does not fit.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/typed_dataloader.h"
#include "nn/linear.h"
#include "optim/sgd.h"
#include "optim/training_checkpoint.h"
#include "tensor/elementwise.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"
#include "tests/data/data_test_util.h"

using namespace kiln;
using namespace kiln::data;

// Options are written as designated initializers, {.batch_size = 4}, leaving
// the other fields at their defaults on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

// 18 examples: data row i = [2 i, 2 i + 1] (float32), target i = 100 + i.
std::shared_ptr<TensorDataset> make_tensor_dataset(int64_t n = 18) {
  return std::make_shared<TensorDataset>(arange(2 * n, DType::Float32).reshape({n, 2}),
                                         arange(100, 100 + n, 1, DType::Int64));
}

// Examples (sequence of 1 + i % 3 values i, label i): a padding collate.
using Sequence = std::pair<Tensor, int64_t>;
class SequenceDataset : public TypedDataset<Sequence> {
 public:
  explicit SequenceDataset(int64_t n, int64_t fail_index = -1) : fail_at(fail_index), n_(n) {}
  int64_t size() const override { return n_; }
  Sequence get(int64_t index) const override {
    check_index(index);
    KILN_CHECK(index != fail_at.load(), "SequenceDataset: example ", index, " is unreadable");
    return {full({1 + index % 3}, static_cast<double>(index)), index};
  }
  std::string name() const override { return "SequenceDataset"; }
  mutable std::atomic<int64_t> fail_at;  // the test lets the example recover

 private:
  int64_t n_;
};

// (values (B, longest) padded with 0, labels (B,))
std::pair<Tensor, Tensor> pad_sequences(std::vector<Sequence> examples) {
  int64_t longest = 0;
  for (const Sequence& s : examples) longest = std::max(longest, s.first.size(0));
  std::vector<float> values(examples.size() * static_cast<size_t>(longest), 0.0f);
  std::vector<int64_t> labels;
  for (size_t b = 0; b < examples.size(); ++b) {
    for (int64_t t = 0; t < examples[b].first.size(0); ++t)
      values[b * static_cast<size_t>(longest) + static_cast<size_t>(t)] = examples[b].first.at<float>({t});
    labels.push_back(examples[b].second);
  }
  return {from_vector<float>(values, {static_cast<int64_t>(examples.size()), longest}), default_collate(std::move(labels))};
}

// Every batch as its list of tensors, so that both loaders compare alike.
std::vector<Tensor> tensors_of(const Batch& b) { return {b.data, b.target}; }
std::vector<Tensor> tensors_of(const std::pair<Tensor, Tensor>& b) { return {b.first, b.second}; }

template <class Loader>
std::vector<std::vector<Tensor>> one_pass(Loader& loader) {
  std::vector<std::vector<Tensor>> batches;
  for (auto& batch : loader) batches.push_back(tensors_of(batch));
  return batches;
}

// Takes `count` batches of the pass begun at `epoch`.
template <class Loader>
std::vector<std::vector<Tensor>> take(Loader& loader, int64_t epoch, int64_t count) {
  loader.begin_epoch(epoch);
  std::vector<std::vector<Tensor>> batches;
  for (int64_t k = 0; k < count; ++k) {
    auto batch = loader.next();
    EXPECT_TRUE(batch.has_value()) << "batch " << k << " of epoch " << epoch;
    if (batch) batches.push_back(tensors_of(*batch));
  }
  return batches;
}

void expect_same_batches(const std::vector<std::vector<Tensor>>& actual,
                         const std::vector<std::vector<Tensor>>& expected, const std::string& where) {
  ASSERT_EQ(actual.size(), expected.size()) << where;
  for (size_t b = 0; b < actual.size(); ++b) {
    ASSERT_EQ(actual[b].size(), expected[b].size()) << where;
    for (size_t t = 0; t < actual[b].size(); ++t) {
      EXPECT_EQ(actual[b][t].shape(), expected[b][t].shape()) << where << ", batch " << b << ", tensor " << t;
      EXPECT_EQ(actual[b][t].dtype(), expected[b][t].dtype()) << where << ", batch " << b << ", tensor " << t;
      EXPECT_TRUE(equal(actual[b][t], expected[b][t])) << where << ", batch " << b << ", tensor " << t;
    }
  }
}

std::vector<std::vector<Tensor>> tail(const std::vector<std::vector<Tensor>>& batches, int64_t from) {
  return {batches.begin() + static_cast<std::ptrdiff_t>(from), batches.end()};
}

int64_t value(const TensorDict& state, const std::string& key) { return state.at(key).item<int64_t>(); }

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(getpid()))).string();
}

// The uninterrupted run's epochs 1 and 2 against one that stops in epoch 1
// after `stop_at` batches, saves (through a file when `via_file`), and resumes
// in a new loader with `resume_workers` workers. `make(workers)` builds a loader.
template <class MakeLoader>
void check_resume(MakeLoader make, int64_t stop_at, int64_t save_workers, int64_t resume_workers, bool via_file) {
  const std::string where = "stop at " + std::to_string(stop_at) + ", workers " + std::to_string(save_workers) +
                            " -> " + std::to_string(resume_workers);
  auto reference = make(save_workers);
  reference->set_epoch(1);
  const auto epoch1 = one_pass(*reference);
  const auto epoch2 = one_pass(*reference);
  ASSERT_NE(epoch1.size(), 0u);

  TensorDict state;
  {
    auto interrupted = make(save_workers);
    one_pass(*interrupted);  // epoch 0, which the resumed run need not see again
    expect_same_batches(take(*interrupted, 1, stop_at),
                        std::vector<std::vector<Tensor>>(epoch1.begin(), epoch1.begin() + stop_at),
                        where + ", before the stop");
    state = interrupted->state_dict();
  }
  EXPECT_EQ(value(state, "epoch"), 1) << where;
  EXPECT_EQ(value(state, "batches_consumed"), stop_at) << where;
  if (via_file) {
    const std::string path = temp_path("kiln_loader_state");
    save_safetensors(path, state);
    state = load_safetensors(path);
    std::filesystem::remove(path);
  }

  auto resumed = make(resume_workers);
  resumed->load_state_dict(state);
  EXPECT_EQ(resumed->epoch(), 1) << where;
  expect_same_batches(one_pass(*resumed), tail(epoch1, stop_at), where + ", the rest of epoch 1");
  expect_same_batches(one_pass(*resumed), epoch2, where + ", epoch 2");
}

auto tensor_loader(bool drop_last) {
  return [drop_last](int64_t workers) {
    return std::make_unique<DataLoader>(make_tensor_dataset(), DataLoaderOptions{.batch_size = 4,
                                                                                 .shuffle = true,
                                                                                 .drop_last = drop_last,
                                                                                 .num_workers = workers,
                                                                                 .prefetch_batches = 1,
                                                                                 .seed = 21});
  };
}

auto sequence_loader(bool drop_last) {
  return [drop_last](int64_t workers) {
    using Loader = TypedDataLoader<Sequence, std::pair<Tensor, Tensor>>;
    return std::make_unique<Loader>(std::make_shared<SequenceDataset>(18),
                                    DataLoaderOptions{.batch_size = 4,
                                                      .shuffle = true,
                                                      .drop_last = drop_last,
                                                      .num_workers = workers,
                                                      .prefetch_batches = 1,
                                                      .seed = 21},
                                    pad_sequences);
  };
}

}  // namespace

// 18 examples in batches of 4: 5 batches (the last of 2), or 4 with drop_last.
TEST(LoaderState, DataLoaderResumesWithTheRemainingBatches) {
  for (bool drop_last : {false, true}) {
    const int64_t batches = drop_last ? 4 : 5;
    for (int64_t stop_at : {int64_t{0}, int64_t{1}, int64_t{3}, batches - 1, batches}) {
      SCOPED_TRACE("drop_last " + std::to_string(drop_last) + ", stop at " + std::to_string(stop_at));
      check_resume(tensor_loader(drop_last), stop_at, 0, 0, false);
      check_resume(tensor_loader(drop_last), stop_at, 3, 1, stop_at == 1);
      check_resume(tensor_loader(drop_last), stop_at, 1, 3, false);
    }
  }
}

TEST(LoaderState, TypedDataLoaderResumesWithTheRemainingBatches) {
  for (bool drop_last : {false, true}) {
    const int64_t batches = drop_last ? 4 : 5;
    for (int64_t stop_at : {int64_t{0}, int64_t{2}, batches - 1, batches}) {
      SCOPED_TRACE("drop_last " + std::to_string(drop_last) + ", stop at " + std::to_string(stop_at));
      check_resume(sequence_loader(drop_last), stop_at, 0, 3, stop_at == 2);
      check_resume(sequence_loader(drop_last), stop_at, 3, 0, false);
    }
  }
}

TEST(LoaderState, ThePositionThroughAPass) {
  DataLoader loader(make_tensor_dataset(), {.batch_size = 4});
  TensorDict state = loader.state_dict();
  EXPECT_EQ(value(state, "epoch"), 0);
  EXPECT_EQ(value(state, "batches_consumed"), 0);
  EXPECT_EQ(value(state, "dataset_size"), 18);
  EXPECT_EQ(value(state, "sampler_size"), 18);
  EXPECT_EQ(value(state, "batch_size"), 4);
  EXPECT_EQ(value(state, "drop_last"), 0);
  EXPECT_EQ(value(state, "shuffle"), 0);
  EXPECT_EQ(state.size(), 9u);

  loader.begin_epoch(4);
  EXPECT_EQ(value(loader.state_dict(), "epoch"), 4);
  for (int64_t k = 1; k <= 5; ++k) {
    ASSERT_TRUE(loader.next().has_value());
    EXPECT_EQ(value(loader.state_dict(), "epoch"), 4);
    EXPECT_EQ(value(loader.state_dict(), "batches_consumed"), k);
  }
  // Every batch taken, the pass not yet declared over: still epoch 4.
  EXPECT_FALSE(loader.next().has_value());
  // Now it is: the next pass is epoch 5, from its start.
  EXPECT_EQ(value(loader.state_dict(), "epoch"), 5);
  EXPECT_EQ(value(loader.state_dict(), "batches_consumed"), 0);

  // A loaded position is what state_dict() says until a pass begins.
  TensorDict mid = loader.state_dict();
  mid.insert_or_assign("epoch", scalar_tensor(7, DType::Int64));
  mid.insert_or_assign("batches_consumed", scalar_tensor(2, DType::Int64));
  loader.load_state_dict(mid);
  EXPECT_EQ(loader.epoch(), 7);
  EXPECT_EQ(value(loader.state_dict(), "batches_consumed"), 2);
  // The 18 examples unshuffled: epoch 7 resumed at batch 2 starts at example 8.
  loader.begin_epoch(7);
  std::optional<Batch> first = loader.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->target.at<int64_t>({0}), 108);
  EXPECT_EQ(value(loader.state_dict(), "batches_consumed"), 3);
}

TEST(LoaderState, APassAtAnotherEpochForgetsTheLoadedPosition) {
  DataLoader loader(make_tensor_dataset(), {.batch_size = 4});
  TensorDict state = loader.state_dict();
  state.insert_or_assign("epoch", scalar_tensor(3, DType::Int64));
  state.insert_or_assign("batches_consumed", scalar_tensor(4, DType::Int64));
  loader.load_state_dict(state);
  loader.begin_epoch(2);  // not the loaded epoch: a whole epoch 2
  int64_t batches = 0;
  while (loader.next()) ++batches;
  EXPECT_EQ(batches, 5);
  // The position was forgotten: epoch 3 now runs from its start.
  loader.begin_epoch(3);
  std::optional<Batch> b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->target.at<int64_t>({0}), 100);
}

TEST(LoaderState, AFailedBatchIsBuiltAgainAfterAResume) {
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE("num_workers = " + std::to_string(workers));
    auto ds = std::make_shared<SequenceDataset>(10, /*fail_at=*/5);
    TypedDataLoader loader(ds, {.batch_size = 2, .num_workers = workers}, pad_sequences);
    loader.begin_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
    expect_error_parts([&] { loader.next(); }, {"building batch 2 (dataset indices [4, 5])",
                                                "SequenceDataset: example 5 is unreadable"});
    TensorDict state = loader.state_dict();
    EXPECT_EQ(value(state, "epoch"), 0);
    EXPECT_EQ(value(state, "batches_consumed"), 2);
    ds->fail_at = -1;  // the file is readable again
    loader.load_state_dict(state);
    auto rest = one_pass(loader);
    ASSERT_EQ(rest.size(), 3u);
    EXPECT_TRUE(equal(rest[0][1], from_vector<int64_t>({4, 5}, {2})));
  }
}

TEST(LoaderState, TheStateFileHoldsInt64Scalars) {
  DataLoader loader(make_tensor_dataset(), {.batch_size = 4, .shuffle = true, .seed = 1ull << 63});
  loader.begin_epoch(2);
  loader.next();
  const std::string path = temp_path("kiln_loader_state_file");
  save_safetensors(path, loader.state_dict());
  TensorDict loaded = load_safetensors(path);
  std::filesystem::remove(path);
  for (const auto& [key, t] : loaded) {
    EXPECT_EQ(t.dtype(), DType::Int64) << key;
    EXPECT_EQ(t.dim(), 0) << key;
  }
  // A seed above INT64_MAX survives as its bits.
  EXPECT_EQ(static_cast<uint64_t>(value(loaded, "seed")), 1ull << 63);
  DataLoader other(make_tensor_dataset(), {.batch_size = 4, .shuffle = true, .seed = 1ull << 63});
  other.load_state_dict(loaded);
  EXPECT_EQ(value(other.state_dict(), "epoch"), 2);
  EXPECT_EQ(value(other.state_dict(), "batches_consumed"), 1);
}

TEST(LoaderState, RefusesAStateThatDoesNotFit) {
  DataLoaderOptions opts{.batch_size = 4, .shuffle = true, .seed = 3};
  DataLoader saved(make_tensor_dataset(), opts);
  saved.begin_epoch(1);
  saved.next();
  const TensorDict state = saved.state_dict();
  const std::string op = "DataLoader::load_state_dict: ";

  auto with = [&](DataLoaderOptions o, int64_t n = 18) { return std::make_unique<DataLoader>(make_tensor_dataset(n), o); };
  expect_error_parts([&] { with(opts, 20)->load_state_dict(state); },
                     {op + "the state was saved with dataset_size 18 but this loader has 20 (another dataset)"});
  DataLoaderOptions o = opts;
  o.batch_size = 5;
  expect_error_parts([&] { with(o)->load_state_dict(state); },
                     {op + "the state was saved with batch_size 4 but this loader has 5"});
  o = opts;
  o.drop_last = true;
  expect_error_parts([&] { with(o)->load_state_dict(state); },
                     {op + "the state was saved with drop_last 0 but this loader has 1"});
  o = opts;
  o.seed = 4;
  expect_error_parts([&] { with(o)->load_state_dict(state); },
                     {op + "the state was saved with seed 3 but this loader has 4"});
  o = opts;
  o.shuffle = false;
  expect_error_parts([&] { with(o)->load_state_dict(state); },
                     {op + "the state was saved with shuffle 1 but this loader has 0"});
  o = DataLoaderOptions{.batch_size = 4, .sampler = std::make_shared<DistributedSampler>(18, 2, 0)};
  expect_error_parts([&] { with(o)->load_state_dict(state); },
                     {op + "the state was saved with sampler_size 18 but this loader has 9"});

  // Samplers no option shows apart: the fingerprint of the order does.
  DataLoaderOptions rank0{.batch_size = 4, .sampler = std::make_shared<DistributedSampler>(18, 2, 0, true, 5)};
  DataLoaderOptions rank1{.batch_size = 4, .sampler = std::make_shared<DistributedSampler>(18, 2, 1, true, 5)};
  DataLoader on_rank0(make_tensor_dataset(), rank0);
  const TensorDict rank0_state = on_rank0.state_dict();
  expect_error_parts([&] { with(rank1)->load_state_dict(rank0_state); },
                     {op + "the sampler's order for epoch 0 is not the one the state was saved with"});
  with(rank0)->load_state_dict(rank0_state);  // the same sampler settings load

  // Malformed values.
  auto changed = [&](const std::string& key, Tensor t) {
    TensorDict d;
    for (const auto& [k, v] : state) d.insert(k, k == key ? t : v);
    return d;
  };
  auto without = [&](const std::string& key) {
    TensorDict d;
    for (const auto& [k, v] : state)
      if (k != key) d.insert(k, v);
    return d;
  };
  DataLoader loader(make_tensor_dataset(), opts);
  expect_error_parts([&] { loader.load_state_dict(without("batch_size")); }, {op + "the state has no 'batch_size'"});
  expect_error_parts([&] { loader.load_state_dict(TensorDict{}); }, {op + "the state has no 'epoch'"});
  TensorDict extra = state;
  extra.insert("lr", scalar_tensor(0.1, DType::Float64));
  expect_error_parts([&] { loader.load_state_dict(extra); }, {op + "unexpected key 'lr'"});
  expect_error_parts([&] { loader.load_state_dict(changed("epoch", scalar_tensor(1.0, DType::Float32))); },
                     {op + "'epoch' must be a 0-dim int64 tensor, got float32 of shape []"});
  expect_error_parts([&] { loader.load_state_dict(changed("batches_consumed", from_vector<int64_t>({1, 2}, {2}))); },
                     {op + "'batches_consumed' must be a 0-dim int64 tensor, got int64 of shape [2]"});
  expect_error_parts([&] { loader.load_state_dict(changed("epoch", scalar_tensor(-1, DType::Int64))); },
                     {op + "'epoch' must be >= 0, got -1"});
  expect_error_parts([&] { loader.load_state_dict(changed("batches_consumed", scalar_tensor(6, DType::Int64))); },
                     {op + "'batches_consumed' is 6 but an epoch of this loader has 5 batches"});
  expect_error_parts([&] { loader.load_state_dict(changed("batches_consumed", scalar_tensor(-2, DType::Int64))); },
                     {op + "'batches_consumed' is -2"});
  expect_error_parts([&] { loader.load_state_dict(changed("order_fingerprint", scalar_tensor(12345, DType::Int64))); },
                     {op + "the sampler's order for epoch 1 is not the one the state was saved with"});

  // A refused state changes nothing: the pass in progress goes on.
  loader.begin_epoch(6);
  ASSERT_TRUE(loader.next().has_value());
  expect_error_parts([&] { loader.load_state_dict(changed("epoch", scalar_tensor(-1, DType::Int64))); }, {op});
  EXPECT_EQ(value(loader.state_dict(), "epoch"), 6);
  EXPECT_EQ(value(loader.state_dict(), "batches_consumed"), 1);
  int64_t rest = 0;
  while (loader.next()) ++rest;
  EXPECT_EQ(rest, 4);

  // The typed loader says which loader refused.
  TypedDataLoader typed(std::make_shared<SequenceDataset>(18), {.batch_size = 4}, pad_sequences);
  expect_error_parts([&] { typed.load_state_dict(state); },
                     {"TypedDataLoader::load_state_dict: the state was saved with shuffle 1 but this loader has 0"});
}

TEST(LoaderState, InATrainingCheckpoint) {
  nn::Linear model(2, 1);
  optim::SGD optimizer(model.parameters(), optim::SGDOptions(1e-3));
  const DataLoaderOptions opts{.batch_size = 4, .shuffle = true, .num_workers = 2, .seed = 8};
  DataLoader loader(make_tensor_dataset(), opts);
  loader.begin_epoch(3);
  ASSERT_TRUE(loader.next().has_value());
  ASSERT_TRUE(loader.next().has_value());

  optim::TrainingState saved{model, optimizer};
  saved.step = 17;
  saved.extra = loader_state_to_strings(loader.state_dict());
  saved.extra["run"] = "kept beside the loader's keys";
  EXPECT_EQ(saved.extra.at("data_loader.epoch"), "3");
  EXPECT_EQ(saved.extra.at("data_loader.batches_consumed"), "2");
  const std::string path = temp_path("kiln_loader_training_checkpoint");
  optim::save_training_checkpoint(path, saved);

  DataLoader resumed(make_tensor_dataset(), opts);
  optim::LoadedCheckpoint loaded = optim::load_training_checkpoint(path, {model, optimizer});
  std::filesystem::remove(path);
  EXPECT_EQ(loaded.step, 17);
  resumed.load_state_dict(loader_state_from_strings(loaded.extra));  // "run" is not the loader's: ignored
  std::vector<std::vector<Tensor>> rest;
  while (std::optional<Batch> b = loader.next()) rest.push_back(tensors_of(*b));
  ASSERT_EQ(rest.size(), 3u);
  expect_same_batches(one_pass(resumed), rest, "resumed from the training checkpoint");

  expect_error_parts([] { loader_state_from_strings({{"data_loader.epoch", "3x"}}); },
                     {"loader_state_from_strings: 'data_loader.epoch' is \"3x\", not an integer"});
  expect_error_parts([] { loader_state_from_strings({{"data_loader.epoch", ""}}); },
                     {"loader_state_from_strings: 'data_loader.epoch' is \"\", not an integer"});
  expect_error_parts([] { loader_state_to_strings(TensorDict{{"epoch", scalar_tensor(1.5, DType::Float64)}}); },
                     {"loader_state_to_strings: 'epoch' must be a 0-dim int64 tensor, got float64 of shape []"});
}
