// An image folder of PNGs converted to CIFAR-10 batches and read back through
// Cifar10Dataset, the transform seeding of both vision Datasets, and the
// errors a user meets converting their own data.
#include "data/vision_datasets.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "data/cifar10.h"
#include "data/image_folder_to_cifar.h"
#include "tensor/error.h"
#include "tensor/random.h"
#include "data_test_util.h"
#include "stb_image_write.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

template <class T>
std::vector<T> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<T>(c.data<T>(), c.data<T>() + c.numel());
}

// The pixel that image `id` holds at (c, y, x): distinct across images,
// channels and positions, so a swapped plane, row or image shows.
uint8_t pixel(int64_t id, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>(id * 37 + c * 101 + y * 7 + x * 3);
}

// Image `id` as the (3, 32, 32) CHW bytes a CIFAR-10 record holds.
std::vector<uint8_t> chw_pixels(int64_t id) {
  std::vector<uint8_t> out;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 32; ++y)
      for (int64_t x = 0; x < 32; ++x) out.push_back(pixel(id, c, y, x));
  return out;
}

// Writes image `id` as an RGB PNG of the given size (HWC bytes for stb).
void write_png(const fs::path& path, int64_t id, int height = 32, int width = 32, int channels = 3) {
  fs::create_directories(path.parent_path());
  std::vector<uint8_t> hwc;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) hwc.push_back(pixel(id, c, y, x));
  ASSERT_NE(stbi_write_png(path.string().c_str(), width, height, channels, hwc.data(), width * channels), 0)
      << path;
}

class VisionDatasetsTest : public ::testing::Test {
 protected:
  // The image folder: train/cat 4 images (ids 0..3), train/dog 3 (ids 4..6),
  // test/cat 1 (id 100), test/dog 2 (ids 101, 102). In ImageFolder order,
  // training image i has id i and test image i has id 100 + i.
  static constexpr int64_t kTrain = 7;
  static constexpr int64_t kTest = 3;
  static int64_t train_label(int64_t i) { return i < 4 ? 0 : 1; }
  static int64_t test_label(int64_t i) { return i < 1 ? 0 : 1; }

  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_vision_datasets_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    root_ = dir_ / "folder";
    out_ = dir_ / "out";
    const char* train_files[kTrain] = {"cat/a.png", "cat/b.png", "cat/c.png", "cat/d.png",
                                       "dog/a.png", "dog/b.png", "dog/c.png"};
    for (int64_t i = 0; i < kTrain; ++i) write_png(root_ / "train" / train_files[i], i);
    const char* test_files[kTest] = {"cat/x.png", "dog/x.png", "dog/y.png"};
    for (int64_t i = 0; i < kTest; ++i) write_png(root_ / "test" / test_files[i], 100 + i);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string convert() { return convert_image_folder_to_cifar(root_.string(), out_.string()).folder; }

  fs::path dir_, root_, out_;
};

