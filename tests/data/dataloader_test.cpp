// DataLoader: batch counts, shuffling per epoch, identical batches for any
// worker count, error propagation and shutdown; TensorDataset's batches.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "data/dataloader.h"
#include "tensor/error.h"
#include "tensor/factory.h"

using namespace kiln;
using namespace kiln::data;
using Indices = std::vector<int64_t>;

namespace {

// Example i: data = [i, 10 i] (float32), target = i (int64, 0-d), so every
// batch reveals which indices it holds. The default get_batch (get + stack)
// is what it exercises.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t fail_at = -1, int sleep_ms = 0)
      : n_(n), fail_at_(fail_at), sleep_ms_(sleep_ms) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    check_index(index);
    KILN_CHECK(index != fail_at_, "CountingDataset: example ", index, " is corrupt");
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    ++calls;
    float v = static_cast<float>(index);
    return {from_vector<float>({v, 10 * v}, {2}), scalar_tensor(index, DType::Int64)};
  }
  std::string name() const override { return "CountingDataset"; }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, fail_at_;
  int sleep_ms_;
};

Indices targets_of(const Batch& b) {
  Indices out;
  for (int64_t k = 0; k < b.target.size(0); ++k) out.push_back(b.target.at<int64_t>({k}));
  return out;
}

// Every batch's targets, in order, for one pass.
std::vector<Indices> pass_targets(DataLoader& loader) {
  std::vector<Indices> all;
  for (Batch& b : loader) {
    EXPECT_EQ(b.data.shape(), (Shape{b.target.size(0), 2}));
    for (int64_t k = 0; k < b.target.size(0); ++k) {
      EXPECT_EQ(b.data.at<float>({k, 1}), 10.0f * static_cast<float>(b.target.at<int64_t>({k})));
    }
    all.push_back(targets_of(b));
  }
  return all;
}

template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.message();
  }
  return "<no error>";
}

}  // namespace

TEST(TensorDataset, GetAndGetBatch) {
  // data: (4, 3), targets: (4,)
  Tensor data = arange(12, DType::Float32).reshape({4, 3});
  Tensor targets = from_vector<int64_t>({7, 8, 9, 10}, {4});
  TensorDataset ds(data, targets);
  EXPECT_EQ(ds.size(), 4);
  Example e = ds.get(2);
  EXPECT_EQ(e.data.shape(), (Shape{3}));
  EXPECT_EQ(e.data.at<float>({1}), 7.0f);
  EXPECT_EQ(e.target.item<int64_t>(), 9);
  Batch b = ds.get_batch({3, 0, 3});
  EXPECT_EQ(b.data.shape(), (Shape{3, 3}));
  EXPECT_EQ(b.data.at<float>({0, 2}), 11.0f);
  EXPECT_EQ(b.data.at<float>({1, 0}), 0.0f);
  EXPECT_EQ(targets_of(b), (Indices{10, 7, 10}));
  // The fast path agrees with the generic get + stack.
  Batch slow = ds.Dataset::get_batch({3, 0, 3});
  EXPECT_EQ(slow.data.shape(), b.data.shape());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(slow.data.at<float>({i, j}), b.data.at<float>({i, j}));
  EXPECT_EQ(targets_of(slow), targets_of(b));
}

TEST(TensorDataset, Errors) {
  Tensor data = zeros({4, 3});
  TensorDataset ds(data, from_vector<int64_t>({1, 2, 3, 4}, {4}));
  EXPECT_EQ(error_message([&] { ds.get(4); }), "TensorDataset: index 4 is out of range for a dataset of size 4");
  EXPECT_EQ(error_message([&] { ds.get_batch({0, -1}); }),
            "TensorDataset: index -1 is out of range for a dataset of size 4");
  EXPECT_EQ(error_message([&] { ds.get_batch({}); }), "TensorDataset: get_batch needs at least one index");
  EXPECT_EQ(error_message([&] { TensorDataset(data, zeros({5})); }),
            "TensorDataset: data has 4 examples (shape [4, 3]) but targets has 5 (shape [5])");
  // Unlabelled data: the batch has no target.
  TensorDataset unlabelled(data, Tensor());
  EXPECT_FALSE(unlabelled.get_batch({0, 1}).target.defined());
}

