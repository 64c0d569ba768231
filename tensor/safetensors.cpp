// safetensors reader and writer (Note [safetensors layout] in safetensors.h);
// SafetensorsReader (safetensors_reader.h) reads one tensor at a time, and
// load_safetensors is that reader reading them all.
//
// Files are read and written with POSIX calls rather than iostreams: the
// writer is an AtomicFile (Note [Atomic file writes] in atomic_file.h), and
// both sides want errno in their messages. Nothing read from a file is trusted: every size is
// checked against the file's real length before it is used, and tensor bytes
// are read with pread at offsets that have already been checked.
#include "tensor/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <charconv>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <system_error>
#include <vector>

#include "tensor/atomic_file.h"
#include "tensor/safetensors_reader.h"

namespace kiln {

static_assert(std::endian::native == std::endian::little,
              "safetensors.cpp writes tensors as they lie in memory, which is the format's "
              "little-endian layout only on a little-endian host");
static_assert(sizeof(bool) == 1, "safetensors BOOL is one byte per element");

namespace {

// ordered_json keeps keys in the order they were inserted or parsed, which
// is how the TensorDict order reaches the header and comes back from it.
using Json = nlohmann::ordered_json;

// The reference implementation's limit: no real header comes near it, and a
// larger size means the file is not a safetensors file at all.
constexpr uint64_t kMaxHeaderSize = 100'000'000;
constexpr char kMetadataKey[] = "__metadata__";
// Note [safetensors layout]: "kiln.crc32.<tensor name>" -> 8 hex digits.
constexpr char kChecksumPrefix[] = "kiln.crc32.";
constexpr size_t kChecksumDigits = 8;
// Note [safetensors layout]: "kiln.quant.<tensor name>" -> the tensor's QuantParams.
constexpr char kQuantPrefix[] = "kiln.quant.";

// zlib's CRC-32 of `nbytes` bytes, in pieces that fit its 32-bit lengths.
uint32_t crc32_of(const void* data, uint64_t nbytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (nbytes > 0) {
    const uInt n = static_cast<uInt>(std::min<uint64_t>(nbytes, uint64_t{1} << 30));
    crc = ::crc32(crc, p, n);
    p += n;
    nbytes -= n;
  }
  return static_cast<uint32_t>(crc);
}

// Fixed width, so that the header's length does not depend on the values
// (save_safetensors writes it before it knows them).
std::string checksum_text(uint32_t crc) {
  char buffer[kChecksumDigits + 1];
  std::snprintf(buffer, sizeof buffer, "%08x", crc);
  return buffer;
}

struct DTypeCode {
  DType dtype;
  const char* code;
};
constexpr std::array<DTypeCode, kNumDTypes> kDTypeCodes{{{DType::Bool, "BOOL"},
                                                          {DType::UInt8, "U8"},
                                                          {DType::Int8, "I8"},
                                                          {DType::Int32, "I32"},
                                                          {DType::Int64, "I64"},
                                                          {DType::Float16, "F16"},
                                                          {DType::BFloat16, "BF16"},
                                                          {DType::Float32, "F32"},
                                                          {DType::Float64, "F64"}}};

const char* dtype_code(DType dtype) {
  for (const auto& entry : kDTypeCodes)
    if (entry.dtype == dtype) return entry.code;
  KILN_FAIL("save_safetensors: dtype ", dtype, " has no safetensors code");
}

// A tensor's QuantParams as the metadata string of Note [safetensors layout]:
//   {"scheme":"per_channel","axis":0,"scales":[0.012,...],"zero_points":[0,...]}
// with every scale printed to 17 significant digits, which reads back as
// the same double.
std::string quant_params_text(const QuantParams& p) {
  bool per_tensor = p.scheme == QuantParams::Scheme::PerTensor;
  std::string text = std::string("{\"scheme\":\"") + (per_tensor ? "per_tensor" : "per_channel") +
                     "\",\"axis\":" + std::to_string(p.axis) + ",\"scales\":[";
  char number[32];
  for (size_t i = 0; i < p.scales.size(); ++i) {
    std::snprintf(number, sizeof number, "%.17g", p.scales[i]);
    text += (i ? "," : "") + std::string(number);
  }
  text += "],\"zero_points\":[";
  for (size_t i = 0; i < p.zero_points.size(); ++i) text += (i ? "," : "") + std::to_string(p.zero_points[i]);
  return text + "]}";
}

// A JSON value for an error message, cut short: a corrupt header may hold a
// million-element shape.
std::string brief(const Json& value) {
  std::string text = value.dump();
  constexpr size_t kMax = 80;
  return text.size() <= kMax ? text : text.substr(0, kMax) + "...";
}

}  // namespace

// ---- writing ------------------------------------------------------------------

void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  KILN_CHECK(!path.empty(), "save_safetensors: the path is empty");
  for (const auto& [key, value] : metadata) {
    KILN_CHECK(!key.starts_with(kChecksumPrefix), "save_safetensors: '", path, "': metadata key '", key,
               "' uses the prefix \"", kChecksumPrefix, "\", which Kiln reserves for the tensors' checksums");
    KILN_CHECK(!key.starts_with(kQuantPrefix), "save_safetensors: '", path, "': metadata key '", key,
               "' uses the prefix \"", kQuantPrefix, "\", which Kiln reserves for the tensors' quantization "
               "parameters");
  }
  std::vector<const TensorDict::Entry*> entries;
  for (const auto& entry : tensors) {
    KILN_CHECK(entry.first != kMetadataKey, "save_safetensors: '", path, "': a tensor may not be named \"",
               kMetadataKey, "\", which the format reserves for the metadata");
    entries.push_back(&entry);
  }

