// default_collate (Note [Default collate] in data/collate.h) against
// hand-built batches, and TypedDataLoader (Note [Typed loaders] in
// data/typed_dataloader.h) over examples of several structures: a struct
// with a custom (padding) collate, tuples and pairs with the default one,
// the same batches for any worker count, pinning and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "data/collate.h"
#include "data/dataloader.h"
#include "data/typed_dataloader.h"
#include "tensor/elementwise.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tests/data/data_test_util.h"
#include "tests/tensor/pinned_test_allocator.h"

using namespace kiln;
using namespace kiln::data;

// Options are written as designated initializers, {.batch_size = 4}, leaving
// the other fields at their defaults on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
using Indices = std::vector<int64_t>;

namespace {

// Same shape, dtype and values, bit for bit.
::testing::AssertionResult same_tensor(const Tensor& actual, const Tensor& expected) {
  if (!actual.defined() || !expected.defined())
    return ::testing::AssertionFailure() << "undefined tensor (actual " << actual.defined() << ", expected "
                                         << expected.defined() << ")";
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << detail::str(actual.shape()) << " vs "
                                         << detail::str(expected.shape());
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "dtype " << actual.dtype() << " vs " << expected.dtype();
  if (!equal(actual, expected)) return ::testing::AssertionFailure() << "values differ";
  return ::testing::AssertionSuccess();
}

// A structured example: an image, a label and a caption of varying length.
struct Sample {
  Tensor image;    // (2, 2) float32: every pixel = index
  int64_t label;   // index % 3
  Tensor caption;  // (1 + index % 4,) int64: index, index + 1, ...
};

class SampleDataset : public TypedDataset<Sample> {
 public:
  explicit SampleDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t index) const override {
    check_index(index);
    return {full({2, 2}, static_cast<double>(index)), index % 3, arange(index, index + 1 + index % 4, 1, DType::Int64)};
  }
  std::string name() const override { return "SampleDataset"; }

 private:
  int64_t n_;
};

// The batch a padding collate makes of Samples.
struct SampleBatch {
  Tensor images;    // (B, 2, 2)
  Tensor labels;    // (B,) int64
  Tensor captions;  // (B, L) int64, L the longest caption, padded with -1
  Tensor lengths;   // (B,) int64
};

// Stacks images and labels with default_collate and pads the captions.
SampleBatch pad_samples(std::vector<Sample> examples) {
  std::vector<Tensor> images;
  std::vector<int64_t> labels, lengths;
  int64_t longest = 0;
  for (const Sample& s : examples) {
    images.push_back(s.image);
    labels.push_back(s.label);
    lengths.push_back(s.caption.size(0));
    longest = std::max(longest, s.caption.size(0));
  }
  // captions: (B, longest), row b = caption b then -1s
  std::vector<int64_t> captions(examples.size() * static_cast<size_t>(longest), -1);
  for (size_t b = 0; b < examples.size(); ++b)
    for (int64_t t = 0; t < lengths[b]; ++t)
      captions[b * static_cast<size_t>(longest) + static_cast<size_t>(t)] = examples[b].caption.at<int64_t>({t});
  return {default_collate(std::move(images)), default_collate(std::move(labels)),
          from_vector<int64_t>(captions, {static_cast<int64_t>(examples.size()), longest}),
          default_collate(std::move(lengths))};
}

// The hand-built padded batch of `indices` (what pad_samples should give).
SampleBatch expected_sample_batch(const Indices& indices) {
  const int64_t b = static_cast<int64_t>(indices.size());
  int64_t longest = 0;
  for (int64_t i : indices) longest = std::max(longest, 1 + i % 4);
  std::vector<float> images;
  std::vector<int64_t> labels, captions, lengths;
  for (int64_t i : indices) {
    for (int k = 0; k < 4; ++k) images.push_back(static_cast<float>(i));
    labels.push_back(i % 3);
    lengths.push_back(1 + i % 4);
    for (int64_t t = 0; t < longest; ++t) captions.push_back(t < 1 + i % 4 ? i + t : -1);
  }
  return {from_vector<float>(images, {b, 2, 2}), from_vector<int64_t>(labels, {b}),
          from_vector<int64_t>(captions, {b, longest}), from_vector<int64_t>(lengths, {b})};
}

