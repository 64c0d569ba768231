// Where kiln-lenet's images come from: --data names a CIFAR-10 binary
// release or an image folder, and open_datasets builds the training and test
// Datasets for it.
//
// Note [Normalizing whole batches]
// The data sets hand out uint8 images: the test set and an un-augmented
// training set straight from memory (one index_select per batch, the fast
// path of LabeledImageDataset::get_batch), an augmented training set after
// the per-sample RandomCrop and RandomHorizontalFlip, which move uint8 bytes.
// ToTensor and Normalize then run once per batch on the whole (B, 3, 32, 32)
// tensor (normalize_batch) rather than per sample: the same arithmetic as
// torchvision's Compose([..., ToTensor(), Normalize(mean, std)]), a quarter
// of the bytes through the per-sample path, and no per-sample overhead for
// un-augmented data. Training on a GPU, the uint8 batch is uploaded (from
// pinned memory, without waiting) and normalized there: a quarter of the
// bytes over PCIe, and the arithmetic where it is cheapest.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/tar.h"
#include "data/vision_datasets.h"
#include "tensor/tensor.h"

namespace kiln::apps::lenet {

// CIFAR-10's per-channel statistics of the training set (R, G, B), as the
// PyTorch examples use them.
inline const std::vector<double> kCifar10Mean = {0.4914, 0.4822, 0.4465};
inline const std::vector<double> kCifar10Std = {0.2470, 0.2435, 0.2616};

// CIFAR-10's class names in label order.
const std::vector<std::string>& cifar10_class_names();

struct Datasets {
  std::shared_ptr<data::LabeledImageDataset> train;
  std::shared_ptr<data::LabeledImageDataset> test;
  std::vector<std::string> class_names;  // in label order
  std::string description;               // "CIFAR-10 binary (path)" or "image folder (path)"
};

// Opens `path`:
//   - a folder holding cifar-10-batches-bin/, that folder itself, or a folder
//     holding cifar-10-binary.tar.gz: CIFAR-10 (load_cifar10);
//   - a .tar/.tar.gz holding cifar-10-batches-bin/: CIFAR-10;
//   - a folder ROOT with ROOT/train/<class>/ and ROOT/test/<class>/ of 32x32
//     images: ImageFolderDataset, held in memory, at most 10 classes and the
//     same classes in both splits;
//   - any other .tar/.tar.gz: an image folder inside an archive
//     (open_image_folder_archive).
// With `augment`, the training set applies RandomCrop(32, padding 4) and
// RandomHorizontalFlip per sample, seeded by `seed`
// (Note [Image dataset samples]). Throws kiln::Error naming the path and
// what was looked for.
Datasets open_datasets(const std::string& path, bool augment, uint64_t seed);

// An image folder (train/<class>/, test/<class>/) packed in a .tar or
// .tar.gz archive, at its top or one folder down (the project's
// cifar10-jpeg.tar.gz holds cifar10-jpeg/train/...), decoded into memory
// from the archive (Note [Archive paths]). Throws kiln::Error naming the
// archive when it holds no such tree.
Datasets open_image_folder_archive(const std::shared_ptr<const data::TarArchive>& archive, bool augment,
                                   uint64_t seed);

// ToTensor + Normalize on a whole batch (Note [Normalizing whole batches]):
// images (B, 3, H, W) uint8 -> (B, 3, H, W) float32, (x / 255 - mean[c]) / std[c],
// on the images' device.
Tensor normalize_batch(const Tensor& images);

}  // namespace kiln::apps::lenet