TEST(DataLoader, BatchCountsAndDropLast) {
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoaderOptions opts;
  opts.batch_size = 4;
  DataLoader loader(ds, opts);
  EXPECT_EQ(loader.size(), 3);
  EXPECT_EQ(pass_targets(loader), (std::vector<Indices>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));

  opts.drop_last = true;
  DataLoader dropping(ds, opts);
  EXPECT_EQ(dropping.size(), 2);
  EXPECT_EQ(pass_targets(dropping), (std::vector<Indices>{{0, 1, 2, 3}, {4, 5, 6, 7}}));

  opts.batch_size = 5;  // divides evenly: drop_last drops nothing
  DataLoader even(ds, opts);
  EXPECT_EQ(even.size(), 2);
  EXPECT_EQ(pass_targets(even).size(), 2u);
}

TEST(DataLoader, NextAfterBeginEpoch) {
  auto ds = std::make_shared<CountingDataset>(3);
  DataLoaderOptions opts;
  opts.batch_size = 2;
  DataLoader loader(ds, opts);
  EXPECT_FALSE(loader.next().has_value());  // no pass begun
  loader.begin_epoch(0);
  std::optional<Batch> a = loader.next(), b = loader.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(targets_of(*a), (Indices{0, 1}));
  EXPECT_EQ(targets_of(*b), (Indices{2}));
  EXPECT_FALSE(loader.next().has_value());
}

TEST(DataLoader, SeededShuffleReproducibleAndDifferentPerEpoch) {
  auto ds = std::make_shared<CountingDataset>(20);
  DataLoaderOptions opts;
  opts.batch_size = 3;
  opts.shuffle = true;
  opts.seed = 11;
  DataLoader a(ds, opts), b(ds, opts);
  std::vector<Indices> a0 = pass_targets(a), a1 = pass_targets(a);  // epochs 0 and 1
  EXPECT_EQ(a.epoch(), 2);
  EXPECT_EQ(pass_targets(b), a0);
  EXPECT_NE(a1, a0);
  b.set_epoch(1);
  EXPECT_EQ(pass_targets(b), a1);
  // Every example exactly once per epoch, in the order of the sampler.
  Indices flat;
  for (const Indices& batch : a0) flat.insert(flat.end(), batch.begin(), batch.end());
  EXPECT_EQ(flat, random_permutation(20, 11));
  opts.seed = 12;
  DataLoader c(ds, opts);
  EXPECT_NE(pass_targets(c), a0);
}

TEST(DataLoader, SameBatchesForAnyWorkerCount) {
  auto ds = std::make_shared<CountingDataset>(37);
  std::vector<std::vector<Indices>> per_workers;
  for (int64_t workers : {0, 1, 3}) {
    DataLoaderOptions opts;
    opts.batch_size = 4;
    opts.shuffle = true;
    opts.seed = 3;
    opts.num_workers = workers;
    opts.prefetch_batches = 1;
    DataLoader loader(ds, opts);
    loader.set_epoch(5);
    per_workers.push_back(pass_targets(loader));
    EXPECT_EQ(per_workers.back().size(), 10u);
  }
  EXPECT_EQ(per_workers[1], per_workers[0]);
  EXPECT_EQ(per_workers[2], per_workers[0]);
}

TEST(DataLoader, WorkerErrorNamesTheBatch) {
  for (int64_t workers : {0, 2}) {
    auto ds = std::make_shared<CountingDataset>(10, /*fail_at=*/6);
    DataLoaderOptions opts;
    opts.batch_size = 4;
    opts.num_workers = workers;
    DataLoader loader(ds, opts);
    loader.begin_epoch(0);
    ASSERT_TRUE(loader.next().has_value()) << "workers " << workers;  // batch 0 is fine
    std::string message = error_message([&] { loader.next(); });
    EXPECT_EQ(message.rfind("DataLoader: building batch 1 (dataset indices [4, 5, 6, 7]) of CountingDataset "
                            "failed: CountingDataset: example 6 is corrupt",
                            0),
              0u)
        << "workers " << workers << ": " << message;
    EXPECT_FALSE(loader.next().has_value());  // the pass ended with the error
    // The next pass starts afresh.
    loader.begin_epoch(1);
    ASSERT_TRUE(loader.next().has_value());
  }
}