TEST_F(VisionDatasetsTest, ConverterWritesFiveTrainBatchesTestBatchAndMeta) {
  CifarConversion c = convert_image_folder_to_cifar(root_.string(), out_.string());
  EXPECT_EQ(c.class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(c.train_images, kTrain);
  EXPECT_EQ(c.test_images, kTest);
  const fs::path folder = out_ / "cifar-10-batches-bin";
  EXPECT_EQ(c.folder, folder.string());
  // 7 images in 5 batches: 2, 2, 1, 1, 1 records.
  const int64_t counts[5] = {2, 2, 1, 1, 1};
  for (int b = 0; b < 5; ++b)
    EXPECT_EQ(fs::file_size(folder / ("data_batch_" + std::to_string(b + 1) + ".bin")),
              static_cast<uintmax_t>(counts[b] * kCifar10RecordBytes))
        << "batch " << b + 1;
  EXPECT_EQ(fs::file_size(folder / "test_batch.bin"), static_cast<uintmax_t>(kTest * kCifar10RecordBytes));
  std::ifstream meta(folder / "batches.meta.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(meta), {}), "cat\ndog\n");
}

TEST_F(VisionDatasetsTest, ConvertedDataLoadsWithTheSamePixelsAndLabels) {
  convert();
  Cifar10Dataset train(out_.string(), true);
  Cifar10Dataset test(out_.string(), false);
  ASSERT_EQ(train.size(), kTrain);
  ASSERT_EQ(test.size(), kTest);
  EXPECT_EQ(train.name(), "CIFAR-10 (" + out_.string() + ", train)");
  EXPECT_EQ(test.name(), "CIFAR-10 (" + out_.string() + ", test)");
  for (int64_t i = 0; i < kTrain; ++i) {
    Example e = train.get(i);
    ASSERT_EQ(e.data.dtype(), DType::UInt8);
    ASSERT_EQ(e.data.shape(), (Shape{3, 32, 32}));
    ASSERT_EQ(e.target.dtype(), DType::Int64);
    ASSERT_EQ(e.target.dim(), 0);
    EXPECT_EQ(values<uint8_t>(e.data), chw_pixels(i)) << "train image " << i;
    EXPECT_EQ(e.target.item<int64_t>(), train_label(i)) << "train image " << i;
  }
  for (int64_t i = 0; i < kTest; ++i) {
    Example e = test.get(i);
    EXPECT_EQ(values<uint8_t>(e.data), chw_pixels(100 + i)) << "test image " << i;
    EXPECT_EQ(e.target.item<int64_t>(), test_label(i)) << "test image " << i;
  }
}

TEST_F(VisionDatasetsTest, Cifar10GetBatchWithoutTransformGathersInOrder) {
  convert();
  Cifar10Dataset train(out_.string(), true);
  EXPECT_EQ(train.transform(), nullptr);
  Batch b = train.get_batch({5, 0, 5});
  ASSERT_EQ(b.data.shape(), (Shape{3, 3, 32, 32}));
  ASSERT_EQ(b.data.dtype(), DType::UInt8);
  std::vector<uint8_t> expected;
  for (int64_t id : {5, 0, 5}) {
    std::vector<uint8_t> one = chw_pixels(id);
    expected.insert(expected.end(), one.begin(), one.end());
  }
  EXPECT_EQ(values<uint8_t>(b.data), expected);
  EXPECT_EQ(values<int64_t>(b.target), (std::vector<int64_t>{1, 0, 1}));
}

TEST_F(VisionDatasetsTest, TransformIsSeededBySeedEpochAndIndex) {
  convert();
  auto transform = std::make_shared<transforms::Compose>(std::vector<std::shared_ptr<transforms::Transform>>{
      std::make_shared<transforms::RandomCrop>(32, 4), std::make_shared<transforms::RandomHorizontalFlip>(),
      std::make_shared<transforms::ToTensor>()});
  Cifar10Dataset train(out_.string(), true, transform, 7);
  Cifar10Dataset plain(out_.string(), true);

  // Sample i of epoch e is transform(image_i, Generator(sample_seed(7, e, i))).
  auto expected = [&](int64_t i, uint64_t epoch) {
    Generator gen(transforms::sample_seed(7, epoch, static_cast<uint64_t>(i)));
    return values<float>(transform->apply(plain.get(i).data, gen));
  };
  train.set_epoch(3);
  EXPECT_EQ(train.epoch(), 3u);
  for (int64_t i = 0; i < kTrain; ++i) {
    Example e = train.get(i);
    ASSERT_EQ(e.data.dtype(), DType::Float32);
    ASSERT_EQ(e.data.shape(), (Shape{3, 32, 32}));
    EXPECT_EQ(values<float>(e.data), expected(i, 3)) << "sample " << i;
    EXPECT_EQ(values<float>(train.get(i).data), values<float>(e.data)) << "sample " << i << " drawn twice";
    EXPECT_EQ(e.target.item<int64_t>(), train_label(i));
  }

  // A batch holds the same samples as get(), whatever the batch.
  Batch b = train.get_batch({6, 2});
  ASSERT_EQ(b.data.shape(), (Shape{2, 3, 32, 32}));
  std::vector<float> batch_expected = expected(6, 3), second = expected(2, 3);
  batch_expected.insert(batch_expected.end(), second.begin(), second.end());
  EXPECT_EQ(values<float>(b.data), batch_expected);
  EXPECT_EQ(values<int64_t>(b.target), (std::vector<int64_t>{1, 0}));

  // Another epoch or seed gives other crops and flips: with 7 samples, at
  // least one differs (each has 81 * 2 outcomes).
  auto all = [&](const Cifar10Dataset& ds) {
    std::vector<std::vector<float>> out;
    for (int64_t i = 0; i < kTrain; ++i) out.push_back(values<float>(ds.get(i).data));
    return out;
  };
  std::vector<std::vector<float>> epoch3 = all(train);
  train.set_epoch(4);
  EXPECT_NE(all(train), epoch3);
  Cifar10Dataset other_seed(out_.string(), true, transform, 8);
  other_seed.set_epoch(3);
  EXPECT_NE(all(other_seed), epoch3);
}

TEST_F(VisionDatasetsTest, ImageFolderDatasetInMemoryAndLazyAgree) {
  ImageFolderDatasetOptions lazy_options;
  lazy_options.lazy = true;
  ImageFolderDataset memory((root_ / "train").string());
  ImageFolderDataset lazy((root_ / "train").string(), nullptr, 0, lazy_options);
  EXPECT_TRUE(memory.in_memory());
  EXPECT_FALSE(lazy.in_memory());
  EXPECT_EQ(memory.name(), "ImageFolder (" + (root_ / "train").string() + ")");
  EXPECT_EQ(lazy.class_names(), (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(memory.size(), kTrain);
  ASSERT_EQ(lazy.size(), kTrain);
  for (int64_t i = 0; i < kTrain; ++i) {
    EXPECT_EQ(values<uint8_t>(memory.get(i).data), chw_pixels(i)) << "image " << i;
    EXPECT_EQ(values<uint8_t>(lazy.get(i).data), chw_pixels(i)) << "image " << i;
    EXPECT_EQ(lazy.get(i).target.item<int64_t>(), train_label(i));
  }
  Batch a = memory.get_batch({4, 1}), b = lazy.get_batch({4, 1});
  EXPECT_EQ(values<uint8_t>(a.data), values<uint8_t>(b.data));
  EXPECT_EQ(values<int64_t>(a.target), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(values<int64_t>(b.target), (std::vector<int64_t>{1, 0}));

  // The same transform and seed give the same samples in both modes.
  auto flip = std::make_shared<transforms::RandomHorizontalFlip>();
  ImageFolderDataset memory_flip((root_ / "train").string(), flip, 5);
  ImageFolderDataset lazy_flip((root_ / "train").string(), flip, 5, lazy_options);
  memory_flip.set_epoch(2);
  lazy_flip.set_epoch(2);
  for (int64_t i = 0; i < kTrain; ++i)
    EXPECT_EQ(values<uint8_t>(memory_flip.get(i).data), values<uint8_t>(lazy_flip.get(i).data)) << "image " << i;
}

TEST_F(VisionDatasetsTest, IndexOutOfRangeNamesTheDataset) {
  convert();
  Cifar10Dataset test(out_.string(), false);
  expect_error_parts([&] { test.get(kTest); }, {"CIFAR-10 (" + out_.string() + ", test): index 3 is out of range",
                                                 "size 3"});
  expect_error_parts([&] { test.get_batch({0, -1}); }, {"index -1 is out of range"});
}

TEST_F(VisionDatasetsTest, ConverterNamesTheImageOfTheWrongSize) {
  const fs::path bad = root_ / "train" / "dog" / "small.png";
  write_png(bad, 9, 16, 24);
  expect_error_parts([&] { convert(); }, {bad.string(), "16x24 (HxW) but 32x32 is expected"});
  EXPECT_FALSE(fs::exists(out_ / "cifar-10-batches-bin" / "data_batch_1.bin")) << "nothing is written";
}

TEST_F(VisionDatasetsTest, ConverterRejectsAnImageThatIsNotRgb) {
  const fs::path grey = root_ / "test" / "cat" / "grey.png";
  write_png(grey, 9, 32, 32, 1);
  expect_error_parts([&] { convert(); }, {grey.string()});
}

TEST_F(VisionDatasetsTest, ConverterNamesTheMissingSplitFolder) {
  fs::remove_all(root_ / "test");
  expect_error_parts([&] { convert(); },
                     {"convert_image_folder_to_cifar: '" + (root_ / "test").string() + "' is missing or not a folder"});
}

TEST_F(VisionDatasetsTest, ConverterRejectsDifferentClassesInTheSplits) {
  write_png(root_ / "test" / "eel" / "x.png", 50);
  expect_error_parts([&] { convert(); }, {"has classes [cat, dog] but", "has [cat, dog, eel]"});
}

TEST_F(VisionDatasetsTest, ConverterRejectsMoreThanTenClasses) {
  for (int k = 0; k < 9; ++k) {
    const std::string name = "extra" + std::to_string(k);
    write_png(root_ / "train" / name / "x.png", 60 + k);
    write_png(root_ / "test" / name / "x.png", 70 + k);
  }
  expect_error_parts([&] { convert(); }, {"has 11 classes", "holds at most 10"});
}

TEST_F(VisionDatasetsTest, ConverterNeedsFiveTrainingImages) {
  for (const char* file : {"a.png", "b.png", "c.png"}) fs::remove(root_ / "train" / "cat" / file);
  expect_error_parts([&] { convert(); }, {"has 4 images but the 5 training batches need at least one each"});
}

}  // namespace
}  // namespace kiln::data
