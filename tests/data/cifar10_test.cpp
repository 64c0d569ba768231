// CIFAR-10 batches written by write_cifar10_bin and read back from a folder
// and from a .tar.gz, plus every bad-data error a user can meet.
#include "data/cifar10.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "tensor/error.h"
#include "data_test_util.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// The pixel that image `id` holds at (c, y, x): distinct across images,
// channels and positions, so a swapped plane or record shows.
uint8_t pixel(int64_t id, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>(id * 37 + c * 101 + y * 7 + x * 3);
}
int64_t label_of(int64_t id) { return (id * 3 + 1) % 10; }

// Images first_id .. first_id+count-1: (count, 3, 32, 32) uint8 and (count) int64.
Cifar10Split make_images(int64_t first_id, int64_t count) {
  Cifar10Split split{Tensor::empty({count, 3, 32, 32}, DType::UInt8), Tensor::empty({count}, DType::Int64)};
  uint8_t* p = split.images.data<uint8_t>();
  for (int64_t n = 0; n < count; ++n) {
    split.labels.data<int64_t>()[n] = label_of(first_id + n);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) *p++ = pixel(first_id + n, c, y, x);
  }
  return split;
}

// Checks that `split` holds images first_id .. first_id+count-1.
void expect_images(const Cifar10Split& split, int64_t first_id, int64_t count) {
  ASSERT_EQ(split.images.dtype(), DType::UInt8);
  ASSERT_EQ(split.labels.dtype(), DType::Int64);
  ASSERT_EQ(split.images.shape(), (Shape{count, 3, 32, 32}));
  ASSERT_EQ(split.labels.shape(), (Shape{count}));
  const uint8_t* p = split.images.data<uint8_t>();
  int64_t wrong = 0;
  for (int64_t n = 0; n < count; ++n) {
    EXPECT_EQ(split.labels.data<int64_t>()[n], label_of(first_id + n)) << "image " << n;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) wrong += *p++ != pixel(first_id + n, c, y, x);
  }
  EXPECT_EQ(wrong, 0);
}

class Cifar10Test : public ::testing::Test {
 protected:
  // Batch sizes of the small stand-in dataset: train batches 1..5, then test.
  static constexpr int64_t kTrainCounts[5] = {2, 3, 1, 2, 1};
  static constexpr int64_t kTrainTotal = 9;
  static constexpr int64_t kTestCount = 4;
  static constexpr int64_t kTestFirstId = 100;

  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_cifar10_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes root/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin.
  fs::path write_dataset(const fs::path& root) {
    fs::path folder = root / "cifar-10-batches-bin";
    fs::create_directories(folder);
    int64_t id = 0;
    for (int b = 0; b < 5; ++b) {
      Cifar10Split batch = make_images(id, kTrainCounts[b]);
      write_cifar10_bin((folder / ("data_batch_" + std::to_string(b + 1) + ".bin")).string(), batch.images,
                        batch.labels);
      id += kTrainCounts[b];
    }
    Cifar10Split test = make_images(kTestFirstId, kTestCount);
    write_cifar10_bin((folder / "test_batch.bin").string(), test.images, test.labels);
    return folder;
  }

  std::string write_bytes(const std::string& name, const Bytes& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return path;
  }
  Bytes read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

TEST_F(Cifar10Test, WritesTheOfficialRecordLayout) {
  Cifar10Split two = make_images(5, 2);
  std::string path = (dir_ / "b.bin").string();
  write_cifar10_bin(path, two.images, two.labels);
  Bytes bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 2u * 3073u);
  // Record 1: label, then R (0, 0), R (0, 1), ..., G (0, 0) at 1 + 1024.
  EXPECT_EQ(bytes[3073], label_of(6));
  EXPECT_EQ(bytes[3073 + 1], pixel(6, 0, 0, 0));
  EXPECT_EQ(bytes[3073 + 1 + 1], pixel(6, 0, 0, 1));
  EXPECT_EQ(bytes[3073 + 1 + 32], pixel(6, 0, 1, 0));
  EXPECT_EQ(bytes[3073 + 1 + 1024], pixel(6, 1, 0, 0));
  EXPECT_EQ(bytes[3073 + 1 + 2048 + 1023], pixel(6, 2, 31, 31));
  // Atomic: the temporary file is gone.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(Cifar10Test, ParsesRecordsFromMemory) {
  Cifar10Split three = make_images(20, 3);
  std::string path = (dir_ / "m.bin").string();
  write_cifar10_bin(path, three.images, three.labels);
  Bytes bytes = read_bytes(path);
  expect_images(parse_cifar10_records(bytes.data(), bytes.size(), "m.bin"), 20, 3);
}