TEST(DataLoader, DestroyedMidEpochDoesNotHang) {
  // Slow examples and many batches: the workers are mid-batch or waiting for
  // room when the loader goes away; the destructor must stop and join them.
  auto ds = std::make_shared<CountingDataset>(400, -1, /*sleep_ms=*/2);
  auto start = std::chrono::steady_clock::now();
  {
    DataLoaderOptions opts;
    opts.batch_size = 2;
    opts.num_workers = 3;
    opts.prefetch_batches = 2;
    DataLoader loader(ds, opts);
    loader.begin_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
  }
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  // The workers stayed within their window: 2 taken + at most 3 * 2 ahead,
  // plus the batch each worker had in hand when it was stopped.
  const int64_t calls = ds->calls.load();
  EXPECT_LE(calls, 2 * (2 + 3 * 2 + 3));
  EXPECT_GE(calls, 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ds->calls.load(), calls);  // nothing runs after the destructor
}

TEST(DataLoader, RestartingMidEpoch) {
  auto ds = std::make_shared<CountingDataset>(30);
  DataLoaderOptions opts;
  opts.batch_size = 5;
  opts.num_workers = 2;
  DataLoader loader(ds, opts);
  loader.begin_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  loader.set_epoch(0);
  EXPECT_EQ(pass_targets(loader).size(), 6u);  // a full pass, the first one abandoned
}

TEST(DataLoader, WithDistributedSampler) {
  // 10 examples over 3 ranks: rank 1 sees [1, 4, 7, 0] unshuffled; batches of 3.
  auto ds = std::make_shared<CountingDataset>(10);
  DataLoaderOptions opts;
  opts.batch_size = 3;
  opts.num_workers = 2;
  opts.sampler = std::make_shared<DistributedSampler>(10, 3, 1, /*shuffle=*/false);
  DataLoader loader(ds, opts);
  EXPECT_EQ(loader.size(), 2);
  EXPECT_EQ(pass_targets(loader), (std::vector<Indices>{{1, 4, 7}, {0}}));

  // Shuffled: the loader's epoch drives the sampler's.
  auto sampler = std::make_shared<DistributedSampler>(10, 3, 1, true, /*seed=*/4);
  opts.sampler = sampler;
  DataLoader shuffled(ds, opts);
  shuffled.set_epoch(2);
  std::vector<Indices> batches = pass_targets(shuffled);
  EXPECT_EQ(sampler->epoch(), 2);
  Indices flat;
  for (const Indices& batch : batches) flat.insert(flat.end(), batch.begin(), batch.end());
  EXPECT_EQ(flat, sampler->indices());
}

TEST(DataLoader, RejectsBadOptions) {
  auto ds = std::make_shared<CountingDataset>(4);
  DataLoaderOptions opts;
  opts.batch_size = 0;
  EXPECT_EQ(error_message([&] { DataLoader(ds, opts); }), "DataLoader: batch_size must be >= 1, got 0");
  opts = {};
  opts.num_workers = -1;
  EXPECT_EQ(error_message([&] { DataLoader(ds, opts); }), "DataLoader: num_workers must be >= 0, got -1");
  opts = {};
  opts.prefetch_batches = 0;
  EXPECT_EQ(error_message([&] { DataLoader(ds, opts); }), "DataLoader: prefetch_batches must be >= 1, got 0");
  opts = {};
  opts.shuffle = true;
  opts.sampler = std::make_shared<SequentialSampler>(4);
  EXPECT_EQ(error_message([&] { DataLoader(ds, opts); }),
            "DataLoader: shuffle=true cannot be combined with a sampler; shuffle in the sampler instead");
  EXPECT_EQ(error_message([&] { DataLoader(nullptr, {}); }), "DataLoader: the dataset is null");
  // An index beyond the dataset (a sampler for a larger dataset) names both.
  opts = {};
  opts.sampler = std::make_shared<SequentialSampler>(6);
  opts.batch_size = 6;
  DataLoader loader(ds, opts);
  loader.begin_epoch(0);
  std::string message = error_message([&] { loader.next(); });
  EXPECT_NE(message.find("CountingDataset: index 4 is out of range for a dataset of size 4"), std::string::npos)
      << message;
}
