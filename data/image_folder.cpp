#include "data/image_folder.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <system_error>

#include "data/archive_path.h"
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

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options) : root_(std::move(root)), options_(options) {
  check_options();
  ArchivePath where = split_archive_path(root_);
  if (where.archive.empty()) {
    scan_disk();
    return;
  }
  archive_ = std::make_shared<const TarArchive>(TarArchive::open(where.archive));
  scan_archive(where.folder);
}

ImageFolder::ImageFolder(std::shared_ptr<const TarArchive> archive, std::string folder, ImageFolderOptions options)
    : archive_(std::move(archive)), options_(options) {
  KILN_CHECK(archive_ != nullptr, "ImageFolder: the archive holding folder '", folder, "' is null");
  check_options();
  folder = normalize_member_path(folder);
  root_ = folder.empty() ? archive_->name() : archive_->name() + "/" + folder;
  scan_archive(folder);
}

void ImageFolder::check_options() const {
  KILN_CHECK((options_.height == 0) == (options_.width == 0) && options_.height >= 0 && options_.width >= 0,
             "ImageFolder: expected size (", options_.height, ", ", options_.width,
             ") must be both positive or both 0 (any size)");
}

void ImageFolder::scan_disk() {
  std::error_code ec;
  KILN_CHECK(fs::is_directory(root_, ec), "ImageFolder: root '", root_, "' does not exist or is not a directory");
  // Entries are sorted by name so that labels and sample order are the same
  // on every machine, whatever order the file system lists them in.
  for (const auto& entry : fs::directory_iterator(root_))
    if (entry.is_directory()) class_names_.push_back(entry.path().filename().string());
  std::sort(class_names_.begin(), class_names_.end());
  KILN_CHECK(!class_names_.empty(), "ImageFolder: root '", root_,
             "' has no class folders (expected root/<class>/<image>)");

  for (size_t label = 0; label < class_names_.size(); ++label) {
    const fs::path dir = fs::path(root_) / class_names_[label];
    std::vector<std::string> paths;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && is_image_file(entry.path())) paths.push_back(entry.path().string());
    KILN_CHECK(!paths.empty(), "ImageFolder: class folder '", dir.string(),
               "' holds no image file (.png, .jpg, .jpeg or .bmp)");
    std::sort(paths.begin(), paths.end());
    for (auto& p : paths) files_.push_back({std::move(p), static_cast<int64_t>(label), nullptr});
  }
}

void ImageFolder::scan_archive(const std::string& folder) {
  const std::string& archive = archive_->name();
  KILN_CHECK(folder.empty() || archive_has_folder(*archive_, folder), "ImageFolder: archive '", archive,
             "' has no folder '", folder, "' (no member's name starts with '", folder, "/'; expected ", folder,
             "/<class>/<image> inside the archive)");
  const std::string lead = folder.empty() ? "" : folder + "/";
  // class name -> member name -> entry; both maps sort by name in byte order,
  // as the disk scan does. A member stored twice keeps its later copy, the
  // one that extracting the archive leaves on disk.
  std::map<std::string, std::map<std::string, const TarEntry*>> classes;
  for (const TarEntry& entry : archive_->entries()) {
    const std::string name = normalize_member_path(entry.name);
    if (!name.starts_with(lead)) continue;
    const std::string rest = name.substr(lead.size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos || slash == 0) continue;  // a file beside the class folders
    auto& files = classes[rest.substr(0, slash)];
    const std::string file = rest.substr(slash + 1);
    if (file.find('/') == std::string::npos && is_image_file(file)) files[name] = &entry;
  }
  KILN_CHECK(!classes.empty(), "ImageFolder: root '", root_, "' has no class folders (expected root/<class>/<image>)");
  for (const auto& [class_name, files] : classes) {
    KILN_CHECK(!files.empty(), "ImageFolder: class folder '", archive, "/", lead, class_name,
               "' holds no image file (.png, .jpg, .jpeg or .bmp)");
    const auto label = static_cast<int64_t>(class_names_.size());
    class_names_.push_back(class_name);
    for (const auto& [name, entry] : files) files_.push_back({archive + "/" + name, label, entry});
  }
}

const std::string& ImageFolder::path(int64_t i) const {
  KILN_CHECK(i >= 0 && i < size(), "ImageFolder: index ", i, " out of range for ", size(), " samples in '", root_, "'");
  return files_[static_cast<size_t>(i)].path;
}

int64_t ImageFolder::label(int64_t i) const {
  path(i);  // bounds check
  return files_[static_cast<size_t>(i)].label;
}

Tensor ImageFolder::decode_checked(int64_t i, int64_t height, int64_t width) const {
  const std::string& file = path(i);
  const TarEntry* member = files_[static_cast<size_t>(i)].member;
  Tensor image;
  if (member == nullptr) {
    image = decode_image_file(file, options_.decode);
  } else {
    std::span<const uint8_t> bytes = archive_->contents(*member);
    image = decode_image(bytes.data(), bytes.size(), file, options_.decode);
  }
  KILN_CHECK(height == 0 || (image.size(1) == height && image.size(2) == width), "ImageFolder: '", file, "' is ",
             image.size(1), "x", image.size(2), " (HxW) but ", height, "x", width, " is expected");
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
