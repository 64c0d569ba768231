// CIFAR-10 in its official binary format ("CIFAR-10 binary version" from
// https://www.cs.toronto.edu/~kriz/cifar.html).
//
// Note [CIFAR-10 binary format]
// Each of data_batch_1.bin .. data_batch_5.bin (50,000 training images) and
// test_batch.bin (10,000 test images) is a bare sequence of 3073-byte records:
//   byte 0          the label, 0..9 (airplane, automobile, bird, cat, deer,
//                   dog, frog, horse, ship, truck)
//   bytes 1..1024   the red plane, 32 rows of 32 pixels, row-major
//   bytes 1025..    the green plane, then the blue plane
// so a record's 3072 pixel bytes are exactly one (3, 32, 32) uint8 image in
// CHW order, and a file is exactly (N, 3, 32, 32) images with N labels
// interleaved. There is no header: the record count is the file size / 3073,
// and a size that is not a multiple of 3073 means a truncated file.
//
// The files sit in a folder cifar-10-batches-bin/, which is what
// cifar-10-binary.tar.gz unpacks to; load_cifar10 reads either the folder or
// the archive itself (data/tar.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace kiln::data {

inline constexpr int64_t kCifar10Classes = 10;
inline constexpr int64_t kCifar10ImageBytes = 3 * 32 * 32;
inline constexpr int64_t kCifar10RecordBytes = 1 + kCifar10ImageBytes;

// One split of CIFAR-10, in file order.
struct Cifar10Split {
  Tensor images;  // (N, 3, 32, 32) uint8, channels R, G, B
  Tensor labels;  // (N) int64, each in 0..9
};

// Reads the training split (data_batch_1..5.bin, in that order) or the test
// split (test_batch.bin). `root_or_tar_gz` is a folder holding
// cifar-10-batches-bin/, that folder itself, or the cifar-10-binary.tar.gz
// archive (any .tar or .tar.gz holding cifar-10-batches-bin/<file>).
// Throws kiln::Error naming the file (and the record) when a path or batch
// file is missing, a file is truncated, a label is out of range, or the
// archive is corrupt.
//   Cifar10Split train = load_cifar10("data/cifar-10-binary.tar.gz", true);
//   // train.images: (50000, 3, 32, 32) uint8; train.labels: (50000) int64
Cifar10Split load_cifar10(const std::string& root_or_tar_gz, bool train);

// Decodes the records of one batch file held in memory; `name` stands for
// the file in error messages. Requires size to be a non-zero multiple of
// 3073 and every label to be in 0..9.
Cifar10Split parse_cifar10_records(const uint8_t* data, size_t size, const std::string& name);

// Writes images (N, 3, 32, 32) uint8 and labels (N) of an integer dtype with
// values 0..9 as one batch file in the format above. The file appears
// atomically: the records go to a temporary file beside `path` that is then
// renamed over it, so a reader never sees half a file.
void write_cifar10_bin(const std::string& path, const Tensor& images_uint8, const Tensor& labels);

}  // namespace kiln::data