  // Buffer order: widest elements first, otherwise the dict's order, so each
  // tensor's offset is a multiple of its element size.
  std::vector<size_t> buffer_order(entries.size());
  std::iota(buffer_order.begin(), buffer_order.end(), 0);
  std::stable_sort(buffer_order.begin(), buffer_order.end(), [&](size_t a, size_t b) {
    return entries[a]->second.element_size() > entries[b]->second.element_size();
  });
  std::vector<std::array<uint64_t, 2>> offsets(entries.size());
  uint64_t buffer_size = 0;
  for (size_t i : buffer_order) {
    offsets[i] = {buffer_size, buffer_size + entries[i]->second.nbytes()};
    buffer_size = offsets[i][1];
  }

  // The checksums are known once each tensor has been copied to the CPU,
  // after the header has been written: it goes out with zeros in their
  // place and is rewritten, at the same length, at the end.
  std::map<std::string, std::string> full_metadata = metadata;
  for (const auto* entry : entries) {
    full_metadata[kChecksumPrefix + entry->first] = checksum_text(0);
    if (const auto& params = entry->second.impl()->quant_params()) {
      full_metadata[kQuantPrefix + entry->first] = quant_params_text(*params);
    }
  }
  auto header_text = [&] {
    Json header = Json::object();
    if (!full_metadata.empty()) header[kMetadataKey] = full_metadata;
    for (size_t i = 0; i < entries.size(); ++i) {
      const Tensor& t = entries[i]->second;
      header[entries[i]->first] = {
          {"dtype", dtype_code(t.dtype())}, {"shape", t.shape()}, {"data_offsets", offsets[i]}};
    }
    std::string text;
    try {
      text = header.dump();
    } catch (const nlohmann::json::exception& e) {
      // The one failure of dump(): a name or metadata string that is not UTF-8.
      KILN_FAIL("save_safetensors: '", path, "': a tensor name or metadata string is not valid UTF-8 (", e.what(),
                ")");
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
  };
  const std::string first_header = header_text();
  uint64_t header_size = first_header.size();

  AtomicFile file(path, "save_safetensors");
  file.write(&header_size, sizeof header_size);
  file.write(first_header.data(), first_header.size());
  for (size_t i : buffer_order) {
    const auto& [name, tensor] = *entries[i];
    // One tensor at a time, so that saving a GPU model needs host memory for
    // its largest tensor only; detached, so that autograd records no copy.
    Tensor host;
    try {
      host = tensor.detach().to(kCPU).contiguous();
    } catch (const Error& e) {
      KILN_FAIL("save_safetensors: '", path, "': cannot copy tensor '", name, "' to the CPU: ", e.message());
    }
    file.write(host.data_ptr(), host.nbytes());
    full_metadata[kChecksumPrefix + name] = checksum_text(crc32_of(host.data_ptr(), host.nbytes()));
  }
  const std::string final_header = header_text();
  KILN_CHECK(final_header.size() == header_size, "save_safetensors: '", path, "': the header changed length from ",
             header_size, " to ", final_header.size(), " bytes when its checksums were filled in");
  file.write_at(sizeof header_size, final_header.data(), final_header.size());
  file.commit();
}

std::string safetensors_temp_path(const std::string& path) { return AtomicFile::temp_path_for(path); }

// ---- reading ------------------------------------------------------------------

namespace {

// One tensor's header entry, checked against itself; its place in the
// buffer is checked against the others by check_buffer_coverage.
struct TensorRecord {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

// Reads exactly `nbytes` at `offset`; the caller has checked that they lie
// inside the file, so a short read means the file changed under us.
void read_exact(int fd, void* data, size_t nbytes, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::pread(fd, p, nbytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    KILN_CHECK(n >= 0, "load_safetensors: '", path, "': read failed at byte ", offset, ": ", errno_text(errno));
    KILN_CHECK(n > 0, "load_safetensors: '", path, "': the file ended at byte ", offset,
               " while reading it (was it truncated during the load?)");
    p += n;
    nbytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

// Parses the header, rejecting repeated keys in any object: JSON allows them
// and nlohmann keeps the last, but a file naming a tensor twice is corrupt.
Json parse_header(const std::string& text, const std::string& path) {
  std::vector<std::set<std::string>> open_objects;  // keys seen in each enclosing object
  std::string top_key;                              // the tensor whose entry is being parsed
  std::string duplicate;
  auto check_keys = [&](int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) open_objects.emplace_back();
    if (event == Event::object_end) open_objects.pop_back();
    if (event == Event::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (depth == 1) top_key = key;
      if (!open_objects.back().insert(key).second && duplicate.empty()) {
        duplicate = "duplicate key '" + key + "' " +
                    (depth == 1 ? "at the top level of the header (tensor names must be unique)"
                                : "inside the entry of '" + top_key + "'");
      }
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, check_keys);
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL("load_safetensors: '", path, "': the header is not valid JSON: ", e.what());
  }
  KILN_CHECK(duplicate.empty(), "load_safetensors: '", path, "': ", duplicate);
  KILN_CHECK(header.is_object(), "load_safetensors: '", path, "': the header is not a JSON object: ", brief(header));
  return header;
}

// The "kiln.crc32.<name>" entries of `metadata`, moved out of it and parsed:
// tensor name -> CRC-32.
std::map<std::string, uint32_t> take_checksums(std::map<std::string, std::string>& metadata,
                                               const std::string& path) {
  std::map<std::string, uint32_t> checksums;
  for (auto it = metadata.begin(); it != metadata.end();) {
    if (!it->first.starts_with(kChecksumPrefix)) {
      ++it;
      continue;
    }
    const std::string& text = it->second;
    uint32_t crc = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), crc, 16);
    const bool lower_hex = std::all_of(text.begin(), text.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    });
    KILN_CHECK(text.size() == kChecksumDigits && lower_hex && error == std::errc() && end == text.data() + text.size(),
               "load_safetensors: '", path, "': metadata field '", it->first, "' is \"", text,
               "\"; expected a CRC-32 as ", kChecksumDigits, " lowercase hex digits");
    checksums.emplace(it->first.substr(std::char_traits<char>::length(kChecksumPrefix)), crc);
    it = metadata.erase(it);
  }
  return checksums;
}

// The QuantParams a "kiln.quant.<name>" field describes, checked against
// the tensor's header entry; a bad one throws naming the file and tensor.
std::shared_ptr<const QuantParams> parse_quant_params(const std::string& text, const TensorRecord& record,
                                                      const std::string& path) {
  const std::string where = "load_safetensors: '" + path + "': tensor '" + record.name +
                            "': its quantization parameters (metadata field '" + kQuantPrefix + record.name + "')";
  Json value;
  try {
    value = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL(where, " are not valid JSON: ", e.what());
  }
  KILN_CHECK(value.is_object() && value.contains("scheme") && value.contains("axis") && value.contains("scales") &&
                 value.contains("zero_points"),
             where, " must be an object with \"scheme\", \"axis\", \"scales\" and \"zero_points\", got ", brief(value));
  auto params = std::make_shared<QuantParams>();
  const Json& scheme = value["scheme"];
  KILN_CHECK(scheme == "per_tensor" || scheme == "per_channel", where, ": unknown scheme ", brief(scheme),
             " (expected \"per_tensor\" or \"per_channel\")");
  params->scheme = scheme == "per_tensor" ? QuantParams::Scheme::PerTensor : QuantParams::Scheme::PerChannel;
  KILN_CHECK(value["axis"].is_number_integer(), where, ": axis ", brief(value["axis"]), " is not an integer");
  params->axis = value["axis"].get<int64_t>();
  const Json& scales = value["scales"];
  const Json& zero_points = value["zero_points"];
  KILN_CHECK(scales.is_array() && zero_points.is_array() && scales.size() == zero_points.size() && !scales.empty(),
             where, ": expected as many scales as zero points (at least one), got ", brief(scales), " and ",
             brief(zero_points));
  for (const Json& s : scales) {
    KILN_CHECK(s.is_number() && std::isfinite(s.get<double>()) && s.get<double>() > 0, where, ": scale ", brief(s),
               " is not a positive finite number");
    params->scales.push_back(s.get<double>());
  }
  for (const Json& z : zero_points) {
    KILN_CHECK(z.is_number_integer(), where, ": zero point ", brief(z), " is not an integer");
    params->zero_points.push_back(z.get<int64_t>());
  }
  const auto rank = static_cast<int64_t>(record.shape.size());
  if (params->scheme == QuantParams::Scheme::PerTensor) {
    KILN_CHECK(params->scales.size() == 1, where, ": per_tensor holds one scale, got ", params->scales.size());
  } else {
    KILN_CHECK(params->axis >= 0 && params->axis < rank, where, ": axis ", params->axis,
               " is out of range for shape ", record.shape);
    KILN_CHECK(static_cast<int64_t>(params->scales.size()) == record.shape[params->axis], where, ": ",
               params->scales.size(), " scales for axis ", params->axis, " of size ", record.shape[params->axis]);
  }
  return params;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const std::string& path) {
  KILN_CHECK(value.is_object(), "load_safetensors: '", path, "': \"", kMetadataKey,
             "\" must be an object of strings, got ", brief(value));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    KILN_CHECK(item.is_string(), "load_safetensors: '", path, "': \"", kMetadataKey,
               "\" must map strings to strings, but '", key, "' holds ", brief(item));
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// A non-negative integer that fits in int64 (JSON numbers may be floats,
// negative, or larger than any size).
bool is_size(const Json& value) {
  return value.is_number_unsigned() &&
         value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

TensorRecord parse_entry(const std::string& name, const Json& entry, const std::string& path) {
  const std::string where = "load_safetensors: '" + path + "': tensor '" + name + "'";
  KILN_CHECK(entry.is_object(), where, ": the entry is not a JSON object: ", brief(entry));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    KILN_CHECK(entry.contains(key), where, ": the entry has no \"", key, "\": ", brief(entry));

  const Json& code = entry["dtype"];
  const DTypeCode* found = nullptr;
  if (code.is_string()) {
    for (const auto& candidate : kDTypeCodes)
      if (code.get_ref<const std::string&>() == candidate.code) found = &candidate;
  }
  KILN_CHECK(found != nullptr, where, ": unknown dtype ", brief(code),
             " (Kiln reads BOOL, U8, I8, I32, I64, F16, BF16, F32, F64)");

  const Json& shape_json = entry["shape"];
  bool shape_ok = shape_json.is_array() && std::all_of(shape_json.begin(), shape_json.end(), is_size);
  KILN_CHECK(shape_ok, where, ": invalid shape ", brief(shape_json), " (expected a list of non-negative integers)");
  Shape shape;
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& size : shape_json) {
    shape.push_back(size.get<int64_t>());
    overflow = overflow || __builtin_mul_overflow(numel, size.get<uint64_t>(), &numel);
  }
  uint64_t nbytes = 0;
  overflow = overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
             __builtin_mul_overflow(numel, element_size(found->dtype), &nbytes);
  KILN_CHECK(!overflow, where, ": shape ", shape, " has more elements than fit in 64 bits");

  const Json& offsets = entry["data_offsets"];
  bool offsets_ok = offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                    offsets[1].is_number_unsigned() && offsets[0].get<uint64_t>() <= offsets[1].get<uint64_t>();
  KILN_CHECK(offsets_ok, where, ": invalid data_offsets ", brief(offsets),
             " (expected [begin, end], integers with begin <= end)");
  uint64_t begin = offsets[0].get<uint64_t>();
  uint64_t end = offsets[1].get<uint64_t>();
  KILN_CHECK(end - begin == nbytes, where, ": data_offsets [", begin, ", ", end, "] span ", end - begin,
             " bytes but ", found->code, " of shape ", shape, " needs ", nbytes, " bytes");
  return {name, found->dtype, std::move(shape), begin, end};
}

// The reference rule: sorted by offset, the tensors tile the buffer exactly,
// with no overlap, no hole, and nothing after the last one.
void check_buffer_coverage(const std::vector<TensorRecord>& records, uint64_t buffer_size, const std::string& path) {
  std::vector<const TensorRecord*> sorted;
  for (const auto& r : records) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](const TensorRecord* a, const TensorRecord* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  uint64_t covered = 0;  // bytes [0, covered) belong to the tensors seen so far
  const TensorRecord* previous = nullptr;
  for (const TensorRecord* r : sorted) {
    KILN_CHECK(r->begin >= covered, "load_safetensors: '", path, "': tensors '", previous->name, "' [",
               previous->begin, ", ", previous->end, ") and '", r->name, "' [", r->begin, ", ", r->end,
               ") overlap in the data buffer");
    KILN_CHECK(r->begin == covered, "load_safetensors: '", path, "': hole in the data buffer: bytes [", covered,
               ", ", r->begin, ") belong to no tensor (before '", r->name, "')");
    KILN_CHECK(r->end <= buffer_size, "load_safetensors: '", path, "': tensor '", r->name, "' ends at byte ", r->end,
               " of the data buffer but the file holds only ", buffer_size, " data bytes (truncated file)");
    covered = r->end;
    previous = r;
  }
  KILN_CHECK(covered == buffer_size, "load_safetensors: '", path, "': bytes [", covered, ", ", buffer_size,
             ") at the end of the data buffer belong to no tensor");
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::string path)
    : path_(std::move(path)), fd_(::open(path_.c_str(), O_RDONLY | O_CLOEXEC)) {
  const std::string& p = path_;
  KILN_CHECK(fd_.get() >= 0, "load_safetensors: cannot open '", p, "': ", errno_text(errno));
  struct stat info {};
  KILN_CHECK(::fstat(fd_.get(), &info) == 0, "load_safetensors: cannot stat '", p, "': ", errno_text(errno));
  KILN_CHECK(S_ISREG(info.st_mode), "load_safetensors: '", p, "' is not a regular file");
  file_size_ = static_cast<uint64_t>(info.st_size);

  KILN_CHECK(file_size_ >= 8, "load_safetensors: '", p, "': the file is ", file_size_,
             " bytes, too short to hold the 8-byte header size");
  uint64_t header_size = 0;
  read_exact(fd_.get(), &header_size, sizeof header_size, 0, p);
  KILN_CHECK(header_size <= kMaxHeaderSize, "load_safetensors: '", p, "': header size ", header_size,
             " is over the limit of ", kMaxHeaderSize, " bytes (not a safetensors file?)");
  KILN_CHECK(header_size <= file_size_ - 8, "load_safetensors: '", p, "': header size ", header_size,
             " runs past the end of the file, which has ", file_size_ - 8, " bytes after the 8-byte size");
  std::string text(header_size, '\0');
  read_exact(fd_.get(), text.data(), text.size(), 8, p);
  const Json header = parse_header(text, p);

  std::vector<TensorRecord> records;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      metadata_ = parse_metadata(entry, p);
    } else {
      records.push_back(parse_entry(name, entry, p));
    }
  }
  const uint64_t buffer_start = 8 + header_size;
  check_buffer_coverage(records, file_size_ - buffer_start, p);
  checksums_ = take_checksums(metadata_, p);
  if (!checksums_.empty()) {
    // A file with checksums has one for each tensor and none for a tensor it lacks.
    std::set<std::string> names;
    for (const TensorRecord& r : records) {
      names.insert(r.name);
      KILN_CHECK(checksums_.contains(r.name), "load_safetensors: '", p, "': tensor '", r.name,
                 "' has no checksum (metadata field '", kChecksumPrefix, r.name, "') but the file's other tensors do");
    }
    for (const auto& [name, crc] : checksums_) {
      KILN_CHECK(names.contains(name), "load_safetensors: '", p, "': metadata field '", kChecksumPrefix, name,
                 "' is the checksum of a tensor the file does not hold");
    }
  }
  // The quantization parameters, moved out of the metadata as the checksums are.
  for (auto it = metadata_.begin(); it != metadata_.end();) {
    if (!it->first.starts_with(kQuantPrefix)) {
      ++it;
      continue;
    }
    std::string name = it->first.substr(std::char_traits<char>::length(kQuantPrefix));
    auto record = std::find_if(records.begin(), records.end(), [&](const TensorRecord& r) { return r.name == name; });
    KILN_CHECK(record != records.end(), "load_safetensors: '", p, "': metadata field '", it->first,
               "' holds the quantization parameters of a tensor the file does not hold");
    quant_params_.emplace(name, parse_quant_params(it->second, *record, p));
    it = metadata_.erase(it);
  }
  for (TensorRecord& r : records) {
    index_.emplace(r.name, entries_.size());
    entries_.push_back({std::move(r.name), r.dtype, std::move(r.shape), buffer_start + r.begin, r.end - r.begin});
  }
}

