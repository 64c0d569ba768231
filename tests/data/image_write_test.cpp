// write_png and make_image_grid: PNGs decode back (with stb_image, an
// independent decoder) to the very pixels written, for every channel
// count; the grid places each image where torchvision's make_grid does and
// maps float ranges to bytes with rounding; bad input throws naming the op.
#include "data/image_write.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/image.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

// (C, H, W) uint8 with value (c * 97 + y * 31 + x * 7) % 256.
Tensor pattern(int64_t c, int64_t h, int64_t w) {
  Tensor t = Tensor::empty({c, h, w}, DType::UInt8);
  uint8_t* p = t.data<uint8_t>();
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) p[(k * h + y) * w + x] = static_cast<uint8_t>((k * 97 + y * 31 + x * 7) % 256);
  return t;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<uint8_t>(c.data<uint8_t>(), c.data<uint8_t>() + c.numel());
}

void expect_error(const std::function<void()>& fn, const std::string& expected) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(expected), std::string::npos) << e.message();
    return;
  }
  ADD_FAILURE() << "expected an error containing: " << expected;
}

TEST(WritePng, RoundTripsEveryChannelCount) {
  for (int64_t c : {1, 2, 3, 4}) {
    SCOPED_TRACE(c);
    Tensor img = pattern(c, 7, 13);
    std::string png = encode_png(img);
    ASSERT_EQ(png.substr(1, 3), "PNG");
    Tensor back = decode_image(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "round trip",
                               {.channels = static_cast<int>(c), .require_channels = true});
    EXPECT_EQ(back.shape(), img.shape());
    EXPECT_EQ(bytes_of(back), bytes_of(img));
  }
  // A non-contiguous view is written as the pixels it shows.
  Tensor wide = pattern(3, 8, 10);
  Tensor view = wide.slice(2, 1, 9, 2);
  std::string png = encode_png(view);
  Tensor back = decode_image(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "view");
  EXPECT_EQ(bytes_of(back), bytes_of(view));
}

TEST(WritePng, WritesAFileAtomically) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_png_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "grid.png").string();
  write_png(path, pattern(3, 4, 5));
  EXPECT_EQ(bytes_of(decode_image_file(path)), bytes_of(pattern(3, 4, 5)));
  write_png(path, pattern(3, 6, 2));  // replaces it
  EXPECT_EQ(decode_image_file(path).shape(), (Shape{3, 6, 2}));
  // Nothing but the file is left behind (no temporary).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  expect_error([&] { write_png((dir / "missing" / "x.png").string(), pattern(1, 2, 2)); }, "missing");
  fs::remove_all(dir);
}

TEST(WritePng, Errors) {
  expect_error([] { encode_png(Tensor()); }, "encode_png: got an undefined tensor");
  expect_error([] { encode_png(pattern(5, 2, 2)); }, "encode_png: expected an image (C, H, W) with C in 1..4");
  expect_error([] { encode_png(pattern(3, 2, 2).to(DType::Float32)); }, "encode_png: expected uint8 pixels, got float32");
  expect_error([] { encode_png(Tensor::empty({3, 0, 2}, DType::UInt8)); }, "encode_png: the image is empty");
}

// Three 2x2 images, 2 columns, padding 1: a 2-row grid of 7 x 7 pixels.
TEST(MakeImageGrid, PlacesImagesAsTorchvision) {
  Tensor images = Tensor::empty({3, 1, 2, 2}, DType::UInt8);
  for (int64_t i = 0; i < 12; ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(10 + i);
  Tensor grid = make_image_grid(images, {.columns = 2, .padding = 1, .pad_value = 255});
  ASSERT_EQ(grid.shape(), (Shape{1, 7, 7}));
  const std::vector<uint8_t> want = {
      255, 255, 255, 255, 255, 255, 255,  //
      255, 10,  11,  255, 14,  15,  255,  //
      255, 12,  13,  255, 16,  17,  255,  //
      255, 255, 255, 255, 255, 255, 255,  //
      255, 18,  19,  255, 255, 255, 255,  //
      255, 20,  21,  255, 255, 255, 255,  //
      255, 255, 255, 255, 255, 255, 255};
  EXPECT_EQ(bytes_of(grid), want);
}

TEST(MakeImageGrid, MapsFloatRangesWithRounding) {
  // -1 -> 0, 1 -> 255, 0 -> 127.5 -> 128, beyond the range clamped.
  Tensor images = from_vector<float>({-1.0f, 1.0f, 0.0f, 3.0f, -2.0f, 0.5f}, {1, 1, 2, 3});
  Tensor grid = make_image_grid(images, {.padding = 0, .range = {-1.0, 1.0}});
  EXPECT_EQ(bytes_of(grid), (std::vector<uint8_t>{0, 255, 128, 255, 0, 191}));
  expect_error([] { make_image_grid(Tensor::empty({2, 2, 2}, DType::UInt8)); }, "make_image_grid: expected images (N, C, H, W)");
  expect_error([&] { make_image_grid(images, {.range = {1, 1}}); }, "make_image_grid: range must be increasing");
  expect_error([&] { make_image_grid(images, {.columns = 0}); }, "make_image_grid: columns must be positive");
  expect_error([] { make_image_grid(Tensor::empty({2, 1, 2, 2}, DType::Int32)); }, "make_image_grid: expected uint8 or floating images");
}

}  // namespace
}  // namespace kiln::data