TEST_F(Cifar10Test, LoadsBothSplitsFromARootOrTheBatchFolder) {
  fs::path folder = write_dataset(dir_);
  for (const std::string& root : {dir_.string(), folder.string()}) {
    SCOPED_TRACE(root);
    expect_images(load_cifar10(root, true), 0, kTrainTotal);
    expect_images(load_cifar10(root, false), kTestFirstId, kTestCount);
  }
}

TEST_F(Cifar10Test, LoadsBothSplitsFromATarGz) {
  write_dataset(dir_);
  std::string archive = (dir_ / "cifar-10-binary.tar.gz").string();
  std::string command = "tar -C '" + dir_.string() + "' -czf '" + archive + "' cifar-10-batches-bin 2>/dev/null";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "tar with gzip is not available";
  fs::remove_all(dir_ / "cifar-10-batches-bin");  // only the archive is left to read
  expect_images(load_cifar10(archive, true), 0, kTrainTotal);
  expect_images(load_cifar10(archive, false), kTestFirstId, kTestCount);
}

TEST_F(Cifar10Test, NamesAMissingPathOrBatch) {
  std::string absent = (dir_ / "nowhere").string();
  expect_error_parts([&] { load_cifar10(absent, true); }, {"load_cifar10: '" + absent + "' does not exist"});

  fs::path folder = write_dataset(dir_);
  fs::remove(folder / "data_batch_4.bin");
  expect_error_parts([&] { load_cifar10(dir_.string(), true); },
                     {"load_cifar10: '" + (folder / "data_batch_4.bin").string() + "' is missing",
                      "the train split needs data_batch_1.bin .. data_batch_5.bin"});
  // The test split does not need the training batches.
  expect_images(load_cifar10(dir_.string(), false), kTestFirstId, kTestCount);
  fs::remove(folder / "test_batch.bin");
  expect_error_parts([&] { load_cifar10(folder.string(), false); },
                     {std::string("'") + (folder / "test_batch.bin").string() + "' is missing",
                      "the test split needs test_batch.bin"});
}

TEST_F(Cifar10Test, NamesATruncatedFileAndTheRecordWhereItBreaks) {
  fs::path folder = write_dataset(dir_);
  fs::path batch = folder / "data_batch_2.bin";  // 3 records
  fs::resize_file(batch, 2 * 3073 + 100);
  expect_error_parts([&] { load_cifar10(dir_.string(), true); },
                     {"load_cifar10: '" + batch.string() + "' has 6246 bytes, not a whole number of 3073-byte records",
                      "record 2 starts at byte 6146 but has only 100 of its 3073 bytes (truncated file)"});

  fs::resize_file(batch, 0);
  expect_error_parts([&] { load_cifar10(dir_.string(), true); }, {std::string("'") + batch.string() + "' is empty"});

  Bytes bytes(3073 + 5, 0);
  expect_error_parts([&] { parse_cifar10_records(bytes.data(), bytes.size(), "mem.bin"); },
                     {"parse_cifar10_records: 'mem.bin' has 3078 bytes", "record 1 starts at byte 3073"});
}

