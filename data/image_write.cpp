// PNG encoding (the PNG specification, ISO/IEC 15948): the 8-byte
// signature, then chunks of (length, type, data, CRC-32 of type and data):
// IHDR (size, 8-bit samples, colour type), one IDAT holding the zlib stream
// of the rows, each row prefixed by filter byte 0 (none), and IEND.
#include "data/image_write.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/atomic_file.h"
#include "tensor/ops.h"

namespace kiln::data {
namespace {

void put_u32(std::string& out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                         static_cast<char>(v)};
  out.append(bytes, 4);
}

void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out += data;
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(out.data() + start), static_cast<uInt>(4 + data.size()));
  put_u32(out, static_cast<uint32_t>(crc));
}

}  // namespace

std::string encode_png(const Tensor& img) {
  KILN_CHECK(img.defined(), "encode_png: got an undefined tensor");
  KILN_CHECK(img.dim() == 3 && img.size(0) >= 1 && img.size(0) <= 4, "encode_png: expected an image (C, H, W) with C in 1..4, got shape ",
             img.shape());
  KILN_CHECK(img.dtype() == DType::UInt8, "encode_png: expected uint8 pixels, got ", img.dtype(),
             " (make_image_grid converts float images)");
  KILN_CHECK(img.size(1) > 0 && img.size(2) > 0, "encode_png: the image is empty, shape ", img.shape());
  const int64_t channels = img.size(0), height = img.size(1), width = img.size(2);
  // (H, W, C): PNG stores each pixel's samples together.
  Tensor hwc = img.to(kCPU).permute({1, 2, 0}).contiguous();
  const uint8_t* pixels = hwc.data<uint8_t>();
  std::string rows;
  rows.reserve(height * (1 + width * channels));
  for (int64_t y = 0; y < height; ++y) {
    rows.push_back('\0');  // filter: none
    rows.append(reinterpret_cast<const char*>(pixels + y * width * channels), width * channels);
  }
  uLongf compressed_size = compressBound(rows.size());
  std::string compressed(compressed_size, '\0');
  const int status = compress2(reinterpret_cast<Bytef*>(compressed.data()), &compressed_size,
                               reinterpret_cast<const Bytef*>(rows.data()), rows.size(), Z_DEFAULT_COMPRESSION);
  KILN_CHECK(status == Z_OK, "encode_png: zlib failed to compress ", rows.size(), " bytes (status ", status, ")");
  compressed.resize(compressed_size);

  static constexpr char kColourType[5] = {0, 0, 4, 2, 6};  // by channel count: grey, grey+alpha, RGB, RGBA
  std::string header;
  put_u32(header, static_cast<uint32_t>(width));
  put_u32(header, static_cast<uint32_t>(height));
  header += std::string{8, kColourType[channels], 0, 0, 0};  // bit depth, colour type, compression, filter, interlace
  std::string png("\x89PNG\r\n\x1a\n", 8);
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", compressed);
  put_chunk(png, "IEND", "");
  return png;
}

void write_png(const std::string& path, const Tensor& img) { write_file_atomically(path, encode_png(img), "write_png"); }

Tensor make_image_grid(const Tensor& images, const ImageGridOptions& options) {
  KILN_CHECK(images.defined() && images.dim() == 4, "make_image_grid: expected images (N, C, H, W), got ",
             images.defined() ? images.shape() : Shape{});
  KILN_CHECK(images.size(0) > 0, "make_image_grid: got no images");
  KILN_CHECK(options.columns > 0 && options.padding >= 0, "make_image_grid: columns must be positive and padding >= 0, got ",
             options.columns, " and ", options.padding);
  const auto [lo, hi] = options.range;
  KILN_CHECK(hi > lo, "make_image_grid: range must be increasing, got [", lo, ", ", hi, "]");
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  Tensor pixels;  // (N, C, H, W) uint8 on the CPU
  if (images.dtype() == DType::UInt8) {
    pixels = images.to(kCPU).contiguous();
  } else {
    KILN_CHECK(images.is_floating_point(), "make_image_grid: expected uint8 or floating images, got ", images.dtype());
    // (x - lo) / (hi - lo) * 255, clamped, rounded to nearest.
    Tensor scaled = ops::mul(ops::sub(images.to(DType::Float32, kCPU), lo), 255.0 / (hi - lo));
    pixels = ops::clamp(ops::add(scaled, 0.5), 0.0, 255.0).to(DType::UInt8).contiguous();  // truncation after +0.5
  }
  const int64_t columns = std::min(options.columns, n), grid_rows = (n + columns - 1) / columns;
  const int64_t pad = options.padding;
  const int64_t out_h = grid_rows * (h + pad) + pad, out_w = columns * (w + pad) + pad;
  Tensor grid = full({c, out_h, out_w}, static_cast<int64_t>(options.pad_value), {DType::UInt8, kCPU});
  for (int64_t k = 0; k < n; ++k) {
    const int64_t top = pad + (k / columns) * (h + pad), left = pad + (k % columns) * (w + pad);
    grid.slice(1, top, top + h).slice(2, left, left + w).copy_(pixels.select(0, k));
  }
  return grid;
}

}  // namespace kiln::data
