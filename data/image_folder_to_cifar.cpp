// Image folder -> CIFAR-10 binary batches (image_folder_to_cifar.h).
#include "data/image_folder_to_cifar.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#include "data/archive_path.h"
#include "data/cifar10.h"
#include "data/image_folder.h"
#include "data/tar.h"
#include "tensor/error.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

constexpr char kOp[] = "convert_image_folder_to_cifar";
constexpr int64_t kTrainBatches = 5;

// require_channels: a greyscale or RGBA file is an error rather than being
// converted, so the data set the user gets is the one they have.
constexpr ImageFolderOptions kImages = {.height = 32, .width = 32, .decode = {.channels = 3, .require_channels = true}};

void check_split(bool exists, const std::string& root, const char* split) {
  KILN_CHECK(exists, kOp, ": '", root, "/", split, "' is missing or not a folder (expected ", root,
             "/train/<class>/<image> and ", root, "/test/<class>/<image>)");
}

// The train and test splits of root, a folder or "<archive>/<folder inside>"
// (Note [Archive paths]); an archive is read once for both.
std::pair<ImageFolder, ImageFolder> open_splits(const std::string& root) {
  const ArchivePath where = split_archive_path(root);
  if (where.archive.empty()) {
    std::error_code error;
    const std::string train = (fs::path(root) / "train").string(), test = (fs::path(root) / "test").string();
    check_split(fs::is_directory(train, error), root, "train");
    check_split(fs::is_directory(test, error), root, "test");
    return {ImageFolder(train, kImages), ImageFolder(test, kImages)};
  }
  auto tar = std::make_shared<const TarArchive>(TarArchive::open(where.archive));
  const std::string lead = where.folder.empty() ? "" : where.folder + "/";
  check_split(archive_has_folder(*tar, lead + "train"), root, "train");
  check_split(archive_has_folder(*tar, lead + "test"), root, "test");
  return {ImageFolder(tar, lead + "train", kImages), ImageFolder(tar, lead + "test", kImages)};
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return "[" + out + "]";
}

void write_meta(const std::string& path, const std::vector<std::string>& class_names) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "w"), std::fclose);
  KILN_CHECK(file, kOp, ": cannot create '", path, "': ", std::generic_category().message(errno));
  for (const std::string& name : class_names)
    KILN_CHECK(std::fprintf(file.get(), "%s\n", name.c_str()) >= 0, kOp, ": cannot write '", path,
               "': ", std::generic_category().message(errno));
  KILN_CHECK(std::fclose(file.release()) == 0, kOp, ": cannot close '", path,
             "': ", std::generic_category().message(errno));
}

}  // namespace

CifarConversion convert_image_folder_to_cifar(const std::string& root, const std::string& outdir) {
  auto [train, test] = open_splits(root);
  KILN_CHECK(train.class_names() == test.class_names(), kOp, ": '", train.root(), "' has classes ",
             joined(train.class_names()), " but '", test.root(), "' has ", joined(test.class_names()),
             "; both splits need the same class folders");
  const int64_t classes = static_cast<int64_t>(train.class_names().size());
  KILN_CHECK(classes <= kCifar10Classes, kOp, ": '", train.root(), "' has ", classes, " classes ",
             joined(train.class_names()), " but the CIFAR-10 format holds at most ", kCifar10Classes);
  KILN_CHECK(train.size() >= kTrainBatches, kOp, ": '", train.root(), "' has ", train.size(),
             " images but the 5 training batches need at least one each");

  // train_all.images: (N, 3, 32, 32) uint8; labels: (N) int64
  ImageTensors train_all = train.load_all();
  ImageTensors test_all = test.load_all();

  const fs::path folder = fs::path(outdir) / "cifar-10-batches-bin";
  std::error_code error;
  fs::create_directories(folder, error);
  KILN_CHECK(!error, kOp, ": cannot create the folder '", folder.string(), "': ", error.message());

  // Batch b holds n/5 images, plus one for the first n%5 batches.
  const int64_t n = train.size();
  int64_t start = 0;
  for (int64_t b = 0; b < kTrainBatches; ++b) {
    const int64_t count = n / kTrainBatches + (b < n % kTrainBatches ? 1 : 0);
    const std::string path = (folder / ("data_batch_" + std::to_string(b + 1) + ".bin")).string();
    write_cifar10_bin(path, train_all.images.narrow(0, start, count), train_all.labels.narrow(0, start, count));
    start += count;
  }
  write_cifar10_bin((folder / "test_batch.bin").string(), test_all.images, test_all.labels);
  write_meta((folder / "batches.meta.txt").string(), train.class_names());
  return {train.class_names(), n, test.size(), folder.string()};
}

}  // namespace kiln::data