void expect_same_batch(const SampleBatch& actual, const SampleBatch& expected, const std::string& where) {
  EXPECT_TRUE(same_tensor(actual.images, expected.images)) << where;
  EXPECT_TRUE(same_tensor(actual.labels, expected.labels)) << where;
  EXPECT_TRUE(same_tensor(actual.captions, expected.captions)) << where;
  EXPECT_TRUE(same_tensor(actual.lengths, expected.lengths)) << where;
}

// Tuple examples: (features (3,) float32 = [i, i, i], label int64 = 10 i, weight double = i / 2).
class TupleDataset : public TypedDataset<std::tuple<Tensor, int64_t, double>> {
 public:
  explicit TupleDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  std::tuple<Tensor, int64_t, double> get(int64_t index) const override {
    check_index(index);
    return {full({3}, static_cast<double>(index)), 10 * index, static_cast<double>(index) / 2};
  }

 private:
  int64_t n_;
};

}  // namespace

// ---- default_collate, value by value --------------------------------------------

TEST(DefaultCollate, StacksTensorsAlongANewDim0) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<float>({7, 8, 9, 10, 11, 12}, {2, 3});
  Tensor batch = default_collate(std::vector<Tensor>{a, b});
  EXPECT_TRUE(same_tensor(batch, from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3})));
  // 0-dim tensors become a (B,) tensor.
  Tensor labels = default_collate(std::vector<Tensor>{scalar_tensor(4, DType::Int64), scalar_tensor(9, DType::Int64)});
  EXPECT_TRUE(same_tensor(labels, from_vector<int64_t>({4, 9}, {2})));
}

TEST(DefaultCollate, NumbersBecomeTensorsOfTheirKind) {
  EXPECT_TRUE(same_tensor(default_collate(std::vector<int64_t>{3, -1, 7}), from_vector<int64_t>({3, -1, 7}, {3})));
  // Every integer type collates to int64, as torch's Python ints do.
  EXPECT_TRUE(same_tensor(default_collate(std::vector<int>{2, 5}), from_vector<int64_t>({2, 5}, {2})));
  EXPECT_TRUE(same_tensor(default_collate(std::vector<uint8_t>{200, 1}), from_vector<int64_t>({200, 1}, {2})));
  EXPECT_TRUE(same_tensor(default_collate(std::vector<float>{0.5f, 2.0f}), from_vector<float>({0.5f, 2.0f}, {2})));
  EXPECT_TRUE(same_tensor(default_collate(std::vector<double>{0.1, 0.2}), from_vector<double>({0.1, 0.2}, {2})));
  EXPECT_TRUE(same_tensor(default_collate(std::vector<bool>{true, false, true}),
                          from_vector<bool>({true, false, true}, {3})));
  // Strings pass through.
  EXPECT_EQ(default_collate(std::vector<std::string>{"cat", "dog"}), (std::vector<std::string>{"cat", "dog"}));
}

