// kiln-lenet's --data for image folders: on disk and inside a .tar.gz, at
// the archive's top or one folder down (as the project's cifar10-jpeg.tar.gz).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "apps/lenet/data_source.h"
#include "data/tar_gz_writer.h"
#include "lenet_test_data.h"
#include "tensor/ops.h"
#include "data/stb_image_write.h"

namespace kiln::apps::lenet {
namespace {

namespace fs = std::filesystem;
using data::test_archives::Bytes;
using data::test_archives::TarMember;

// A 32x32 RGB BMP (lossless) whose pixels depend on `id`.
Bytes bmp(int id) {
  std::vector<uint8_t> hwc(32 * 32 * 3);
  for (size_t i = 0; i < hwc.size(); ++i) hwc[i] = static_cast<uint8_t>(id * 41 + i * 7);
  Bytes out;
  auto sink = [](void* context, void* bytes, int size) {
    auto* o = static_cast<Bytes*>(context);
    o->insert(o->end(), static_cast<uint8_t*>(bytes), static_cast<uint8_t*>(bytes) + size);
  };
  EXPECT_NE(stbi_write_bmp_to_func(sink, &out, 32, 32, 3, hwc.data()), 0);
  return out;
}

// train/ with 3 images of "cat" and 2 of "ant", test/ with 1 of each, under `prefix`.
std::vector<TarMember> tree(const std::string& prefix) {
  return {{prefix + "train/cat/0.bmp", bmp(1)}, {prefix + "train/cat/1.bmp", bmp(2)},
          {prefix + "train/ant/0.bmp", bmp(3)}, {prefix + "train/cat/2.bmp", bmp(4)},
          {prefix + "train/ant/1.bmp", bmp(5)}, {prefix + "test/ant/0.bmp", bmp(6)},
          {prefix + "test/cat/0.bmp", bmp(7)}};
}

// With `augmented`, training images are random crops: their pixels are not checked.
void expect_tree(const Datasets& d, bool augmented = false) {
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"ant", "cat"}));
  ASSERT_EQ(d.train->size(), 5);
  ASSERT_EQ(d.test->size(), 2);
  // Sorted by class, then by file name: ant/0 ant/1 cat/0 cat/1 cat/2.
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 5; ++i) labels.push_back(d.train->get(i).target.item<int64_t>());
  EXPECT_EQ(labels, (std::vector<int64_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(d.train->get(0).data.shape(), (Shape{3, 32, 32}));
  // The first pixel of train/ant/0.bmp (id 3): R = 3 * 41.
  if (!augmented) {
    EXPECT_EQ(d.train->get(0).data.contiguous().data<uint8_t>()[0], static_cast<uint8_t>(3 * 41));
  }
  EXPECT_EQ(d.test->get(0).data.contiguous().data<uint8_t>()[0], static_cast<uint8_t>(6 * 41));
  EXPECT_EQ(d.test->get(1).target.item<int64_t>(), 1);
}

TEST(LenetDataSource, ImageFolderOnDisk) {
  testing::TempDir dir("kiln-lenet-folder");
  for (const TarMember& m : tree("")) {
    fs::create_directories((dir.path() / m.name).parent_path());
    data::test_archives::write_bytes(dir.path() / m.name, m.contents);
  }
  expect_tree(open_datasets(dir.path().string(), false, 0));
}

TEST(LenetDataSource, ImageFolderInsideArchiveOneFolderDown) {
  testing::TempDir dir("kiln-lenet-archive");
  const fs::path archive = dir.path() / "images.tar.gz";
  data::test_archives::write_bytes(archive, data::test_archives::gzip_stored(data::test_archives::tar_bytes(tree("images/"))));
  Datasets d = open_datasets(archive.string(), /*augment=*/true, 3);
  expect_tree(d, /*augmented=*/true);
  EXPECT_NE(d.description.find("images.tar.gz/images"), std::string::npos) << d.description;
}

TEST(LenetDataSource, ImageFolderAtTheArchiveTop) {
  testing::TempDir dir("kiln-lenet-archive-top");
  const fs::path archive = dir.path() / "top.tar.gz";
  data::test_archives::write_bytes(archive, data::test_archives::gzip_stored(data::test_archives::tar_bytes(tree(""))));
  expect_tree(open_datasets(archive.string(), false, 0));
}

TEST(LenetDataSource, ArchiveWithoutATreeNamesTheArchive) {
  testing::TempDir dir("kiln-lenet-archive-empty");
  const fs::path archive = dir.path() / "other.tar.gz";
  data::test_archives::write_bytes(
      archive, data::test_archives::gzip_stored(data::test_archives::tar_bytes({{"x/train/a/0.bmp", bmp(1)}})));
  try {
    open_datasets(archive.string(), false, 0);
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("other.tar.gz': the archive holds neither cifar-10-batches-bin/ nor an image folder"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace kiln::apps::lenet
