// Decoding PNG, JPEG and BMP images into uint8 tensors (stb_image).
//
// Images come out channel-first, (C, H, W) uint8, the layout every layer of
// Kiln (conv2d, the transforms) reads; pixel (c, y, x) is row y from the top,
// column x from the left. Greyscale files decoded with channels = 3 repeat
// their one value over R, G and B, and an alpha channel is dropped, exactly as
// stb_image (and PIL's convert("RGB")) do.
//
//   Tensor img = decode_image_file("cat/0001.jpg");   // (3, 32, 32) uint8
//   Tensor g = decode_image(bytes.data(), bytes.size(), "digit.png", {.channels = 1});
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace kiln::data {

struct DecodeOptions {
  // Channels of the result (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA); stb
  // converts the file's own channels to this count.
  int channels = 3;
  // When true, a file whose own channel count differs from `channels` is an
  // error instead of being converted (a greyscale image in an RGB data set
  // is then caught, not silently repeated).
  bool require_channels = false;
};

// Decodes the encoded image in bytes[0, n) into a (C, H, W) uint8 tensor.
// `name` (a path, or a tar member) is used only in error messages.
// Throws kiln::Error naming `name` and stb's reason when the bytes are not a
// PNG, JPEG or BMP, or are truncated or corrupt, and when the file's channel
// count differs from a required one.
Tensor decode_image(const uint8_t* bytes, size_t n, const std::string& name, DecodeOptions options = {});

// Reads and decodes the file at `path`; throws naming the path when it cannot
// be opened or decoded.
Tensor decode_image_file(const std::string& path, DecodeOptions options = {});

}  // namespace kiln::data
