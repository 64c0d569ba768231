// CIFAR-10 binary batches (Note [CIFAR-10 binary format] in cifar10.h).
#include "data/cifar10.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include "data/tar.h"

namespace kiln::data {

namespace {

namespace fs = std::filesystem;

constexpr char kFolder[] = "cifar-10-batches-bin";

std::string errno_text(int error) { return std::generic_category().message(error); }

std::vector<std::string> split_files(bool train) {
  if (!train) return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"};
}

// The record count of one batch file, after checking that its size is a
// non-zero whole number of records.
int64_t count_records(const char* op, std::span<const uint8_t> bytes, const std::string& name) {
  const uint64_t size = bytes.size();
  KILN_CHECK(size > 0, op, ": '", name, "' is empty; a CIFAR-10 batch holds ", kCifar10RecordBytes, "-byte records");
  const uint64_t whole = size / kCifar10RecordBytes;
  const uint64_t tail = size % kCifar10RecordBytes;
  KILN_CHECK(tail == 0, op, ": '", name, "' has ", size, " bytes, not a whole number of ", kCifar10RecordBytes,
             "-byte records: record ", whole, " starts at byte ", whole * kCifar10RecordBytes, " but has only ", tail,
             " of its ", kCifar10RecordBytes, " bytes (truncated file)");
  return static_cast<int64_t>(whole);
}

// Splits the interleaved records into the label and image buffers.
// images: (count, 3, 32, 32) uint8; labels: (count) int64.
void decode_records(const char* op, std::span<const uint8_t> bytes, const std::string& name, uint8_t* images,
                    int64_t* labels) {
  const int64_t count = static_cast<int64_t>(bytes.size()) / kCifar10RecordBytes;
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* record = bytes.data() + i * kCifar10RecordBytes;
    KILN_CHECK(record[0] < kCifar10Classes, op, ": '", name, "' record ", i, " (byte ", i * kCifar10RecordBytes,
               "): label ", record[0], " is not a CIFAR-10 class (0..9)");
    labels[i] = record[0];
    std::memcpy(images + i * kCifar10ImageBytes, record + 1, kCifar10ImageBytes);
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  KILN_CHECK(file, "load_cifar10: cannot open '", path, "': ", errno_text(errno));
  std::error_code error;
  uintmax_t size = fs::file_size(path, error);
  KILN_CHECK(!error, "load_cifar10: cannot stat '", path, "': ", error.message());
  std::vector<uint8_t> bytes(size);
  size_t n = std::fread(bytes.data(), 1, bytes.size(), file.get());
  KILN_CHECK(n == bytes.size(), "load_cifar10: cannot read '", path, "': got ", n, " of ", size, " bytes",
             std::ferror(file.get()) ? ": " + errno_text(errno) : std::string());
  return bytes;
}

// The archive member holding one batch file: "cifar-10-batches-bin/<file>",
// possibly below a leading folder ("./" or a user's own).
const TarEntry* find_member(const TarArchive& archive, const std::string& file) {
  const std::string wanted = std::string(kFolder) + "/" + file;
  if (const TarEntry* entry = archive.find(wanted)) return entry;
  for (const TarEntry& entry : archive.entries())
    if (entry.name.size() > wanted.size() && entry.name.ends_with("/" + wanted)) return &entry;
  return nullptr;
}

// Copies the named batches, already in memory, into one split.
Cifar10Split assemble(const std::vector<std::span<const uint8_t>>& batches, const std::vector<std::string>& names) {
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    counts.push_back(count_records("load_cifar10", batches[i], names[i]));
    total += counts.back();
  }
  Cifar10Split split{Tensor::empty({total, 3, 32, 32}, DType::UInt8), Tensor::empty({total}, DType::Int64)};
  int64_t first = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    decode_records("load_cifar10", batches[i], names[i], split.images.data<uint8_t>() + first * kCifar10ImageBytes,
                   split.labels.data<int64_t>() + first);
    first += counts[i];
  }
  return split;
}

// A temporary file renamed over its target by commit(), removed otherwise.
class AtomicFile {
 public:
  explicit AtomicFile(std::string target)
      : target_(std::move(target)),
        temp_(target_ + ".tmp." + std::to_string(::getpid())),
        file_(std::fopen(temp_.c_str(), "wb"), std::fclose) {
    KILN_CHECK(file_, "write_cifar10_bin: cannot create the temporary file '", temp_, "' for '", target_,
               "': ", errno_text(errno));
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (!committed_) {
      file_.reset();
      std::remove(temp_.c_str());
    }
  }

  void write(const void* data, size_t nbytes) {
    KILN_CHECK(std::fwrite(data, 1, nbytes, file_.get()) == nbytes, "write_cifar10_bin: cannot write '", temp_,
               "' (temporary file for '", target_, "'): ", errno_text(errno));
  }

  void commit() {
    KILN_CHECK(std::fflush(file_.get()) == 0 && ::fsync(::fileno(file_.get())) == 0,
               "write_cifar10_bin: cannot flush '", temp_, "' to disk: ", errno_text(errno));
    KILN_CHECK(std::fclose(file_.release()) == 0, "write_cifar10_bin: cannot close '", temp_, "': ", errno_text(errno));
    KILN_CHECK(std::rename(temp_.c_str(), target_.c_str()) == 0, "write_cifar10_bin: cannot rename '", temp_, "' to '",
               target_, "': ", errno_text(errno));
    committed_ = true;
  }

