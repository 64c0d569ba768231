#include "data/image_folder.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tensor/cpu/parallel.h"
#include "tensor/error.h"
#include "tensor/factory.h"
#include "tensor/parallel.h"

namespace kiln::data {
namespace fs = std::filesystem;
namespace {

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

}  // namespace

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options)
    : root_(std::move(root)), options_(options) {
  KILN_CHECK((options_.height == 0) == (options_.width == 0) && options_.height >= 0 && options_.width >= 0,
             "ImageFolder: expected size (", options_.height, ", ", options_.width,
             ") must be both positive or both 0 (any size)");
  std::error_code ec;
  KILN_CHECK(fs::is_directory(root_, ec), "ImageFolder: root '", root_, "' does not exist or is not a directory");
  // Entries are sorted by name so that labels and sample order are the same
  // on every machine, whatever order the file system lists them in.
  for (const auto& entry : fs::directory_iterator(root_))
    if (entry.is_directory()) class_names_.push_back(entry.path().filename().string());
  std::sort(class_names_.begin(), class_names_.end());
  KILN_CHECK(!class_names_.empty(), "ImageFolder: root '", root_, "' has no class folders (expected root/<class>/<image>)");

  for (size_t label = 0; label < class_names_.size(); ++label) {
    const fs::path dir = fs::path(root_) / class_names_[label];
    std::vector<std::string> paths;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && is_image_file(entry.path())) paths.push_back(entry.path().string());
    KILN_CHECK(!paths.empty(), "ImageFolder: class folder '", dir.string(),
               "' holds no image file (.png, .jpg, .jpeg or .bmp)");
    std::sort(paths.begin(), paths.end());
    for (auto& p : paths) files_.push_back({std::move(p), static_cast<int64_t>(label)});
  }
}

const std::string& ImageFolder::path(int64_t i) const {
  KILN_CHECK(i >= 0 && i < size(), "ImageFolder: index ", i, " out of range for ", size(), " samples in '", root_,
             "'");
  return files_[static_cast<size_t>(i)].path;
}

int64_t ImageFolder::label(int64_t i) const {
  path(i);  // bounds check
  return files_[static_cast<size_t>(i)].label;
}

Tensor ImageFolder::decode_checked(int64_t i, int64_t height, int64_t width) const {
  const std::string& file = path(i);
  Tensor image = decode_image_file(file, options_.decode);
  KILN_CHECK(height == 0 || (image.size(1) == height && image.size(2) == width), "ImageFolder: '", file,
             "' is ", image.size(1), "x", image.size(2), " (HxW) but ", height, "x", width, " is expected");
  return image;
}

LabeledImage ImageFolder::get(int64_t i) const {
  Tensor image = decode_checked(i, options_.height, options_.width);
  return {image, scalar_tensor(label(i), DType::Int64)};
}

ImageTensors ImageFolder::load_all(int threads) const {
  KILN_CHECK(threads >= 0, "ImageFolder::load_all: threads must be >= 0, got ", threads);
  if (threads == 0) threads = get_num_threads();
  int64_t height = options_.height, width = options_.width;
  // Without an expected size, the first image sets it.
  Tensor first = decode_checked(0, height, width);
  height = first.size(1);
  width = first.size(2);
  const int64_t c = options_.decode.channels, n = size(), sample = c * height * width;

  // images: (N, C, H, W); labels: (N)
  Tensor images = Tensor::empty({n, c, height, width}, DType::UInt8);
  Tensor labels = Tensor::empty({n}, DType::Int64);
  uint8_t* dst = images.data<uint8_t>();
  int64_t* label_out = labels.data<int64_t>();
  std::memcpy(dst, first.data<uint8_t>(), static_cast<size_t>(sample));
  // Files take unequal time to decode, so threads take the next index from
  // a shared counter rather than fixed chunks.
  std::atomic<int64_t> next{1};
  cpu::parallel_region(threads, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        Tensor image = decode_checked(i, height, width);
        std::memcpy(dst + i * sample, image.data<uint8_t>(), static_cast<size_t>(sample));
      } catch (...) {
        next.store(n);  // the other threads stop at their next file; parallel_region rethrows this error
        throw;
      }
    }
  });
  for (int64_t i = 0; i < n; ++i) label_out[i] = files_[static_cast<size_t>(i)].label;
  return {images, labels};
}

}  // namespace kiln::data
