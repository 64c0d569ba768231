// Image decoding and ImageFolder: PNG and BMP files written here with
// stb_image_write round trip exactly, JPEG approximately; every rejection
// (corrupt, truncated, empty, wrong size, wrong channels, bad folders) is
// checked by its message. The CIFAR-10 test runs only with KILN_DATA set.
#include "data/image.h"
#include "data/image_folder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tensor/error.h"
#include "stb_image_write.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

// Pixels (H, W, C) interleaved, as image files hold them: value
// (y * 31 + x * 7 + k * 50) % 256 at row y, column x, channel k.
std::vector<uint8_t> pattern_hwc(int h, int w, int c) {
  std::vector<uint8_t> p(static_cast<size_t>(h * w * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) p[(y * w + x) * c + k] = static_cast<uint8_t>((y * 31 + x * 7 + k * 50) % 256);
  return p;
}

// A smooth image (JPEG keeps it within a few levels).
std::vector<uint8_t> smooth_hwc(int h, int w, int c) {
  std::vector<uint8_t> p(static_cast<size_t>(h * w * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) p[(y * w + x) * c + k] = static_cast<uint8_t>(40 + 4 * y + 3 * x + 20 * k);
  return p;
}

// Expects `image` (C, H, W) uint8 to equal the interleaved `hwc` within `tol`.
void expect_image(const Tensor& image, const std::vector<uint8_t>& hwc, int h, int w, int c, int tol = 0) {
  ASSERT_EQ(image.dtype(), DType::UInt8);
  ASSERT_EQ(image.shape(), (Shape{c, h, w}));
  int worst = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) {
        int got = image.data<uint8_t>()[(k * h + y) * w + x];
        int want = hwc[(y * w + x) * c + k];
        worst = std::max(worst, std::abs(got - want));
      }
  EXPECT_LE(worst, tol);
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_png(const fs::path& p, int h, int w, int c, const std::vector<uint8_t>& hwc) {
  ASSERT_TRUE(stbi_write_png(p.c_str(), w, h, c, hwc.data(), w * c)) << p;
}
void write_bmp(const fs::path& p, int h, int w, int c, const std::vector<uint8_t>& hwc) {
  ASSERT_TRUE(stbi_write_bmp(p.c_str(), w, h, c, hwc.data())) << p;
}
void write_jpg(const fs::path& p, int h, int w, int c, const std::vector<uint8_t>& hwc) {
  ASSERT_TRUE(stbi_write_jpg(p.c_str(), w, h, c, hwc.data(), 100)) << p;
}

template <class Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& texts) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing '" << texts.front() << "'";
  } catch (const Error& e) {
    for (const auto& text : texts)
      EXPECT_NE(e.message().find(text), std::string::npos) << "'" << text << "' not in: " << e.message();
  }
}

// A fresh folder per test, removed afterwards.
class ImageFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("kiln_image_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ImageFiles, PngRoundTripsExactly) {
  for (int c : {1, 3, 4}) {
    auto hwc = pattern_hwc(5, 7, c);
    fs::path p = dir_ / (std::to_string(c) + "_channels.png");
    write_png(p, 5, 7, c, hwc);
    expect_image(decode_image_file(p.string(), {.channels = c}), hwc, 5, 7, c);
  }
}

TEST_F(ImageFiles, BmpRoundTripsExactly) {
  auto hwc = pattern_hwc(6, 9, 3);
  write_bmp(dir_ / "a.bmp", 6, 9, 3, hwc);
  expect_image(decode_image_file((dir_ / "a.bmp").string()), hwc, 6, 9, 3);
}

TEST_F(ImageFiles, JpegRoundTripsApproximately) {
  auto hwc = smooth_hwc(16, 16, 3);
  write_jpg(dir_ / "a.jpg", 16, 16, 3, hwc);
  expect_image(decode_image_file((dir_ / "a.jpg").string()), hwc, 16, 16, 3, /*tol=*/8);
}

TEST_F(ImageFiles, DecodesFromMemoryAndConvertsChannels) {
  auto grey = pattern_hwc(4, 3, 1);
  write_png(dir_ / "g.png", 4, 3, 1, grey);
  auto bytes = read_bytes(dir_ / "g.png");
  // Grey decoded as RGB repeats the value in all three channels.
  Tensor rgb = decode_image(bytes.data(), bytes.size(), "member/g.png");
  std::vector<uint8_t> repeated;
  for (uint8_t v : grey) repeated.insert(repeated.end(), {v, v, v});
  expect_image(rgb, repeated, 4, 3, 3);
  expect_error([&] { decode_image(bytes.data(), bytes.size(), "member/g.png", {.channels = 3, .require_channels = true}); },
               {"decode_image: 'member/g.png' has 1 channels but 3 are required"});
  expect_error([&] { decode_image(bytes.data(), bytes.size(), "member/g.png", {.channels = 5}); },
               {"decode_image: channels must be 1, 2, 3 or 4, got 5 (for 'member/g.png')"});
}

