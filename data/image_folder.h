// ImageFolder: a labelled image data set laid out one folder per class, as
// torchvision.datasets.ImageFolder.
//
//   root/airplane/0000.jpg  -> label 0
//   root/airplane/0001.png  -> label 0
//   root/bird/0000.bmp      -> label 1
//
// Classes are the sub-folders of root sorted by name (byte order), their
// index is the label; within a class, files are sorted by name. Files whose
// extension is not .png, .jpg, .jpeg or .bmp (any case) are ignored, and so
// are files beside the class folders and files in folders below them.
//
//   ImageFolder train("cifar10-jpeg/train", {.height = 32, .width = 32});
//   LabeledImage item = train.get(0);          // (3, 32, 32) uint8, label ()
//   ImageTensors all = train.load_all();       // (50000, 3, 32, 32), (50000)
//
// The folder may also lie inside a .tar or .tar.gz archive, read without
// extracting it: root is then "<archive>/<folder inside>" (Note [Archive
// paths] in archive_path.h), and images decode from the archive's bytes in
// memory, with the same sorting, labels, extensions and errors as on disk.
//   ImageFolder train("cifar10-jpeg.tar.gz/cifar10-jpeg/train");
// Both splits of one archive share it when it is opened once:
//   auto tar = std::make_shared<const TarArchive>(TarArchive::open("cifar10-jpeg.tar.gz"));
//   ImageFolder train(tar, "cifar10-jpeg/train"), test(tar, "cifar10-jpeg/test");
// An archived folder keeps the whole uncompressed archive in memory (92 MB
// for CIFAR-10 as JPEG) for as long as an ImageFolder holds it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/tar.h"
#include "tensor/tensor.h"

namespace kiln::data {

struct ImageFolderOptions {
  // The size every image must have; 0 and 0 accept any size in get() (and in
  // load_all() the size of the first image, which all must then share).
  int64_t height = 0;
  int64_t width = 0;
  DecodeOptions decode = {};
};

// One sample: image (C, H, W) uint8 and label, a 0-dim int64 tensor.
struct LabeledImage {
  Tensor image;
  Tensor label;
};

// A whole data set in memory: images (N, C, H, W) uint8, labels (N) int64.
struct ImageTensors {
  Tensor images;
  Tensor labels;
};

class ImageFolder {
 public:
  // Scans root, a folder or "<archive>/<folder inside>" (no image is
  // decoded yet; an archive is read whole). Throws naming root when it is
  // missing, not a folder or has no class folders, naming the class folder
  // when one holds no image file, naming the archive when it cannot be read
  // (as TarArchive::open) or has no such folder.
  explicit ImageFolder(std::string root, ImageFolderOptions options = {});
  // The folder `folder` ('/'-separated, "" for the top) of an archive that
  // is already open, e.g. shared with another split. Throws as above.
  ImageFolder(std::shared_ptr<const TarArchive> archive, std::string folder, ImageFolderOptions options = {});

  int64_t size() const { return static_cast<int64_t>(files_.size()); }
  // The folder, or "<archive>/<folder>" for an archived one.
  const std::string& root() const { return root_; }
  // The archive the images are read from; null for a folder on disk.
  const std::shared_ptr<const TarArchive>& archive() const { return archive_; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  // The file of sample i: a path on disk, or "<archive>/<member>".
  const std::string& path(int64_t i) const;
  int64_t label(int64_t i) const;

  // Decodes sample i, 0 <= i < size(). Throws naming the file when it cannot
  // be decoded or its size differs from the expected one (both sizes given).
  LabeledImage get(int64_t i) const;

  // Decodes every sample on `threads` threads (0: kiln::get_num_threads())
  // into one tensor. All images must have one size (the expected one when
  // given); a file that differs or cannot be decoded is named in the error
  // (with several threads, not necessarily the first such file).
  ImageTensors load_all(int threads = 0) const;

 private:
  struct File {
    std::string path;
    int64_t label;
    const TarEntry* member = nullptr;  // in archive_, or null for a file on disk
  };
  void check_options() const;
  void scan_disk();
  void scan_archive(const std::string& folder);
  // Decodes file i and checks its size against (height, width).
  Tensor decode_checked(int64_t i, int64_t height, int64_t width) const;

  std::string root_;
  std::shared_ptr<const TarArchive> archive_;
  ImageFolderOptions options_;
  std::vector<std::string> class_names_;
  std::vector<File> files_;
};

}  // namespace kiln::data
