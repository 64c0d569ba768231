// DataLoader(pin_memory=true) (Note [Loader pinned memory] in
// data/dataloader.h): batches in pinned memory, pinned by the thread that
// builds them, with the values an unpinned loader gives; a clear error when
// nothing can page-lock memory. A counting host allocator stands in for the
// CUDA pinned allocator, so these run without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "data/dataloader.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tests/tensor/pinned_test_allocator.h"

using namespace kiln;
using namespace kiln::data;

namespace {

// 23 examples: data row i = [3 i, 3 i + 1, 3 i + 2] (float32), target i = 7 i
// (int64), so every batch shows which examples it holds.
std::shared_ptr<TensorDataset> make_dataset() {
  Tensor data = arange(69, DType::Float32).reshape({23, 3});
  Tensor targets = arange(0, 161, 7, DType::Int64);
  return std::make_shared<TensorDataset>(data, targets);
}

DataLoaderOptions options(int64_t workers, bool pin) {
  DataLoaderOptions opts;
  opts.batch_size = 5;
  opts.shuffle = true;
  opts.seed = 4;
  opts.num_workers = workers;
  opts.pin_memory = pin;
  return opts;
}

std::vector<Batch> one_pass(DataLoader& loader) {
  std::vector<Batch> batches;
  for (Batch& b : loader) batches.push_back(b);
  return batches;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
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

TEST(DataLoaderPinMemory, BatchesArePinnedAndHoldTheSameValues) {
  auto ds = make_dataset();
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE("num_workers = " + std::to_string(workers));
    CountingHostAllocator pinned;
    PinnedAllocatorScope scope(&pinned);
    DataLoader plain_loader(ds, options(workers, false));
    DataLoader pinned_loader(ds, options(workers, true));
    std::vector<Batch> plain = one_pass(plain_loader);
    EXPECT_EQ(pinned.allocations.load(), 0);
    std::vector<Batch> batches = one_pass(pinned_loader);
    ASSERT_EQ(batches.size(), 5u);
    ASSERT_EQ(plain.size(), batches.size());
    int64_t examples = 0;
    for (size_t b = 0; b < batches.size(); ++b) {
      const Batch& batch = batches[b];
      EXPECT_TRUE(batch.data.is_pinned()) << "batch " << b;
      EXPECT_TRUE(batch.target.is_pinned()) << "batch " << b;
      EXPECT_FALSE(plain[b].data.is_pinned()) << "batch " << b;
      EXPECT_TRUE(same_bytes(batch.data, plain[b].data)) << "batch " << b;
      EXPECT_TRUE(same_bytes(batch.target, plain[b].target)) << "batch " << b;
      // Against the dataset's definition, not only the unpinned loader.
      for (int64_t k = 0; k < batch.target.size(0); ++k) {
        const int64_t i = batch.target.at<int64_t>({k}) / 7;
        for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(batch.data.at<float>({k, c}), static_cast<float>(3 * i + c));
      }
      examples += batch.target.size(0);
    }
    EXPECT_EQ(examples, 23);
    // Two tensors per batch, each pinned once.
    EXPECT_EQ(pinned.allocations.load(), 10);
    batches.clear();
    EXPECT_EQ(pinned.live_bytes.load(), 0);
  }
}

TEST(DataLoaderPinMemory, WorkersPinTheBatchesTheyBuild) {
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  DataLoader loader(make_dataset(), options(2, true));
  std::vector<Batch> batches = one_pass(loader);
  ASSERT_EQ(batches.size(), 5u);
  std::lock_guard<std::mutex> lock(pinned.mutex);
  EXPECT_EQ(pinned.threads.count(std::this_thread::get_id()), 0u)
      << "the consumer's thread pinned a batch; the workers should have";
  EXPECT_EQ(pinned.threads.size(), 2u);
}

TEST(DataLoaderPinMemory, WithoutAPinnedAllocatorTheOptionThrows) {
  PinnedAllocatorScope scope(nullptr);
  auto ds = make_dataset();
  for (int64_t workers : {0, 2}) {
    std::string message = error_message([&] { DataLoader loader(ds, options(workers, true)); });
    EXPECT_NE(message.find("DataLoader(pin_memory=true): no CUDA device is available to page-lock host memory ("),
              std::string::npos)
        << message;
  }
  // Without the option nothing needs page-locked memory.
  DataLoader loader(ds, options(2, false));
  EXPECT_EQ(one_pass(loader).size(), 5u);
}

TEST(DataLoaderPinMemory, OffByDefault) { EXPECT_FALSE(DataLoaderOptions().pin_memory); }
