// Converting an image folder of 32x32 RGB images into the CIFAR-10 binary
// format (Note [CIFAR-10 binary format] in data/cifar10.h), so that a user's
// own small data set loads with load_cifar10 / Cifar10Dataset and trains with
// the CIFAR-10 recipes unchanged. The tool kiln-image-folder-to-cifar
// (apps/tools/) is a command line over this function.
//
//   root/train/<class>/<image>   ->  outdir/cifar-10-batches-bin/data_batch_1..5.bin
//   root/test/<class>/<image>    ->  outdir/cifar-10-batches-bin/test_batch.bin
//                                    outdir/cifar-10-batches-bin/batches.meta.txt
//
// The image folder may also lie inside a .tar or .tar.gz archive, named as
// "<archive>/<folder inside>" (Note [Archive paths] in archive_path.h); the
// archive is read once for both splits.
//
//   CifarConversion c = convert_image_folder_to_cifar("my-data", "out");
//   Cifar10Dataset train("out", true);   // c.train_images examples
//   convert_image_folder_to_cifar("cifar10-jpeg.tar.gz/cifar10-jpeg", "out");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::data {

// What a conversion wrote.
struct CifarConversion {
  std::vector<std::string> class_names;  // label i is class_names[i]
  int64_t train_images = 0;
  int64_t test_images = 0;
  std::string folder;  // outdir/cifar-10-batches-bin
};

// Reads root/train and root/test (root a folder or "<archive>/<folder>") as
// ImageFolders (classes are the sorted sub-folder names, the same in both
// splits, at most 10 of them; every image a 32x32 RGB .png, .jpg, .jpeg or
// .bmp) and writes the CIFAR-10 batch files into outdir/cifar-10-batches-bin/
// (created if missing):
//  - data_batch_1.bin .. data_batch_5.bin: the training images in ImageFolder
//    order (class by class, files sorted by name), cut into 5 consecutive
//    batches whose sizes differ by at most one (the official release has
//    10,000 each), so at least 5 training images are needed;
//  - test_batch.bin: the test images in the same order;
//  - batches.meta.txt: the class names, one per line.
// Every image is decoded before anything is written, so a bad image leaves
// the output folder untouched. Throws kiln::Error naming the missing split
// folder, the archive that cannot be read, the file of the wrong size or
// channel count, the class lists that differ, or the file that cannot be
// written.
CifarConversion convert_image_folder_to_cifar(const std::string& root, const std::string& outdir);

}  // namespace kiln::data