 private:
  std::string target_;
  std::string temp_;
  std::unique_ptr<FILE, int (*)(FILE*)> file_;
  bool committed_ = false;
};

}  // namespace

Cifar10Split parse_cifar10_records(const uint8_t* data, size_t size, const std::string& name) {
  std::span<const uint8_t> bytes(data, size);
  int64_t count = count_records("parse_cifar10_records", bytes, name);
  Cifar10Split split{Tensor::empty({count, 3, 32, 32}, DType::UInt8), Tensor::empty({count}, DType::Int64)};
  decode_records("parse_cifar10_records", bytes, name, split.images.data<uint8_t>(), split.labels.data<int64_t>());
  return split;
}

Cifar10Split load_cifar10(const std::string& root_or_tar_gz, bool train) {
  const std::vector<std::string> files = split_files(train);
  const char* split_name = train ? "train" : "test";
  std::error_code error;
  fs::file_status status = fs::status(root_or_tar_gz, error);
  KILN_CHECK(fs::exists(status), "load_cifar10: '", root_or_tar_gz, "' does not exist (expected a folder holding ",
             kFolder, "/ or cifar-10-binary.tar.gz)");

  std::vector<std::string> names;
  std::vector<std::span<const uint8_t>> batches;
  if (fs::is_directory(status)) {
    fs::path folder = fs::path(root_or_tar_gz) / kFolder;
    if (!fs::is_directory(folder, error)) folder = fs::path(root_or_tar_gz);
    std::vector<std::vector<uint8_t>> contents;
    for (const std::string& file : files) {
      std::string path = (folder / file).string();
      KILN_CHECK(fs::is_regular_file(path, error), "load_cifar10: '", path, "' is missing (the ", split_name,
                 " split needs ", train ? "data_batch_1.bin .. data_batch_5.bin" : "test_batch.bin", " in '",
                 folder.string(), "')");
      contents.push_back(read_file(path));
      names.push_back(path);
    }
    for (const auto& bytes : contents) batches.emplace_back(bytes);
    return assemble(batches, names);
  }

  TarArchive archive = TarArchive::open(root_or_tar_gz);
  for (const std::string& file : files) {
    const TarEntry* entry = find_member(archive, file);
    KILN_CHECK(entry, "load_cifar10: the archive '", root_or_tar_gz, "' has no member ", kFolder, "/", file, " (the ",
               split_name, " split needs it)");
    batches.push_back(archive.contents(*entry));
    names.push_back(root_or_tar_gz + ":" + entry->name);
  }
  return assemble(batches, names);
}

void write_cifar10_bin(const std::string& path, const Tensor& images_uint8, const Tensor& labels) {
  KILN_CHECK(images_uint8.defined() && labels.defined(), "write_cifar10_bin: '", path,
             "': images and labels must be defined tensors");
  KILN_CHECK(images_uint8.dtype() == DType::UInt8, "write_cifar10_bin: '", path, "': images must be uint8, got ",
             images_uint8.dtype());
  KILN_CHECK(
      images_uint8.dim() == 4 && images_uint8.size(1) == 3 && images_uint8.size(2) == 32 && images_uint8.size(3) == 32,
      "write_cifar10_bin: '", path, "': images must have shape (N, 3, 32, 32), got ", images_uint8.shape());
  KILN_CHECK(!is_floating(labels.dtype()) && labels.dtype() != DType::Bool, "write_cifar10_bin: '", path,
             "': labels must have an integer dtype, got ", labels.dtype());
  const int64_t count = images_uint8.size(0);
  // The reader rejects an empty batch as a broken file; do not write one.
  KILN_CHECK(count > 0, "write_cifar10_bin: '", path, "': no images to write (N = 0)");
  KILN_CHECK(labels.dim() == 1 && labels.size(0) == count, "write_cifar10_bin: '", path, "': labels must have shape (",
             count, ") to match ", count, " images, got ", labels.shape());

  // images: (N, 3, 32, 32); labels: (N), both on the CPU and contiguous.
  Tensor images = images_uint8.detach().to(kCPU).contiguous();
  Tensor targets = labels.detach().to(DType::Int64, kCPU).contiguous();
  const uint8_t* pixels = images.data<uint8_t>();
  const int64_t* values = targets.data<int64_t>();
  for (int64_t i = 0; i < count; ++i)
    KILN_CHECK(values[i] >= 0 && values[i] < kCifar10Classes, "write_cifar10_bin: '", path, "': label ", i, " is ",
               values[i], ", not a CIFAR-10 class (0..9)");

  AtomicFile file(path);
  std::vector<uint8_t> record(kCifar10RecordBytes);
  for (int64_t i = 0; i < count; ++i) {
    record[0] = static_cast<uint8_t>(values[i]);
    std::memcpy(record.data() + 1, pixels + i * kCifar10ImageBytes, kCifar10ImageBytes);
    file.write(record.data(), record.size());
  }
  file.commit();
}

}  // namespace kiln::data
