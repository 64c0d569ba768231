// ImageFolder: a labelled image data set laid out one folder per class, as
// torchvision.datasets.ImageFolder.
//
//   root/airplane/0000.jpg  -> label 0
//   root/airplane/0001.png  -> label 0
//   root/bird/0000.bmp      -> label 1
//
// Classes are the sub-folders of root sorted by name (byte order), their
// index is the label; within a class, files are sorted by name. Files whose
// extension is not .png, .jpg, .jpeg or .bmp (any case) are ignored.
//
//   ImageFolder train("cifar10-jpeg/train", {.height = 32, .width = 32});
//   LabeledImage item = train.get(0);          // (3, 32, 32) uint8, label ()
//   ImageTensors all = train.load_all();       // (50000, 3, 32, 32), (50000)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image.h"
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
  // Scans root (no image is decoded yet). Throws naming root when it is
  // missing, not a folder or has no class folders, and naming the class
  // folder when one holds no image file.
  explicit ImageFolder(std::string root, ImageFolderOptions options = {});

  int64_t size() const { return static_cast<int64_t>(files_.size()); }
  const std::string& root() const { return root_; }
  const std::vector<std::string>& class_names() const { return class_names_; }
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
  };
  // Decodes file i and checks its size against (height, width).
  Tensor decode_checked(int64_t i, int64_t height, int64_t width) const;

  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> class_names_;
  std::vector<File> files_;
};

}  // namespace kiln::data
