// open_datasets: from the --data path to the training and test Datasets.
#include "apps/lenet/data_source.h"

#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include "data/archive_path.h"
#include "data/cifar10.h"
#include "data/tar.h"
#include "data/transforms.h"
#include "kiln.h"

namespace kiln::apps::lenet {

namespace fs = std::filesystem;

namespace {

constexpr const char* kCifarFolder = "cifar-10-batches-bin";
constexpr const char* kCifarArchive = "cifar-10-binary.tar.gz";
constexpr int64_t kLeNetClasses = 10;

const char* kWhatWasLookedFor =
    "expected a folder holding cifar-10-batches-bin/ or cifar-10-binary.tar.gz, the cifar-10-batches-bin folder "
    "itself, a .tar.gz holding cifar-10-batches-bin/, or an image folder with train/<class>/ and test/<class>/";

// The per-sample part of the training augmentation; ToTensor and Normalize
// follow per batch (Note [Normalizing whole batches]).
std::shared_ptr<data::transforms::Transform> train_transform(bool augment) {
  if (!augment) return nullptr;
  using namespace data::transforms;
  return std::make_shared<Compose>(std::vector<std::shared_ptr<Transform>>{
      std::make_shared<RandomCrop>(32, 4), std::make_shared<RandomHorizontalFlip>()});
}

bool is_archive(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.ends_with(".tar.gz") || name.ends_with(".tgz") || name.ends_with(".tar");
}

// Whether a folder holds the CIFAR-10 batch files, directly or in cifar-10-batches-bin/.
bool holds_cifar_batches(const fs::path& folder) {
  std::error_code error;
  return fs::is_directory(folder / kCifarFolder, error) || fs::is_regular_file(folder / "test_batch.bin", error) ||
         fs::is_regular_file(folder / "data_batch_1.bin", error);
}

Datasets open_cifar10(const std::string& path, bool augment, uint64_t seed) {
  Datasets d;
  d.train = std::make_shared<data::Cifar10Dataset>(path, true, train_transform(augment), seed);
  d.test = std::make_shared<data::Cifar10Dataset>(path, false);
  d.class_names = cifar10_class_names();
  d.description = "CIFAR-10 binary (" + path + ")";
  return d;
}

// Checks that the splits agree and fit LeNet; `where` names them in errors.
Datasets image_folder_datasets(std::shared_ptr<data::ImageFolderDataset> train,
                               std::shared_ptr<data::ImageFolderDataset> test, const std::string& where) {
  KILN_CHECK(train->class_names() == test->class_names(), "--data '", where,
             "': train/ and test/ must hold the same class folders, got ", train->class_names().size(), " and ",
             test->class_names().size(), " (first train class '", train->class_names().front(),
             "', first test class '", test->class_names().front(), "')");
  KILN_CHECK(static_cast<int64_t>(train->class_names().size()) <= kLeNetClasses, "--data '", where, "': LeNet has ",
             kLeNetClasses, " outputs but train/ holds ", train->class_names().size(), " class folders");
  Datasets d;
  d.class_names = train->class_names();
  d.train = std::move(train);
  d.test = std::move(test);
  d.description = "image folder (" + where + ")";
  return d;
}

Datasets open_image_folder(const fs::path& root, bool augment, uint64_t seed) {
  data::ImageFolderDatasetOptions options;
  options.folder.height = 32;
  options.folder.width = 32;
  auto train = std::make_shared<data::ImageFolderDataset>((root / "train").string(), train_transform(augment), seed,
                                                          options);
  auto test = std::make_shared<data::ImageFolderDataset>((root / "test").string(), nullptr, 0, options);
  return image_folder_datasets(std::move(train), std::move(test), root.string());
}

}  // namespace

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                 "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

Datasets open_datasets(const std::string& path, bool augment, uint64_t seed) {
  std::error_code error;
  const fs::path p(path);
  fs::file_status status = fs::status(p, error);
  KILN_CHECK(fs::exists(status), "--data '", path, "' does not exist (", kWhatWasLookedFor, ")");

  if (fs::is_directory(status)) {
    if (holds_cifar_batches(p)) return open_cifar10(path, augment, seed);
    if (fs::is_regular_file(p / kCifarArchive, error)) return open_cifar10((p / kCifarArchive).string(), augment, seed);
    if (fs::is_directory(p / "train", error) && fs::is_directory(p / "test", error)) {
      return open_image_folder(p, augment, seed);
    }
    KILN_CHECK(false, "--data '", path, "' holds neither cifar-10-batches-bin/, ", kCifarArchive,
               ", CIFAR-10 batch files nor train/ and test/ folders (", kWhatWasLookedFor, ")");
  }

  KILN_CHECK(is_archive(p), "--data '", path, "' is a file but not a .tar.gz, .tgz or .tar archive (",
             kWhatWasLookedFor, ")");
  // The official archive by its name; any other archive is opened once to
  // see which of the two layouts it holds.
  if (p.filename() == kCifarArchive) return open_cifar10(path, augment, seed);
  auto archive = std::make_shared<const data::TarArchive>(data::TarArchive::open(path));
  for (const data::TarEntry& entry : archive->entries()) {
    if (entry.name.starts_with(std::string(kCifarFolder) + "/") ||
        entry.name.find(std::string("/") + kCifarFolder + "/") != std::string::npos) {
      return open_cifar10(path, augment, seed);
    }
  }
  return open_image_folder_archive(archive, augment, seed);
}

Datasets open_image_folder_archive(const std::shared_ptr<const data::TarArchive>& archive, bool augment,
                                   uint64_t seed) {
  // The tree's root: the archive's top, or one folder below it
  // (cifar10-jpeg.tar.gz holds cifar10-jpeg/train/...).
  std::string root;
  bool found = data::archive_has_folder(*archive, "train") && data::archive_has_folder(*archive, "test");
  for (const data::TarEntry& entry : archive->entries()) {
    if (found) break;
    const std::string name = data::normalize_member_path(entry.name);
    const size_t slash = name.find('/');
    if (slash == std::string::npos) continue;
    const std::string top = name.substr(0, slash);
    if (data::archive_has_folder(*archive, top + "/train") && data::archive_has_folder(*archive, top + "/test")) {
      root = top;
      found = true;
    }
  }
  KILN_CHECK(found, "--data '", archive->name(), "': the archive holds neither cifar-10-batches-bin/ nor an image ",
             "folder with train/<class>/ and test/<class>/ (at its top or one folder down)");
  const std::string prefix = root.empty() ? "" : root + "/";
  data::ImageFolderDatasetOptions options;
  options.folder.height = 32;
  options.folder.width = 32;
  auto train = std::make_shared<data::ImageFolderDataset>(archive, prefix + "train", train_transform(augment), seed,
                                                          options);
  auto test = std::make_shared<data::ImageFolderDataset>(archive, prefix + "test", nullptr, 0, options);
  return image_folder_datasets(std::move(train), std::move(test), archive->name() + "/" + root);
}

namespace {

// CIFAR-10's mean and std as (1, 3, 1, 1) float32 tensors on `device`, made
// once per device: uploading them with every batch would make the host wait
// for the GPU each time (a copy from pageable memory waits for its stream).
struct ChannelStatistics {
  Tensor mean, std;
};

const ChannelStatistics& channel_statistics(Device device) {
  static std::mutex mutex;
  // Never destroyed: GPU tensors must not outlive the CUDA runtime at exit.
  static auto* made = new std::map<std::pair<DeviceType, int>, ChannelStatistics>();
  std::lock_guard<std::mutex> lock(mutex);
  auto [at, inserted] = made->try_emplace({device.type, device.index});
  if (inserted) {
    at->second.mean = from_vector<double>(kCifar10Mean, {1, 3, 1, 1}).to(DType::Float32, device);
    at->second.std = from_vector<double>(kCifar10Std, {1, 3, 1, 1}).to(DType::Float32, device);
  }
  return at->second;
}

}  // namespace

Tensor normalize_batch(const Tensor& images) {
  KILN_CHECK(images.dtype() == DType::UInt8 && images.dim() == 4 && images.size(1) == 3,
             "normalize_batch: expected (B, 3, H, W) uint8 images, got ", images.dtype(), " ", images.shape());
  // mean, std: (1, 3, 1, 1), broadcast over the batch and the pixels.
  const ChannelStatistics& stats = channel_statistics(images.device());
  Tensor x = ops::div(images.to(DType::Float32), 255.0);  // x: (B, 3, H, W) in [0, 1]
  return ops::div(ops::sub(x, stats.mean), stats.std);
}

}  // namespace kiln::apps::lenet