TEST(DefaultCollate, TuplesPairsAndArraysCollatePositionByPosition) {
  using Ex = std::tuple<Tensor, int64_t, std::string>;
  std::vector<Ex> examples = {{from_vector<float>({1, 2}, {2}), 5, "a"}, {from_vector<float>({3, 4}, {2}), 6, "b"}};
  auto [x, y, names] = default_collate(std::move(examples));
  static_assert(std::is_same_v<decltype(x), Tensor> && std::is_same_v<decltype(names), std::vector<std::string>>);
  EXPECT_TRUE(same_tensor(x, from_vector<float>({1, 2, 3, 4}, {2, 2})));
  EXPECT_TRUE(same_tensor(y, from_vector<int64_t>({5, 6}, {2})));
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));

  std::vector<std::pair<Tensor, double>> pairs = {{scalar_tensor(1.5), 0.25}, {scalar_tensor(2.5), 0.75}};
  auto [values, weights] = default_collate(std::move(pairs));
  EXPECT_TRUE(same_tensor(values, from_vector<float>({1.5f, 2.5f}, {2})));
  EXPECT_TRUE(same_tensor(weights, from_vector<double>({0.25, 0.75}, {2})));

  std::vector<std::array<int64_t, 3>> triples = {{1, 2, 3}, {4, 5, 6}};
  std::array<Tensor, 3> columns = default_collate(std::move(triples));
  EXPECT_TRUE(same_tensor(columns[0], from_vector<int64_t>({1, 4}, {2})));
  EXPECT_TRUE(same_tensor(columns[2], from_vector<int64_t>({3, 6}, {2})));
}

TEST(DefaultCollate, VectorsMapsAndNesting) {
  // A vector per example: transposed, as torch does for lists.
  std::vector<std::vector<int64_t>> lists = {{1, 2}, {3, 4}, {5, 6}};
  std::vector<Tensor> positions = default_collate(std::move(lists));
  ASSERT_EQ(positions.size(), 2u);
  EXPECT_TRUE(same_tensor(positions[0], from_vector<int64_t>({1, 3, 5}, {3})));
  EXPECT_TRUE(same_tensor(positions[1], from_vector<int64_t>({2, 4, 6}, {3})));

  using Record = std::map<std::string, Tensor>;
  std::vector<Record> records = {{{"x", from_vector<float>({1, 2}, {2})}, {"y", scalar_tensor(0, DType::Int64)}},
                                 {{"x", from_vector<float>({3, 4}, {2})}, {"y", scalar_tensor(1, DType::Int64)}}};
  Record batch = default_collate(std::move(records));
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_TRUE(same_tensor(batch.at("x"), from_vector<float>({1, 2, 3, 4}, {2, 2})));
  EXPECT_TRUE(same_tensor(batch.at("y"), from_vector<int64_t>({0, 1}, {2})));

  // A tuple holding a pair holding a tensor.
  using Nested = std::tuple<std::pair<Tensor, int>, bool>;
  std::vector<Nested> nested = {{{from_vector<float>({1}, {1}), 7}, true}, {{from_vector<float>({2}, {1}), 8}, false}};
  auto [inner, flags] = default_collate(std::move(nested));
  EXPECT_TRUE(same_tensor(inner.first, from_vector<float>({1, 2}, {2, 1})));
  EXPECT_TRUE(same_tensor(inner.second, from_vector<int64_t>({7, 8}, {2})));
  EXPECT_TRUE(same_tensor(flags, from_vector<bool>({true, false}, {2})));
}

TEST(DefaultCollate, ExamplesBecomeBatches) {
  std::vector<Example> labelled = {{from_vector<float>({1, 2}, {2}), scalar_tensor(3, DType::Int64)},
                                   {from_vector<float>({4, 5}, {2}), scalar_tensor(6, DType::Int64)}};
  Batch batch = default_collate(std::move(labelled));
  EXPECT_TRUE(same_tensor(batch.data, from_vector<float>({1, 2, 4, 5}, {2, 2})));
  EXPECT_TRUE(same_tensor(batch.target, from_vector<int64_t>({3, 6}, {2})));
  std::vector<Example> unlabelled = {{from_vector<float>({1}, {1}), Tensor()}, {from_vector<float>({2}, {1}), Tensor()}};
  EXPECT_FALSE(default_collate(std::move(unlabelled)).target.defined());
}

TEST(DefaultCollate, TypesWithoutADefault) {
  static_assert(DefaultCollatable<std::tuple<Tensor, std::vector<double>, std::map<std::string, int>>>);
  static_assert(!DefaultCollatable<Sample>);
  static_assert(!DefaultCollatable<std::pair<Tensor, Sample>>);
  static_assert(!DefaultCollatable<const char*>);
}

