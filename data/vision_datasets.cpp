// CIFAR-10 and ImageFolder as Datasets (Note [Image dataset samples] in
// vision_datasets.h). Like dataset.cpp, this calls the raw kiln::ops: loading
// is gradient-free.
#include "data/vision_datasets.h"

#include <utility>

#include "data/cifar10.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/index.h"
#include "tensor/random.h"

namespace kiln::data {

LabeledImageDataset::LabeledImageDataset(std::shared_ptr<transforms::Transform> transform, uint64_t seed)
    : transform_(std::move(transform)), seed_(seed) {}

void LabeledImageDataset::hold_in_memory(Tensor images, Tensor labels) {
  KILN_CHECK(images.dtype() == DType::UInt8 && images.dim() == 4, name(),
             ": in-memory images must be (N, C, H, W) uint8, got ", images.dtype(), " ", images.shape());
  KILN_CHECK(labels.dtype() == DType::Int64 && labels.dim() == 1 && labels.size(0) == images.size(0), name(),
             ": labels must be (", images.size(0), ") int64 to match the images, got ", labels.dtype(), " ",
             labels.shape());
  images_ = std::move(images);
  labels_ = std::move(labels);
}

LabeledImage LabeledImageDataset::load(int64_t index) const {
  KILN_CHECK(images_.defined(), name(), ": holds no images in memory and does not decode them per sample");
  return {images_.select(0, index), labels_.select(0, index)};
}

Example LabeledImageDataset::get(int64_t index) const {
  check_index(index);
  LabeledImage sample = load(index);
  if (!transform_) return {sample.image, sample.label};
  // Its own generator per (seed, epoch, index), so the sample does not depend
  // on which worker thread builds it or in what order.
  Generator gen(transforms::sample_seed(seed_, epoch(), static_cast<uint64_t>(index)));
  return {transform_->apply(sample.image, gen), sample.label};
}

Batch LabeledImageDataset::get_batch(const std::vector<int64_t>& indices) const {
  if (transform_ || !images_.defined()) return Dataset::get_batch(indices);
  KILN_CHECK(!indices.empty(), name(), ": get_batch needs at least one index");
  for (int64_t index : indices) check_index(index);
  // index: (B) int64
  Tensor index = from_vector<int64_t>(indices, {static_cast<int64_t>(indices.size())});
  return {ops::index_select(images_, 0, index), ops::index_select(labels_, 0, index)};
}

Cifar10Dataset::Cifar10Dataset(const std::string& root_or_tar_gz, bool train,
                               std::shared_ptr<transforms::Transform> transform, uint64_t seed)
    : LabeledImageDataset(std::move(transform), seed), path_(root_or_tar_gz), train_(train) {
  Cifar10Split split = load_cifar10(root_or_tar_gz, train);
  hold_in_memory(std::move(split.images), std::move(split.labels));
}

std::string Cifar10Dataset::name() const {
  return "CIFAR-10 (" + path_ + ", " + (train_ ? "train" : "test") + ")";
}

ImageFolderDataset::ImageFolderDataset(std::string root, std::shared_ptr<transforms::Transform> transform,
                                       uint64_t seed, ImageFolderDatasetOptions options)
    : LabeledImageDataset(std::move(transform), seed), folder_(std::move(root), options.folder) {
  load_unless_lazy(options);
}

ImageFolderDataset::ImageFolderDataset(std::shared_ptr<const TarArchive> archive, std::string folder,
                                       std::shared_ptr<transforms::Transform> transform, uint64_t seed,
                                       ImageFolderDatasetOptions options)
    : LabeledImageDataset(std::move(transform), seed), folder_(std::move(archive), std::move(folder), options.folder) {
  load_unless_lazy(options);
}

void ImageFolderDataset::load_unless_lazy(const ImageFolderDatasetOptions& options) {
  if (options.lazy) return;
  ImageTensors all = folder_.load_all(options.load_threads);
  hold_in_memory(std::move(all.images), std::move(all.labels));
}

std::string ImageFolderDataset::name() const { return "ImageFolder (" + folder_.root() + ")"; }

LabeledImage ImageFolderDataset::load(int64_t index) const {
  if (in_memory()) return LabeledImageDataset::load(index);
  return folder_.get(index);
}

}  // namespace kiln::data