TEST_F(ImageFiles, CorruptTruncatedAndEmptyFilesNameTheFile) {
  fs::path text = dir_ / "notes.png";
  write_bytes(text, {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  expect_error([&] { decode_image_file(text.string()); },
               {"decode_image: cannot decode '" + text.string() + "' (12 bytes, expected a PNG, JPEG or BMP image): "});

  // Half of each file; a BMP's pixels would otherwise read as zeros.
  for (const char* name : {"t.png", "t.bmp", "t.jpg"}) {
    fs::path p = dir_ / name;
    auto hwc = pattern_hwc(8, 8, 3);
    std::string ext = p.extension().string();
    if (ext == ".png") write_png(p, 8, 8, 3, hwc);
    if (ext == ".bmp") write_bmp(p, 8, 8, 3, hwc);
    if (ext == ".jpg") write_jpg(p, 8, 8, 3, hwc);
    auto bytes = read_bytes(p);
    bytes.resize(bytes.size() / 2);
    write_bytes(p, bytes);
    expect_error([&] { decode_image_file(p.string()); }, {"decode_image: cannot decode '" + p.string() + "'"});
  }
  expect_error([&] { decode_image_file((dir_ / "t.bmp").string()); },
               {"(123 bytes): truncated BMP, its 8x8 pixels at 24 bits need 246 bytes"});

  write_bytes(dir_ / "empty.jpg", {});
  expect_error([&] { decode_image_file((dir_ / "empty.jpg").string()); },
               {"decode_image: '" + (dir_ / "empty.jpg").string() + "' is empty (0 bytes)"});
  expect_error([&] { decode_image_file((dir_ / "missing.png").string()); },
               {"decode_image_file: cannot open '" + (dir_ / "missing.png").string() + "': No such file"});
}

// A DHT segment whose 16 code counts add up to more than the 256 symbols a
// Huffman table holds made stb_image 2.27 write past its tables (an input
// found by tests/fuzz/kiln_image_fuzz); decode_image rejects it first.
TEST_F(ImageFiles, JpegHuffmanTableWithTooManyCodesIsAnError) {
  fs::path p = dir_ / "dht.jpg";
  write_jpg(p, 8, 8, 3, pattern_hwc(8, 8, 3));
  auto bytes = read_bytes(p);
  const uint8_t dht[] = {0xFF, 0xC4};
  auto at = std::search(bytes.begin(), bytes.end(), std::begin(dht), std::end(dht));
  ASSERT_NE(at, bytes.end()) << "stb_image_write wrote no DHT segment";
  const size_t table = static_cast<size_t>(at - bytes.begin()) + 4;  // after the marker and the length
  for (size_t i = 1; i <= 16; ++i) bytes[table + i] = 17;            // 16 * 17 = 272 codes
  expect_error([&] { decode_image(bytes.data(), bytes.size(), "member/dht.jpg"); },
               {"decode_image: cannot decode 'member/dht.jpg' (" + std::to_string(bytes.size()) +
                " bytes): corrupt JPEG, the Huffman table at offset " + std::to_string(table) +
                " has 272 codes but at most 256 fit"});
}

// root/<class>/ with: bird (1 bmp), cat (1 jpg, 1 JPEG, a text file), dog (2 png).
class Folder : public ImageFiles {
 protected:
  void SetUp() override {
    ImageFiles::SetUp();
    root_ = dir_ / "root";
    for (const char* c : {"dog", "cat", "bird"}) fs::create_directories(root_ / c);
    write_png(root_ / "dog" / "b.png", 8, 8, 3, pattern_hwc(8, 8, 3));
    write_png(root_ / "dog" / "a.PNG", 8, 8, 3, smooth_hwc(8, 8, 3));
    write_jpg(root_ / "cat" / "z.jpg", 8, 8, 3, smooth_hwc(8, 8, 3));
    write_jpg(root_ / "cat" / "y.JPEG", 8, 8, 3, smooth_hwc(8, 8, 3));
    write_bytes(root_ / "cat" / "README.txt", {'h', 'i'});
    write_bmp(root_ / "bird" / "0.bmp", 8, 8, 3, pattern_hwc(8, 8, 3));
  }
  fs::path root_;
};

TEST_F(Folder, ClassesAndFilesSortedByName) {
  ImageFolder set(root_.string(), {.height = 8, .width = 8});
  EXPECT_EQ(set.class_names(), (std::vector<std::string>{"bird", "cat", "dog"}));
  ASSERT_EQ(set.size(), 5);
  const std::vector<std::string> files = {"bird/0.bmp", "cat/y.JPEG", "cat/z.jpg", "dog/a.PNG", "dog/b.png"};
  const std::vector<int64_t> labels = {0, 1, 1, 2, 2};
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(set.path(i), (root_ / files[i]).string());
    EXPECT_EQ(set.label(i), labels[i]);
    LabeledImage item = set.get(i);
    EXPECT_EQ(item.image.shape(), (Shape{3, 8, 8}));
    EXPECT_EQ(item.label.dim(), 0);
    EXPECT_EQ(item.label.dtype(), DType::Int64);
    EXPECT_EQ(item.label.item<int64_t>(), labels[i]);
  }
  expect_image(set.get(4).image, pattern_hwc(8, 8, 3), 8, 8, 3);
  expect_error([&] { set.get(5); }, {"ImageFolder: index 5 out of range for 5 samples in '" + root_.string() + "'"});
}

TEST_F(Folder, LoadAllMatchesGet) {
  ImageFolder set(root_.string());
  for (int threads : {1, 3}) {
    ImageTensors all = set.load_all(threads);
    ASSERT_EQ(all.images.shape(), (Shape{5, 3, 8, 8}));
    ASSERT_EQ(all.labels.shape(), (Shape{5}));
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(all.labels.data<int64_t>()[i], set.label(i));
      Tensor one = set.get(i).image;
      EXPECT_EQ(std::memcmp(all.images.data<uint8_t>() + i * 192, one.data<uint8_t>(), 192), 0) << i;
    }
  }
}