TEST(DefaultCollate, ErrorsNameTheExample) {
  expect_error_parts([] { default_collate(std::vector<Tensor>{}); }, {"default_collate: the batch is empty"});
  expect_error_parts([] { default_collate(std::vector<int64_t>{}); }, {"default_collate: the batch is empty"});
  expect_error_parts([] { default_collate(std::vector<Tensor>{zeros({4}), zeros({4}), zeros({5})}); },
                     {"default_collate: the tensor of example 2 of the batch has shape [5] but example 0 has [4]",
                      "padding"});
  expect_error_parts([] { default_collate(std::vector<Tensor>{zeros({2}), Tensor()}); },
                     {"default_collate: the tensor of example 1 of the batch is an undefined tensor"});
  expect_error_parts([] { default_collate(std::vector<Tensor>{zeros({2}), zeros({2}, DType::Int64)}); },
                     {"default_collate: the tensor of example 1 of the batch is int64 but example 0 is float32"});
  expect_error_parts([] { default_collate(std::vector<std::vector<int64_t>>{{1, 2}, {3}}); },
                     {"default_collate: example 1 of the batch is a sequence of 1 elements but example 0 has 2"});
  using Record = std::map<std::string, int64_t>;
  expect_error_parts([] { default_collate(std::vector<Record>{{{"a", 1}, {"b", 2}}, {{"a", 3}}}); },
                     {"default_collate: example 1 of the batch has no key 'b' but example 0 has"});
  expect_error_parts([] { default_collate(std::vector<Record>{{{"a", 1}}, {{"a", 3}, {"c", 4}}}); },
                     {"default_collate: example 1 of the batch has a key 'c' that example 0 has not"});
  expect_error_parts(
      [] {
        default_collate(std::vector<Example>{{zeros({1}), scalar_tensor(1, DType::Int64)}, {zeros({1}), Tensor()}});
      },
      {"default_collate: example 1 of the batch has no target but example 0 has one"});
  expect_error_parts([] { default_collate(std::vector<Example>{{zeros({1}), Tensor()}, {zeros({2}), Tensor()}}); },
                     {"default_collate: the data of example 1 of the batch has shape [2] but example 0 has [1]"});
}

// ---- TypedDataLoader ----------------------------------------------------------------

TEST(TypedDataLoader, StructExamplesWithAPaddingCollate) {
  auto ds = std::make_shared<SampleDataset>(10);
  TypedDataLoader loader(ds, {.batch_size = 4}, pad_samples);
  static_assert(std::is_same_v<decltype(loader), TypedDataLoader<Sample, SampleBatch>>);
  EXPECT_EQ(loader.size(), 3);
  std::vector<Indices> expected = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}};
  size_t b = 0;
  for (SampleBatch& batch : loader) {
    ASSERT_LT(b, expected.size());
    expect_same_batch(batch, expected_sample_batch(expected[b]), "batch " + std::to_string(b));
    ++b;
  }
  EXPECT_EQ(b, expected.size());
  // The padding is real: batch 0's captions are (4, 4) with -1 after each length.
  EXPECT_EQ(expected_sample_batch(expected[0]).captions.shape(), (Shape{4, 4}));
}

TEST(TypedDataLoader, TupleExamplesWithTheDefaultCollate) {
  auto ds = std::make_shared<TupleDataset>(7);
  TypedDataLoader loader(ds, {.batch_size = 3, .shuffle = true, .seed = 5});
  static_assert(std::is_same_v<decltype(loader)::batch_type, std::tuple<Tensor, Tensor, Tensor>>);
  loader.set_epoch(2);
  Indices order = random_permutation(7, 5 + 2);
  int64_t seen = 0;
  for (auto& [features, labels, weights] : loader) {
    const int64_t n = labels.size(0);
    std::vector<float> f;
    std::vector<int64_t> l;
    std::vector<double> w;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = order[static_cast<size_t>(seen + k)];
      for (int c = 0; c < 3; ++c) f.push_back(static_cast<float>(i));
      l.push_back(10 * i);
      w.push_back(static_cast<double>(i) / 2);
    }
    EXPECT_TRUE(same_tensor(features, from_vector<float>(f, {n, 3})));
    EXPECT_TRUE(same_tensor(labels, from_vector<int64_t>(l, {n})));
    EXPECT_TRUE(same_tensor(weights, from_vector<double>(w, {n})));
    seen += n;
  }
  EXPECT_EQ(seen, 7);
}