const SafetensorsReader::Entry* SafetensorsReader::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsReader::read(std::string_view name) const {
  const Entry* e = find(name);
  KILN_CHECK(e != nullptr, "load_safetensors: '", path_, "' holds no tensor '", name, "'");
  Tensor t = Tensor::empty(e->shape, e->dtype);
  read_exact(fd_.get(), t.data_ptr(), t.nbytes(), e->file_offset, path_);
  if (auto it = checksums_.find(e->name); it != checksums_.end()) {
    const uint32_t crc = crc32_of(t.data_ptr(), t.nbytes());
    KILN_CHECK(crc == it->second, "load_safetensors: '", path_, "': tensor '", e->name, "' is corrupt: the CRC-32 of its ",
               t.nbytes(), " bytes (at byte ", e->file_offset, " of the file) is ", checksum_text(crc),
               " but metadata field '", kChecksumPrefix, e->name, "' records ", checksum_text(it->second));
  }
  if (auto it = quant_params_.find(e->name); it != quant_params_.end()) t.impl()->set_quant_params(it->second);
  if (e->dtype == DType::Bool) {
    // Any byte but 0 and 1 in a C++ bool is undefined behaviour.
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i)
      KILN_CHECK(bytes[i] <= 1, "load_safetensors: '", path_, "': tensor '", e->name, "' (BOOL) holds byte ",
                 static_cast<int>(bytes[i]), " at element ", i, "; booleans must be 0 or 1");
  }
  return t;
}

TensorDict load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  SafetensorsReader file(path);
  TensorDict tensors;
  for (const auto& entry : file.entries()) tensors.insert(entry.name, file.read(entry.name));
  if (metadata != nullptr) *metadata = file.metadata();
  return tensors;
}

}  // namespace kiln
