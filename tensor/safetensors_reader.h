// SafetensorsReader: one safetensors file opened for reading tensor by
// tensor, for callers that want a few tensors of a large file (a sharded
// checkpoint's loader reads only the pieces that overlap what it needs).
// load_safetensors (safetensors.h) is this reader reading every tensor.
//
//   SafetensorsReader file("rank-0-of-4.safetensors");   // checks the header
//   for (const auto& e : file.entries()) std::cout << e.name << " " << e.shape << "\n";
//   Tensor w = file.read("fc.weight");                    // reads and checks that tensor only
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensor/atomic_file.h"
#include "tensor/tensor.h"

namespace kiln {

class SafetensorsReader {
 public:
  // One tensor as the header describes it.
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t file_offset;  // where its first byte lies in the file
    uint64_t nbytes;
  };

  // Opens `path` and checks the whole header against the rules of Note
  // [safetensors layout]: the sizes, every entry's dtype, shape and offsets,
  // that the entries tile the data buffer exactly (so a truncated or padded
  // file is refused here), and the checksum fields. Reads no tensor bytes.
  // Throws kiln::Error naming the file and what is wrong with it.
  explicit SafetensorsReader(std::string path);
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  // In the order the header lists them.
  const std::vector<Entry>& entries() const { return entries_; }
  // The entry named `name`, or null.
  const Entry* find(std::string_view name) const;
  // "__metadata__", without the checksum and quantization fields.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads the tensor `name` into a new contiguous CPU tensor, checking its
  // CRC-32 when the file records one and that a BOOL tensor holds only 0
  // and 1; it carries the QuantParams the file records for it. Throws naming the file and the tensor if it is absent or corrupt.
  Tensor read(std::string_view name) const;

 private:
  std::string path_;
  FileDescriptor fd_;
  uint64_t file_size_ = 0;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, uint32_t> checksums_;  // tensor name -> CRC-32; empty for other writers' files
  std::map<std::string, std::shared_ptr<const QuantParams>> quant_params_;  // tensor name -> its grid, when it has one
};

}  // namespace kiln