TEST(TypedDataLoader, OverAnExistingDatasetAndWithDefaultCollateNamed) {
  // A data::Dataset is a TypedDataset<Example>: a TypedDataLoader batches it
  // with default_collate as DataLoader does with get_batch.
  Tensor data = arange(12, DType::Float32).reshape({6, 2});
  Tensor targets = from_vector<int64_t>({0, 1, 2, 3, 4, 5}, {6});
  auto ds = std::make_shared<TensorDataset>(data, targets);
  TypedDataLoader typed(ds, {.batch_size = 4, .shuffle = true, .seed = 1}, default_collate);
  DataLoader plain(ds, {.batch_size = 4, .shuffle = true, .seed = 1});
  static_assert(std::is_same_v<decltype(typed), TypedDataLoader<Example, Batch>>);
  std::vector<Batch> a, b;
  for (Batch& batch : typed) a.push_back(batch);
  for (Batch& batch : plain) b.push_back(batch);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_TRUE(same_tensor(a[k].data, b[k].data)) << "batch " << k;
    EXPECT_TRUE(same_tensor(a[k].target, b[k].target)) << "batch " << k;
  }
}

TEST(TypedDataLoader, SameBatchesForAnyWorkerCount) {
  auto ds = std::make_shared<SampleDataset>(29);
  std::vector<std::vector<SampleBatch>> per_workers;
  for (int64_t workers : {0, 1, 3}) {
    TypedDataLoader loader(
        ds, {.batch_size = 4, .shuffle = true, .drop_last = true, .num_workers = workers, .prefetch_batches = 1, .seed = 9},
        pad_samples);
    loader.set_epoch(3);
    std::vector<SampleBatch> batches;
    while (std::optional<SampleBatch> batch = loader.next()) batches.push_back(std::move(*batch));
    EXPECT_TRUE(batches.empty());  // no pass begun: next() has nothing
    loader.begin_epoch(3);
    while (std::optional<SampleBatch> batch = loader.next()) batches.push_back(std::move(*batch));
    EXPECT_EQ(batches.size(), 7u) << workers << " workers";
    per_workers.push_back(std::move(batches));
  }
  // Against the hand-built batches of the shuffled order, for every worker count.
  Indices order = random_permutation(29, 9 + 3);
  for (size_t w = 0; w < per_workers.size(); ++w) {
    for (size_t b = 0; b < per_workers[w].size(); ++b) {
      Indices indices(order.begin() + static_cast<std::ptrdiff_t>(4 * b),
                      order.begin() + static_cast<std::ptrdiff_t>(4 * b + 4));
      expect_same_batch(per_workers[w][b], expected_sample_batch(indices),
                        "workers case " + std::to_string(w) + ", batch " + std::to_string(b));
    }
  }
}

