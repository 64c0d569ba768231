// Writing images: a (C, H, W) uint8 tensor as a PNG file, and a batch of
// images tiled into one picture, as torchvision.utils.make_grid and
// save_image.
//
//   Tensor grid = make_image_grid(fake, {.columns = 8, .range = {-1, 1}});  // fake (64, 3, 32, 32) float
//   write_png("samples.png", grid);
#pragma once

#include <string>
#include <utility>

#include "tensor/tensor.h"

namespace kiln::data {

// The PNG encoding of img, (C, H, W) uint8 with C = 1 (grey), 2 (grey and
// alpha), 3 (RGB) or 4 (RGBA), on the CPU: 8 bits per sample, no
// interlacing, zlib-compressed rows without filtering. decode_image reads
// it back to the same tensor.
std::string encode_png(const Tensor& img);

// encode_png(img) written to `path` atomically (Note [Atomic file writes]:
// an existing file is replaced only by a complete one). Throws naming the
// path when it cannot be written.
void write_png(const std::string& path, const Tensor& img);

struct ImageGridOptions {
  int64_t columns = 8;  // images per row (the last row may be shorter)
  int64_t padding = 2;  // pixels between images and around the grid
  // Float images are mapped from [range.first, range.second] to [0, 255]
  // (values outside are clamped); uint8 images are taken as they are.
  std::pair<double, double> range = {0.0, 1.0};
  uint8_t pad_value = 0;
};

// images (N, C, H, W), uint8 or floating, on any device -> one (C, H', W')
// uint8 CPU tensor with the images in rows of `columns`, as
// torchvision.utils.make_grid.
Tensor make_image_grid(const Tensor& images, const ImageGridOptions& options = {});

}  // namespace kiln::data