TEST_F(Folder, WrongSizeNamesTheFileAndBothSizes) {
  write_png(root_ / "dog" / "c.png", 6, 10, 3, pattern_hwc(6, 10, 3));
  const std::string bad = (root_ / "dog" / "c.png").string();
  ImageFolder sized(root_.string(), {.height = 8, .width = 8});
  expect_error([&] { sized.get(5); }, {"ImageFolder: '" + bad + "' is 6x10 (HxW) but 8x8 is expected"});
  expect_error([&] { sized.load_all(2); }, {"ImageFolder: '" + bad + "' is 6x10 (HxW) but 8x8 is expected"});
  // Without an expected size, get() accepts it but load_all() needs one size.
  ImageFolder any(root_.string());
  EXPECT_EQ(any.get(5).image.shape(), (Shape{3, 6, 10}));
  expect_error([&] { any.load_all(2); }, {"ImageFolder: '" + bad + "' is 6x10 (HxW) but 8x8 is expected"});
}

TEST_F(Folder, WrongChannelCountIsAnErrorWhenRequired) {
  write_png(root_ / "dog" / "grey.png", 8, 8, 1, pattern_hwc(8, 8, 1));
  const std::string grey = (root_ / "dog" / "grey.png").string();
  ImageFolder strict(root_.string(), {.height = 8, .width = 8, .decode = {.channels = 3, .require_channels = true}});
  expect_error([&] { strict.load_all(1); }, {"decode_image: '" + grey + "' has 1 channels but 3 are required"});
  // By default it is converted to RGB.
  ImageFolder lenient(root_.string(), {.height = 8, .width = 8});
  EXPECT_EQ(lenient.load_all(1).images.shape(), (Shape{6, 3, 8, 8}));
}

TEST_F(ImageFiles, BadFoldersNameTheFolder) {
  expect_error([&] { ImageFolder((dir_ / "nowhere").string()); },
               {"ImageFolder: root '" + (dir_ / "nowhere").string() + "' does not exist or is not a directory"});
  expect_error([&] { ImageFolder(dir_.string()); },
               {"ImageFolder: root '" + dir_.string() + "' has no class folders"});
  fs::create_directories(dir_ / "cat");
  write_bytes(dir_ / "cat" / "notes.txt", {'x'});
  expect_error([&] { ImageFolder(dir_.string()); },
               {"ImageFolder: class folder '" + (dir_ / "cat").string() + "' holds no image file"});
  expect_error([&] { ImageFolder(dir_.string(), {.height = 8}); },
               {"ImageFolder: expected size (8, 0) must be both positive or both 0 (any size)"});
}

// The real CIFAR-10 tree (/work/shared/data or $KILN_DATA/cifar10-jpeg.tar.gz).
TEST_F(ImageFiles, Cifar10JpegCounts) {
  const char* data = std::getenv("KILN_DATA");
  if (data == nullptr) GTEST_SKIP() << "KILN_DATA is not set (a folder holding cifar10-jpeg.tar.gz)";
  fs::path archive = fs::path(data) / "cifar10-jpeg.tar.gz";
  if (!fs::exists(archive)) GTEST_SKIP() << archive << " does not exist";
  std::string command = "tar xzf '" + archive.string() + "' -C '" + dir_.string() + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const std::vector<std::string> classes = {"airplane", "automobile", "bird",  "cat",  "deer",
                                            "dog",      "frog",       "horse", "ship", "truck"};
  ImageFolder train((dir_ / "cifar10-jpeg" / "train").string(), {.height = 32, .width = 32});
  ImageFolder test((dir_ / "cifar10-jpeg" / "test").string(), {.height = 32, .width = 32});
  EXPECT_EQ(train.class_names(), classes);
  EXPECT_EQ(test.class_names(), classes);
  EXPECT_EQ(train.size(), 50000);
  ImageTensors all = test.load_all();
  ASSERT_EQ(all.images.shape(), (Shape{10000, 3, 32, 32}));
  std::vector<int64_t> per_class(10, 0);
  for (int64_t i = 0; i < 10000; ++i) per_class[all.labels.data<int64_t>()[i]]++;
  EXPECT_EQ(per_class, std::vector<int64_t>(10, 1000));
  EXPECT_EQ(train.get(49999).label.item<int64_t>(), 9);
}

}  // namespace
}  // namespace kiln::data