TEST(TypedDataLoader, ErrorsFromGetAndCollateNameTheBatch) {
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE("num_workers = " + std::to_string(workers));
    auto ds = std::make_shared<SampleDataset>(10);
    // Captions differ in length: the default collate of a tuple of them refuses.
    auto no_padding = [](std::vector<Sample> examples) {
      std::vector<Tensor> captions;
      for (Sample& s : examples) captions.push_back(s.caption);
      return default_collate(std::move(captions));
    };
    TypedDataLoader loader(ds, {.batch_size = 2, .num_workers = workers}, no_padding);
    loader.begin_epoch(0);
    // Batch 0 is examples 0 and 1: captions of length 1 and 2.
    expect_error_parts([&] { loader.next(); },
                       {"TypedDataLoader: building batch 0 (dataset indices [0, 1]) of SampleDataset failed: ",
                        "default_collate: the tensor of example 1 of the batch has shape [2] but example 0 has [1]"});
    EXPECT_FALSE(loader.next().has_value());

    // A sampler larger than the dataset.
    TypedDataLoader beyond(ds, {.batch_size = 4, .num_workers = workers, .sampler = std::make_shared<SequentialSampler>(12)},
                           pad_samples);
    beyond.begin_epoch(0);
    ASSERT_TRUE(beyond.next().has_value());
    ASSERT_TRUE(beyond.next().has_value());
    expect_error_parts([&] { beyond.next(); },
                       {"building batch 2 (dataset indices [8, 9, 10, 11])",
                        "SampleDataset: index 10 is out of range for a dataset of size 10"});
  }
}

TEST(TypedDataLoader, RejectsBadArguments) {
  std::shared_ptr<SampleDataset> none;
  expect_error_parts([&] { TypedDataLoader loader(none, {}, pad_samples); }, {"TypedDataLoader: the dataset is null"});
  auto ds = std::make_shared<SampleDataset>(4);
  expect_error_parts([&] { TypedDataLoader<Sample, SampleBatch> loader(ds, {}, nullptr); },
                     {"TypedDataLoader: the collate function is empty"});
  expect_error_parts([&] { TypedDataLoader loader(ds, {.batch_size = 0}, pad_samples); },
                     {"TypedDataLoader: batch_size must be >= 1, got 0"});
  expect_error_parts(
      [&] { TypedDataLoader loader(ds, {.shuffle = true, .sampler = std::make_shared<SequentialSampler>(4)}, pad_samples); },
      {"TypedDataLoader: shuffle=true cannot be combined with a sampler"});
  // SampleBatch has no tensors a loader could find, nor a pin_memory() member.
  static_assert(!Pinnable<SampleBatch>);
  expect_error_parts([&] { TypedDataLoader loader(ds, {.pin_memory = true}, pad_samples); },
                     {"TypedDataLoader: pin_memory=true needs a batch of tensors"});
}

// A batch type that pins itself, as torch's custom batches do.
struct PinnableBatch {
  Tensor images;
  PinnableBatch pin_memory() const { return {images.pin_memory()}; }
};

TEST(TypedDataLoader, PinsTensorsInsideAnyStructure) {
  static_assert(Pinnable<std::tuple<Tensor, std::vector<Tensor>, std::map<std::string, Tensor>, int64_t>>);
  static_assert(Pinnable<PinnableBatch>);
  CountingHostAllocator pinned;
  PinnedAllocatorScope scope(&pinned);
  auto ds = std::make_shared<TupleDataset>(5);
  for (int64_t workers : {0, 2}) {
    TypedDataLoader loader(ds, {.batch_size = 2, .num_workers = workers, .pin_memory = true});
    int64_t batches = 0;
    for (auto& [features, labels, weights] : loader) {
      EXPECT_TRUE(features.is_pinned());
      EXPECT_TRUE(labels.is_pinned());
      EXPECT_TRUE(weights.is_pinned());
      ++batches;
    }
    EXPECT_EQ(batches, 3);
  }
  EXPECT_EQ(pinned.allocations.load(), 2 * 3 * 3);  // two loaders, three batches, three tensors each

  auto samples = std::make_shared<SampleDataset>(4);
  TypedDataLoader own(samples, {.batch_size = 2, .pin_memory = true}, [](std::vector<Sample> examples) {
    std::vector<Tensor> images;
    for (Sample& s : examples) images.push_back(s.image);
    return PinnableBatch{default_collate(std::move(images))};
  });
  for (PinnableBatch& batch : own) EXPECT_TRUE(batch.images.is_pinned());
}