TEST_F(Cifar10Test, NamesARecordWithAnOutOfRangeLabel) {
  Bytes bytes(3 * 3073, 0);
  bytes[2 * 3073] = 10;
  expect_error_parts(
      [&] { parse_cifar10_records(bytes.data(), bytes.size(), "bad.bin"); },
      {"parse_cifar10_records: 'bad.bin' record 2 (byte 6146): label 10 is not a CIFAR-10 class (0..9)"});

  fs::path folder = write_dataset(dir_);
  Bytes test = read_bytes(folder / "test_batch.bin");
  test[3073] = 255;
  std::string path = write_bytes("cifar-10-batches-bin/test_batch.bin", test);
  expect_error_parts([&] { load_cifar10(dir_.string(), false); },
                     {"load_cifar10: '" + path + "' record 1 (byte 3073): label 255"});
}

TEST_F(Cifar10Test, NamesABadArchive) {
  fs::path folder = write_dataset(dir_);
  std::string archive = (dir_ / "partial.tar.gz").string();
  std::string command =
      "tar -C '" + dir_.string() + "' -czf '" + archive + "' cifar-10-batches-bin/test_batch.bin 2>/dev/null";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "tar with gzip is not available";
  expect_images(load_cifar10(archive, false), kTestFirstId, kTestCount);
  expect_error_parts([&] { load_cifar10(archive, true); },
                     {"load_cifar10: the archive '" + archive +
                      "' has no member cifar-10-batches-bin/data_batch_1.bin (the train split needs it)"});

  Bytes gz = read_bytes(archive);
  std::string cut =
      write_bytes("cut.tar.gz", Bytes(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2)));
  expect_error_parts([&] { load_cifar10(cut, false); }, {"gunzip: '" + cut + "'", "truncated file"});

  // A member whose own size is not a whole number of records names the member.
  Bytes test = read_bytes(folder / "test_batch.bin");
  test.resize(test.size() - 1);
  write_bytes("cifar-10-batches-bin/test_batch.bin", test);
  std::string short_archive = (dir_ / "short.tar.gz").string();
  command = "tar -C '" + dir_.string() + "' -czf '" + short_archive + "' cifar-10-batches-bin 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0);
  expect_error_parts([&] { load_cifar10(short_archive, false); },
                     {"load_cifar10: '" + short_archive + ":cifar-10-batches-bin/test_batch.bin' has 12291 bytes",
                      "record 3 starts at byte 9219 but has only 3072"});
}

TEST_F(Cifar10Test, WriterRejectsBadTensors) {
  std::string path = (dir_ / "w.bin").string();
  Cifar10Split two = make_images(0, 2);
  expect_error_parts([&] { write_cifar10_bin(path, two.images.to(DType::Float32), two.labels); },
                     {"write_cifar10_bin: '" + path + "': images must be uint8, got float32"});
  expect_error_parts(
      [&] {
        write_cifar10_bin(path, two.images.reshape({2, 3, 16, 64}), two.labels);
      },
      {"images must have shape (N, 3, 32, 32), got [2, 3, 16, 64]"});
  expect_error_parts([&] { write_cifar10_bin(path, two.images, two.labels.narrow(0, 0, 1)); },
                     {"labels must have shape (2) to match 2 images, got [1]"});
  expect_error_parts([&] { write_cifar10_bin(path, two.images, two.labels.to(DType::Float32)); },
                     {"labels must have an integer dtype, got float32"});
  two.labels.data<int64_t>()[1] = 10;
  expect_error_parts([&] { write_cifar10_bin(path, two.images, two.labels); },
                     {"write_cifar10_bin: '" + path + "': label 1 is 10, not a CIFAR-10 class (0..9)"});
  expect_error_parts([&] { write_cifar10_bin(path, two.images.narrow(0, 0, 0), two.labels.narrow(0, 0, 0)); },
                     {"no images to write (N = 0)"});
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir_));

  std::string in_missing_folder = (dir_ / "no" / "such" / "w.bin").string();
  two.labels.data<int64_t>()[1] = 3;
  expect_error_parts([&] { write_cifar10_bin(in_missing_folder, two.images, two.labels); },
                     {"write_cifar10_bin: cannot create the temporary file", "for '" + in_missing_folder + "'"});
}

}  // namespace
}  // namespace kiln::data
