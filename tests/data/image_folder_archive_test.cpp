// ImageFolder read straight from a .tar.gz (Note [Archive paths] in
// data/archive_path.h): the same samples as the extracted folder, one
// archive shared by two splits, the Dataset and the CIFAR-10 converter over
// an archive, and every rejection checked by its message. The test on the
// real CIFAR-10 archive runs only with KILN_DATA set.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "data/archive_path.h"
#include "data/cifar10.h"
#include "data/image_folder.h"
#include "data/image_folder_to_cifar.h"
#include "data/tar.h"
#include "data/vision_datasets.h"
#include "tar_gz_writer.h"
#include "tensor/error.h"
#include "data_test_util.h"
#include "stb_image_write.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using namespace test_archives;

std::vector<uint8_t> pixels_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<uint8_t>(c.data<uint8_t>(), c.data<uint8_t>() + c.numel());
}

// (H, W, C) pixels distinct per image `id`, position and channel.
std::vector<uint8_t> pattern_hwc(int id, int h, int w, int c) {
  std::vector<uint8_t> p;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) p.push_back(static_cast<uint8_t>(id * 37 + y * 31 + x * 7 + k * 50));
  return p;
}

// The encoded bytes of an image file written by stb_image_write; `format`
// is the extension, any case.
Bytes encode(const std::string& format, int id, int h = 8, int w = 8, int c = 3) {
  Bytes out;
  auto sink = [](void* context, void* data, int size) {
    auto* bytes = static_cast<Bytes*>(context);
    bytes->insert(bytes->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  std::vector<uint8_t> hwc = pattern_hwc(id, h, w, c);
  std::string f = format;
  for (char& ch : f) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  int ok = 0;
  if (f == "png") ok = stbi_write_png_to_func(sink, &out, w, h, c, hwc.data(), w * c);
  if (f == "bmp") ok = stbi_write_bmp_to_func(sink, &out, w, h, c, hwc.data());
  if (f == "jpg" || f == "jpeg") ok = stbi_write_jpg_to_func(sink, &out, w, h, c, hwc.data(), 95);
  EXPECT_NE(ok, 0) << "cannot encode " << format;
  return out;
}

class ImageFolderArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_image_folder_archive_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the members as dir_/name (a .tar.gz) and returns its path.
  std::string archive(const std::string& name, const std::vector<TarMember>& members) {
    const fs::path path = dir_ / name;
    write_bytes(path, gzip_stored(tar_bytes(members)));
    return path.string();
  }

  // The files of the tree in image_test.cpp's Folder, and then some: bird
  // (a bmp), cat (a jpg, a JPEG, a text file, an image one folder down), dog
  // (a png, a PNG), and a file beside the class folders. Relative to the
  // folder, in an order the scan has to sort.
  std::vector<std::pair<std::string, Bytes>> tree() {
    return {{"dog/b.png", encode("png", 1)},        {"cat/z.jpg", encode("jpg", 2)},  {"cat/README.txt", {'h', 'i'}},
            {"dog/a.PNG", encode("png", 3)},        {"bird/0.bmp", encode("bmp", 4)}, {"cat/y.JPEG", encode("jpeg", 5)},
            {"cat/deeper/q.png", encode("png", 6)}, {"LICENSE.png", encode("png", 7)}};
  }

  fs::path dir_;
};

TEST_F(ImageFolderArchiveTest, SplitsPathsAtTheArchiveFile) {
  const std::string tar = archive("x.tar.gz", {{"a/b/c.png", encode("png", 0)}});
  ArchivePath inside = split_archive_path(tar + "/a/b/");
  EXPECT_EQ(inside.archive, tar);
  EXPECT_EQ(inside.folder, "a/b");
  EXPECT_EQ(split_archive_path(tar).folder, "");
  EXPECT_EQ(split_archive_path(tar).archive, tar);
  EXPECT_EQ(split_archive_path(dir_.string()).archive, "");
  EXPECT_EQ(split_archive_path((dir_ / "nowhere" / "x").string()).folder, (dir_ / "nowhere" / "x").string());
  EXPECT_EQ(normalize_member_path("./a/b//"), "a/b");
  EXPECT_EQ(normalize_member_path("."), "");
}

TEST_F(ImageFolderArchiveTest, SameSamplesAsTheExtractedFolder) {
  std::vector<TarMember> members = {{"pack/", {}, '5'}, {"pack/root/", {}, '5'}};
  for (const auto& [name, bytes] : tree()) {
    write_bytes(dir_ / "disk" / "root" / name, bytes);
    members.push_back({"pack/root/" + name, bytes});
  }
  const std::string tar = archive("x.tar.gz", members);
  ImageFolder disk((dir_ / "disk" / "root").string(), {.height = 8, .width = 8});
  ImageFolder packed(tar + "/pack/root", {.height = 8, .width = 8});
  EXPECT_EQ(packed.root(), tar + "/pack/root");
  ASSERT_NE(packed.archive(), nullptr);
  EXPECT_EQ(packed.archive()->name(), tar);
  EXPECT_EQ(disk.archive(), nullptr);
  EXPECT_EQ(packed.class_names(), (std::vector<std::string>{"bird", "cat", "dog"}));
  EXPECT_EQ(packed.class_names(), disk.class_names());
  const std::vector<std::string> files = {"bird/0.bmp", "cat/y.JPEG", "cat/z.jpg", "dog/a.PNG", "dog/b.png"};
  const std::vector<int64_t> labels = {0, 1, 1, 2, 2};
  ASSERT_EQ(packed.size(), 5);
  ASSERT_EQ(disk.size(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(packed.path(i), tar + "/pack/root/" + files[i]);
    EXPECT_EQ(disk.path(i), (dir_ / "disk" / "root" / files[i]).string());
    EXPECT_EQ(packed.label(i), labels[i]);
    LabeledImage a = packed.get(i), b = disk.get(i);
    EXPECT_EQ(a.image.shape(), (Shape{3, 8, 8}));
    EXPECT_EQ(pixels_of(a.image), pixels_of(b.image)) << files[i];
    EXPECT_EQ(a.label.dtype(), DType::Int64);
    EXPECT_EQ(a.label.item<int64_t>(), labels[i]);
  }
  // PNG and BMP are lossless: the decoded pixels are the written ones.
  std::vector<uint8_t> expected(192);
  const std::vector<uint8_t> hwc = pattern_hwc(1, 8, 8, 3);
  for (int k = 0; k < 3; ++k)
    for (int p = 0; p < 64; ++p) expected[k * 64 + p] = hwc[p * 3 + k];
  EXPECT_EQ(pixels_of(packed.get(4).image), expected);
  for (int threads : {1, 3}) {
    ImageTensors all = packed.load_all(threads), reference = disk.load_all(threads);
    EXPECT_EQ(pixels_of(all.images), pixels_of(reference.images)) << threads << " threads";
    EXPECT_EQ(std::vector<int64_t>(all.labels.data<int64_t>(), all.labels.data<int64_t>() + 5), labels);
  }
}

TEST_F(ImageFolderArchiveTest, OneArchiveServesBothSplits) {
  const std::string tar = archive("splits.tar.gz", {{"./c10/train/b/1.png", encode("png", 1)},
                                                    {"./c10/train/a/2.png", encode("png", 2)},
                                                    {"./c10/test/a/3.png", encode("png", 3)},
                                                    {"./c10/test/b/4.png", encode("png", 4)},
                                                    {"./c10/test/b/5.png", encode("png", 5)}});
  auto shared = std::make_shared<const TarArchive>(TarArchive::open(tar));
  ImageFolder train(shared, "c10/train"), test(shared, "./c10/test/");
  EXPECT_EQ(train.archive().get(), shared.get());
  EXPECT_EQ(test.archive().get(), shared.get());
  EXPECT_EQ(shared.use_count(), 3);
  EXPECT_EQ(train.root(), tar + "/c10/train");
  EXPECT_EQ(test.root(), tar + "/c10/test");
  ASSERT_EQ(train.size(), 2);
  ASSERT_EQ(test.size(), 3);
  EXPECT_EQ(train.path(0), tar + "/c10/train/a/2.png");
  EXPECT_EQ(test.path(2), tar + "/c10/test/b/5.png");
  EXPECT_EQ(pixels_of(train.get(0).image), pixels_of(ImageFolder(tar + "/c10/train").get(0).image));
  EXPECT_EQ(test.get(2).label.item<int64_t>(), 1);

  // The top of an archive is a folder too.
  const std::string flat = archive("flat.tar.gz", {{"b/1.png", encode("png", 1)}, {"a/2.png", encode("png", 2)}});
  ImageFolder top(flat);
  EXPECT_EQ(top.class_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(top.path(0), flat + "/a/2.png");
}

TEST_F(ImageFolderArchiveTest, AMemberStoredTwiceKeepsItsLaterCopy) {
  const std::string tar = archive("twice.tar.gz", {{"r/a/x.png", encode("png", 1)}, {"r/a/x.png", encode("png", 2)}});
  ImageFolder set(tar + "/r");
  ASSERT_EQ(set.size(), 1);
  EXPECT_EQ(pixels_of(set.get(0).image),
            pixels_of(decode_image(encode("png", 2).data(), encode("png", 2).size(), "x")));
}

TEST_F(ImageFolderArchiveTest, DatasetFromAnArchiveMatchesTheFolder) {
  std::vector<TarMember> members;
  for (const auto& [name, bytes] : tree()) {
    write_bytes(dir_ / "disk" / name, bytes);
    members.push_back({"top/" + name, bytes});
  }
  const std::string tar = archive("x.tar.gz", members);
  ImageFolderDataset disk((dir_ / "disk").string());
  ImageFolderDataset memory(tar + "/top");
  ImageFolderDatasetOptions lazy_options;
  lazy_options.lazy = true;
  ImageFolderDataset lazy(std::make_shared<const TarArchive>(TarArchive::open(tar)), "top", nullptr, 0, lazy_options);
  EXPECT_EQ(memory.name(), "ImageFolder (" + tar + "/top)");
  EXPECT_EQ(lazy.name(), "ImageFolder (" + tar + "/top)");
  EXPECT_TRUE(memory.in_memory());
  EXPECT_FALSE(lazy.in_memory());
  ASSERT_EQ(memory.size(), disk.size());
  ASSERT_EQ(lazy.size(), disk.size());
  for (int64_t i = 0; i < disk.size(); ++i) {
    Example d = disk.get(i), m = memory.get(i), l = lazy.get(i);
    EXPECT_EQ(pixels_of(m.data), pixels_of(d.data)) << i;
    EXPECT_EQ(pixels_of(l.data), pixels_of(d.data)) << i;
    EXPECT_EQ(m.target.item<int64_t>(), d.target.item<int64_t>());
    EXPECT_EQ(l.target.item<int64_t>(), d.target.item<int64_t>());
  }
}

TEST_F(ImageFolderArchiveTest, ConverterReadsBothSplitsFromOneArchive) {
  // train: a (ids 0, 1, 2), b (ids 3, 4); test: a (id 10), b (id 11).
  std::vector<TarMember> members;
  for (int id : {0, 1, 2}) members.push_back({"d/train/a/" + std::to_string(id) + ".png", encode("png", id, 32, 32)});
  for (int id : {3, 4}) members.push_back({"d/train/b/" + std::to_string(id) + ".png", encode("png", id, 32, 32)});
  members.push_back({"d/test/a/10.png", encode("png", 10, 32, 32)});
  members.push_back({"d/test/b/11.png", encode("png", 11, 32, 32)});
  const std::string tar = archive("d.tar.gz", members);
  CifarConversion c = convert_image_folder_to_cifar(tar + "/d", (dir_ / "out").string());
  EXPECT_EQ(c.class_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.train_images, 5);
  EXPECT_EQ(c.test_images, 2);
  Cifar10Split train = load_cifar10((dir_ / "out").string(), true);
  Cifar10Split test = load_cifar10((dir_ / "out").string(), false);
  ImageFolder folder(tar + "/d/train");
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(pixels_of(train.images.select(0, i)), pixels_of(folder.get(i).image)) << i;
    EXPECT_EQ(train.labels.data<int64_t>()[i], i < 3 ? 0 : 1);
  }
  EXPECT_EQ(test.labels.data<int64_t>()[1], 1);

  expect_error_parts([&] { convert_image_folder_to_cifar(tar + "/e", (dir_ / "out2").string()); },
                     {"convert_image_folder_to_cifar: '" + tar + "/e/train' is missing or not a folder"});
  const std::string no_test = archive("no_test.tar.gz", {{"d/train/a/0.png", encode("png", 0, 32, 32)}});
  expect_error_parts([&] { convert_image_folder_to_cifar(no_test + "/d", (dir_ / "out3").string()); },
                     {"convert_image_folder_to_cifar: '" + no_test + "/d/test' is missing or not a folder"});
  EXPECT_FALSE(fs::exists(dir_ / "out3"));
}

TEST_F(ImageFolderArchiveTest, MissingFolderAndEmptyClassesNameTheArchive) {
  const std::string tar = archive("x.tar.gz", {{"pack/root/cat/a.png", encode("png", 0)},
                                               {"pack/root/notes.png", encode("png", 1)},
                                               {"pack/other/cat/README.txt", {'x'}},
                                               {"pack/other/dog/a.png", encode("png", 2)}});
  expect_error_parts([&] { ImageFolder(tar + "/pack/rot"); },
                     {"ImageFolder: archive '" + tar + "' has no folder 'pack/rot'",
                      "expected pack/rot/<class>/<image> inside the archive"});
  // "pack/roo" is a prefix of a member name but not a folder.
  expect_error_parts([&] { ImageFolder(tar + "/pack/roo"); }, {"has no folder 'pack/roo'"});
  expect_error_parts([&] { ImageFolder(tar + "/pack/root/cat"); },
                     {"ImageFolder: root '" + tar + "/pack/root/cat' has no class folders"});
  expect_error_parts([&] { ImageFolder(tar + "/pack/other"); },
                     {"ImageFolder: class folder '" + tar + "/pack/other/cat' holds no image file"});
  expect_error_parts([&] { ImageFolder(nullptr, "pack/root"); },
                     {"ImageFolder: the archive holding folder 'pack/root' is null"});
  const std::string empty = archive("empty.tar.gz", {});
  expect_error_parts([&] { ImageFolder{empty}; }, {"ImageFolder: root '" + empty + "' has no class folders"});
  // A path none of whose parts exists is still a missing folder.
  expect_error_parts([&] { ImageFolder((dir_ / "nowhere.tar.gz" / "pack").string()); },
                     {"ImageFolder: root '" + (dir_ / "nowhere.tar.gz" / "pack").string() + "' does not exist"});
}

TEST_F(ImageFolderArchiveTest, BadMembersNameTheArchiveAndTheMember) {
  const std::string tar = archive("x.tar.gz", {{"r/cat/a.png", encode("png", 0)},
                                               {"r/cat/b.png", {'n', 'o', 't', ' ', 'p', 'n', 'g'}},
                                               {"r/dog/c.png", encode("png", 1, 6, 10)},
                                               {"r/dog/empty.jpg", {}}});
  ImageFolder set(tar + "/r", {.height = 8, .width = 8});
  ASSERT_EQ(set.size(), 4);
  expect_error_parts([&] { set.get(1); }, {"decode_image: cannot decode '" + tar +
                                           "/r/cat/b.png' (7 bytes, expected a PNG, JPEG or BMP image)"});
  expect_error_parts([&] { set.get(2); }, {"ImageFolder: '" + tar + "/r/dog/c.png' is 6x10 (HxW) but 8x8 is expected"});
  expect_error_parts([&] { set.get(3); }, {"decode_image: '" + tar + "/r/dog/empty.jpg' is empty (0 bytes)"});
  expect_error_parts([&] { set.load_all(2); }, {"'" + tar + "/r/"});
  const std::string grey = archive("grey.tar.gz", {{"r/cat/g.png", encode("png", 0, 8, 8, 1)}});
  expect_error_parts([&] { ImageFolder(grey + "/r", {.decode = {.channels = 3, .require_channels = true}}).get(0); },
                     {"decode_image: '" + grey + "/r/cat/g.png' has 1 channels but 3 are required"});
}

TEST_F(ImageFolderArchiveTest, CorruptArchivesNameTheArchive) {
  const Bytes tar = tar_bytes({{"r/cat/a.png", encode("png", 0)}, {"r/cat/b.png", encode("png", 1)}});
  const Bytes gz = gzip_stored(tar);

  Bytes flipped = gz;
  flipped[gz.size() / 2] ^= 0x5a;  // a content byte: the CRC no longer matches
  write_bytes(dir_ / "flipped.tar.gz", flipped);
  expect_error_parts([&] { ImageFolder((dir_ / "flipped.tar.gz").string() + "/r"); },
                     {"gunzip: '" + (dir_ / "flipped.tar.gz").string() + "': corrupt gzip data"});

  write_bytes(dir_ / "short.tar.gz", Bytes(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2)));
  expect_error_parts([&] { ImageFolder((dir_ / "short.tar.gz").string() + "/r"); },
                     {"gunzip: '" + (dir_ / "short.tar.gz").string() + "'", "truncated file"});

  Bytes bad_header = tar;
  bad_header[512 + 512 * ((encode("png", 0).size() + 511) / 512) + 3] ^= 1;  // the name of the second member
  write_bytes(dir_ / "bad_header.tar.gz", gzip_stored(bad_header));
  expect_error_parts([&] { ImageFolder((dir_ / "bad_header.tar.gz").string() + "/r"); },
                     {"read_tar: '" + (dir_ / "bad_header.tar.gz").string() + "'", "has a bad checksum"});

  write_bytes(dir_ / "notes.txt", Bytes(2000, 'x'));
  expect_error_parts([&] { ImageFolder((dir_ / "notes.txt").string() + "/r"); },
                     {"read_tar: '" + (dir_ / "notes.txt").string() + "'", "not a tar archive"});
}

// The real data: $KILN_DATA/cifar10-jpeg.tar.gz, as ../shared/data/README.md
// describes it, read once for both splits.
TEST_F(ImageFolderArchiveTest, Cifar10JpegArchive) {
  const char* data = std::getenv("KILN_DATA");
  if (data == nullptr) GTEST_SKIP() << "KILN_DATA is not set (a folder holding cifar10-jpeg.tar.gz)";
  const fs::path path = fs::path(data) / "cifar10-jpeg.tar.gz";
  if (!fs::exists(path)) GTEST_SKIP() << path << " does not exist";
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); };

  const Clock::time_point start = Clock::now();
  auto tar = std::make_shared<const TarArchive>(TarArchive::open(path.string()));
  const double read_s = seconds(start);
  ImageFolder train(tar, "cifar10-jpeg/train", {.height = 32, .width = 32});
  ImageFolder test(tar, "cifar10-jpeg/test", {.height = 32, .width = 32});
  const double scan_s = seconds(start) - read_s;
  const Clock::time_point decode_start = Clock::now();
  ImageTensors train_all = train.load_all(), test_all = test.load_all();
  const double decode_s = seconds(decode_start);
  std::cout << "cifar10-jpeg.tar.gz: read and inflated in " << read_s << " s, both splits scanned in " << scan_s
            << " s, 60000 images decoded in " << decode_s << " s\n";
  RecordProperty("load_seconds", std::to_string(read_s + scan_s + decode_s));

  const std::vector<std::string> classes = {"airplane", "automobile", "bird",  "cat",  "deer",
                                            "dog",      "frog",       "horse", "ship", "truck"};
  EXPECT_EQ(train.class_names(), classes);
  EXPECT_EQ(test.class_names(), classes);
  ASSERT_EQ(train_all.images.shape(), (Shape{50000, 3, 32, 32}));
  ASSERT_EQ(test_all.images.shape(), (Shape{10000, 3, 32, 32}));
  for (const auto& [set, all, per] : {std::tuple{&train, &train_all, 5000}, std::tuple{&test, &test_all, 1000}}) {
    std::vector<int64_t> count(10, 0);
    for (int64_t i = 0; i < set->size(); ++i) {
      const int64_t label = all->labels.data<int64_t>()[i];
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 10);
      ++count[label];
      // The label is the index of the class folder the member lies in.
      if (i % 997 == 0) {
        EXPECT_NE(set->path(i).find("/" + classes[label] + "/"), std::string::npos) << set->path(i);
      }
    }
    EXPECT_EQ(count, std::vector<int64_t>(10, per)) << set->root();
  }
}

}  // namespace
}  // namespace kiln::data
