// The vision data sets behind the Dataset interface: CIFAR-10 (data/cifar10.h)
// and an ImageFolder (data/image_folder.h), each with an optional per-sample
// transform (data/transforms.h).
//
//   auto train_tf = std::make_shared<transforms::Compose>(std::vector<std::shared_ptr<transforms::Transform>>{
//       std::make_shared<transforms::RandomCrop>(32, 4), std::make_shared<transforms::ToTensor>()});
//   auto train = std::make_shared<Cifar10Dataset>("data/cifar-10-binary.tar.gz", true, train_tf, 42);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     train->set_epoch(epoch);   // with loader.set_epoch(epoch): new crops each epoch
//     ...
//   }
//
// Note [Image dataset samples]
// Example i of an image data set is (image, label): image (C, H, W), label a
// 0-dim int64 tensor. Without a transform the image is the stored uint8
// pixels, and get_batch() of an in-memory data set is one index_select per
// tensor, as TensorDataset. With a transform, sample i of epoch e is
// transform(image_i, Generator(sample_seed(seed, e, i))) (Note [Transform
// randomness]), built per sample and stacked. It depends only on (seed, e, i),
// never on the thread that builds it or on the batch the index falls in, so a
// DataLoader gives the same batches with any number of workers. The epoch is
// the data set's own (set_epoch); the DataLoader's epoch only reorders
// indices, so a training loop sets both.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_folder.h"
#include "data/tar.h"
#include "data/transforms.h"
#include "tensor/tensor.h"

namespace kiln::data {

// What CIFAR-10 and ImageFolder data sets share: the transform, its seed and
// the current epoch (Note [Image dataset samples]), and the in-memory fast
// path of get_batch().
class LabeledImageDataset : public Dataset {
 public:
  // Checks `index`, loads the image and applies the transform, if any.
  Example get(int64_t index) const override;
  // One gather on the in-memory tensors when there is no transform and the
  // images are held in memory; otherwise get() per index, stacked.
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  // The epoch that seeds the transform's per-sample generators. Call it
  // between passes, not while a DataLoader pass is running.
  void set_epoch(uint64_t epoch) { epoch_.store(epoch, std::memory_order_relaxed); }
  uint64_t epoch() const { return epoch_.load(std::memory_order_relaxed); }
  uint64_t seed() const { return seed_; }
  const std::shared_ptr<transforms::Transform>& transform() const { return transform_; }
  // Whether the images are decoded into memory (images() defined).
  bool in_memory() const { return images_.defined(); }
  // All images (N, C, H, W) uint8 and labels (N) int64, untransformed;
  // undefined when the images are decoded per call.
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

 protected:
  LabeledImageDataset(std::shared_ptr<transforms::Transform> transform, uint64_t seed);

  // Keeps images (N, C, H, W) uint8 and labels (N) int64 in memory; load()
  // and get_batch() then read them.
  void hold_in_memory(Tensor images, Tensor labels);
  // The untransformed sample `index`, already range-checked: image (C, H, W)
  // uint8, label 0-dim int64. The default reads the in-memory tensors; a
  // data set that decodes per call overrides it.
  virtual LabeledImage load(int64_t index) const;

 private:
  std::shared_ptr<transforms::Transform> transform_;
  uint64_t seed_;
  std::atomic<uint64_t> epoch_{0};
  Tensor images_;  // (N, C, H, W) uint8, or undefined
  Tensor labels_;  // (N) int64, or undefined
};

// One split of CIFAR-10, read whole into memory by load_cifar10.
//   Cifar10Dataset test("data/cifar-10-binary.tar.gz", false);
//   Example e = test.get(0);   // e.data: (3, 32, 32) uint8, e.target: () int64
class Cifar10Dataset : public LabeledImageDataset {
 public:
  // `root_or_tar_gz` as load_cifar10 takes it; `train` picks data_batch_1..5
  // or test_batch. Throws what load_cifar10 throws.
  Cifar10Dataset(const std::string& root_or_tar_gz, bool train,
                 std::shared_ptr<transforms::Transform> transform = nullptr, uint64_t seed = 0);

  int64_t size() const override { return images().size(0); }
  // "CIFAR-10 (<path>, train)" or "CIFAR-10 (<path>, test)".
  std::string name() const override;
  bool train() const { return train_; }

 private:
  std::string path_;
  bool train_;
};

struct ImageFolderDatasetOptions {
  ImageFolderOptions folder = {};
  // When true, each get() decodes its file (little memory, a decode per
  // sample per epoch); when false, the constructor decodes every file once
  // with ImageFolder::load_all on `load_threads` threads (0: all).
  bool lazy = false;
  int load_threads = 0;
};

// An ImageFolder (root/<class>/<image>) as a Dataset; labels are the indices
// of the sorted class names. The folder may lie inside a .tar or .tar.gz
// archive (Note [Archive paths] in archive_path.h); two splits of one
// archive share it when it is opened once and passed to both.
//   ImageFolderDataset train("imagenette/train", tf, 0, {.folder = {.height = 160, .width = 160}});
//   ImageFolderDataset test("cifar10-jpeg.tar.gz/cifar10-jpeg/test");
//   auto tar = std::make_shared<const TarArchive>(TarArchive::open("cifar10-jpeg.tar.gz"));
//   ImageFolderDataset train(tar, "cifar10-jpeg/train", tf, 0), test(tar, "cifar10-jpeg/test");
class ImageFolderDataset : public LabeledImageDataset {
 public:
  // `root` is a folder or "<archive>/<folder inside>". Throws what
  // ImageFolder's constructor and, unless lazy, load_all throw (naming the
  // root, or the file that cannot be decoded or has the wrong size).
  explicit ImageFolderDataset(std::string root, std::shared_ptr<transforms::Transform> transform = nullptr,
                              uint64_t seed = 0, ImageFolderDatasetOptions options = {});
  // The folder `folder` of an archive already open. Throws as above.
  ImageFolderDataset(std::shared_ptr<const TarArchive> archive, std::string folder,
                     std::shared_ptr<transforms::Transform> transform = nullptr, uint64_t seed = 0,
                     ImageFolderDatasetOptions options = {});

  int64_t size() const override { return folder_.size(); }
  // "ImageFolder (<root>)".
  std::string name() const override;
  const ImageFolder& folder() const { return folder_; }
  const std::vector<std::string>& class_names() const { return folder_.class_names(); }

 protected:
  LabeledImage load(int64_t index) const override;

 private:
  // Decodes every image into memory unless options.lazy.
  void load_unless_lazy(const ImageFolderDatasetOptions& options);

  ImageFolder folder_;
};

}  // namespace kiln::data
