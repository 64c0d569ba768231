// safetensors: round trips of every dtype, the exact bytes of the reference
// layout, one hand-built corrupt file per rejection, atomic overwrites, and
// files exchanged with PyTorch (through scripts/safetensors_torch.py).
#include "tensor/safetensors.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tensor/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Every dtype with the code the format gives it, written out here rather
// than taken from the implementation so that a wrong table there is caught.
const std::vector<std::pair<DType, std::string>> kCodes = {
    {DType::Bool, "BOOL"},  {DType::UInt8, "U8"},      {DType::Int8, "I8"},
    {DType::Int32, "I32"},  {DType::Int64, "I64"},     {DType::Float16, "F16"},
    {DType::BFloat16, "BF16"}, {DType::Float32, "F32"}, {DType::Float64, "F64"}};
// 0-dim, empty, empty with a zero in the middle, 1-d, 3-d.
const std::vector<Shape> kShapes = {{}, {0}, {2, 0, 3}, {5}, {2, 3, 4}};

// Element k (row-major) of the test pattern for `dtype`. Every value is
// exact in its dtype; int64 values need more than 32 bits. The Python side of
// the interop tests computes the same formula with torch.
double pattern_value(DType dtype, int64_t k) {
  double base = static_cast<double>((k * 7) % 23);
  switch (dtype) {
    case DType::Bool: return k % 3 == 0 ? 1 : 0;
    case DType::UInt8: return base * 10;
    case DType::Int8:
    case DType::Int32: return base - 11;
    case DType::Int64: return (base - 11) * 1e12;
    default: return (base - 11) * 0.375;
  }
}

Tensor pattern_tensor(DType dtype, const Shape& shape) {
  Tensor t = Tensor::empty(shape, dtype);
  visit_dtype(dtype, [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t k = 0; k < t.numel(); ++k) p[k] = static_cast<T>(pattern_value(dtype, k));
  });
  return t;
}

// "F32:2,3,4"; "F32:" for a 0-dim tensor.
std::string pattern_name(const std::string& code, const Shape& shape) {
  std::string name = code + ":";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) name += ",";
    name += std::to_string(shape[i]);
  }
  return name;
}

void expect_same_tensor(const Tensor& actual, const Tensor& expected, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.shape(), expected.shape());
  EXPECT_TRUE(actual.device().is_cpu());
  // Freshly laid out row-major (is_contiguous() says false for some empty shapes).
  EXPECT_EQ(actual.strides(), contiguous_strides(actual.shape()));
  for (int64_t k = 0; k < expected.numel(); ++k)
    ASSERT_EQ(flat_value(actual, k), flat_value(expected, k)) << "element " << k;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file whose 8-byte size field says `header_size` (the header's own length
// by default), followed by the header text and the data buffer.
std::string file_bytes(const std::string& header, const std::string& buffer, uint64_t header_size) {
  std::string size(8, '\0');
  std::memcpy(size.data(), &header_size, 8);
  return size + header + buffer;
}
std::string file_bytes(const std::string& header, const std::string& buffer = std::string(8, '\0')) {
  return file_bytes(header, buffer, header.size());
}

// A fresh directory per test, so that tests can list it for stray files.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("kiln_safetensors_" + std::to_string(::getpid()) + "_" + test);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  // Writes `bytes` as a file and expects loading it to fail with a message
  // naming the file and containing `problem`.
  void expect_load_error(const std::string& bytes, const std::string& problem) {
    std::string file = path("corrupt.safetensors");
    write_bytes(file, bytes);
    expect_error([&] { load_safetensors(file); }, "'" + file + "'");
    expect_error([&] { load_safetensors(file); }, problem);
  }

  fs::path dir_;
};

// ---- round trips and layout ------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripsEveryDTypeAndShapeInOrder) {
  TensorDict saved;
  for (const auto& [dtype, code] : kCodes)
    for (const Shape& shape : kShapes) saved.insert(pattern_name(code, shape), pattern_tensor(dtype, shape));
  save_safetensors(path("all.safetensors"), saved);
  TensorDict loaded = load_safetensors(path("all.safetensors"));
  EXPECT_EQ(loaded.keys(), saved.keys());
  for (const auto& [name, t] : saved) expect_same_tensor(loaded.at(name), t, name);
}

TEST_F(SafetensorsTest, SavesNonContiguousTensorsByValue) {
  Tensor base = pattern_tensor(DType::Float32, {4, 6});
  TensorDict saved{{"transposed", base.t()},
                   {"strided", base.slice(1, 0, 6, 2)},
                   {"expanded", pattern_tensor(DType::Int64, {3}).expand({2, 3})},
                   {"offset", base.select(0, 2)}};
  save_safetensors(path("views.safetensors"), saved);
  TensorDict loaded = load_safetensors(path("views.safetensors"));
  for (const auto& [name, t] : saved) expect_same_tensor(loaded.at(name), t, name);
}

TEST_F(SafetensorsTest, RoundTripsMetadata) {
  std::map<std::string, std::string> metadata{{"epoch", "3"}, {"note", "caf\xc3\xa9 \xe2\x9c\x93"}, {"empty", ""}};
  save_safetensors(path("m.safetensors"), {{"w", pattern_tensor(DType::Float32, {2})}}, metadata);
  std::map<std::string, std::string> loaded{{"stale", "entry"}};
  load_safetensors(path("m.safetensors"), &loaded);
  EXPECT_EQ(loaded, metadata);

  save_safetensors(path("none.safetensors"), {{"w", pattern_tensor(DType::Float32, {2})}});
  load_safetensors(path("none.safetensors"), &loaded);
  EXPECT_TRUE(loaded.empty());
}

TEST_F(SafetensorsTest, RoundTripsAnEmptyDict) {
  save_safetensors(path("empty.safetensors"), TensorDict{}, {{"k", "v"}});
  std::map<std::string, std::string> metadata;
  EXPECT_TRUE(load_safetensors(path("empty.safetensors"), &metadata).empty());
  EXPECT_EQ(metadata.at("k"), "v");
}

// The CRC-32 of `bytes` (the reflected polynomial 0xEDB88320 of zlib, gzip
// and PNG, bit by bit) as save_safetensors records it: 8 lowercase hex digits.
std::string crc32_hex(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  char text[9];
  std::snprintf(text, sizeof text, "%08x", static_cast<unsigned>(~crc));
  return text;
}

// The bytes the reference writer would produce for the same content: header
// in dict order with "__metadata__" first, padded with spaces to 8 bytes;
// buffer with the float32 (wider) tensor before the int8 one. The metadata
// holds each tensor's checksum beside the caller's entries.
TEST_F(SafetensorsTest, WritesTheReferenceLayout) {
  TensorDict tensors{{"b", from_vector<int8_t>({1, -2})}, {"a", from_vector<float>({1.0f}, {1})}};
  save_safetensors(path("layout.safetensors"), tensors, {{"k", "v"}});
  const std::string a_bytes{'\x00', '\x00', '\x80', '\x3f'}, b_bytes{'\x01', '\xfe'};
  std::string header = R"({"__metadata__":{"k":"v","kiln.crc32.a":")" + crc32_hex(a_bytes) +
                       R"(","kiln.crc32.b":")" + crc32_hex(b_bytes) +
                       R"("},"b":{"dtype":"I8","shape":[2],"data_offsets":[4,6]},)"
                       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(read_bytes(path("layout.safetensors")), file_bytes(header, a_bytes + b_bytes));
}

// A file laid out as another writer might (buffer order unrelated to the
// header order, no padding) loads in header order.
TEST_F(SafetensorsTest, ReadsAHandBuiltFile) {
  std::string header = R"({"y":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},)"
                       R"("x":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  std::string buffer{5, 0, 0, 0, -1, -1, -1, -1, 7, 1, 0, 0};
  write_bytes(path("hand.safetensors"), file_bytes(header, buffer));
  TensorDict loaded = load_safetensors(path("hand.safetensors"));
  EXPECT_EQ(loaded.keys(), (std::vector<std::string>{"y", "x"}));
  expect_same_tensor(loaded.at("x"), from_vector<int32_t>({5, -1}), "x");
  expect_same_tensor(loaded.at("y"), from_vector<int32_t>({263}, {1}), "y");
}

// ---- corrupt files ----------------------------------------------------------------

const std::string kEntryA = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

TEST_F(SafetensorsTest, RejectsAFileShorterThanTheSizeField) {
  expect_load_error("abc", "the file is 3 bytes, too short to hold the 8-byte header size");
}

TEST_F(SafetensorsTest, RejectsAHeaderSizePastTheEnd) {
  expect_load_error(file_bytes("{" + kEntryA + "}", "", 1000), "header size 1000 runs past the end of the file");
}

TEST_F(SafetensorsTest, RejectsAnAbsurdHeaderSize) {
  expect_load_error(file_bytes("{}", "", uint64_t{1} << 40), "over the limit of 100000000 bytes");
}

TEST_F(SafetensorsTest, RejectsInvalidJson) {
  expect_load_error(file_bytes(R"({"a": {"dtype": )"), "the header is not valid JSON");
  expect_load_error(file_bytes("{\"\xff\": 1}"), "the header is not valid JSON");  // not UTF-8
  expect_load_error(file_bytes("[1, 2]"), "the header is not a JSON object");
}

TEST_F(SafetensorsTest, RejectsMalformedEntries) {
  expect_load_error(file_bytes(R"({"a": 3})"), "tensor 'a': the entry is not a JSON object");
  expect_load_error(file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})"),
                    "tensor 'a': the entry has no \"data_offsets\"");
}

TEST_F(SafetensorsTest, RejectsUnknownDTypes) {
  expect_load_error(file_bytes(R"({"a":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}})"),
                    "tensor 'a': unknown dtype \"I16\"");
  expect_load_error(file_bytes(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})"),
                    "tensor 'a': unknown dtype 4");
}

TEST_F(SafetensorsTest, RejectsInvalidShapes) {
  for (std::string shape : {"[-2]", "[2.0]", "[\"2\"]", "2", "[9223372036854775808]"}) {
    SCOPED_TRACE(shape);
    expect_load_error(file_bytes(R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,8]}})"),
                      "tensor 'a': invalid shape");
  }
  expect_load_error(
      file_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})"),
      "has more elements than fit in 64 bits");
}

TEST_F(SafetensorsTest, RejectsInvalidDataOffsets) {
  for (std::string offsets : {"[0]", "[8,0]", "[0,-8]", "[0,8,8]", "\"0-8\"", "[0.0,8]"}) {
    SCOPED_TRACE(offsets);
    expect_load_error(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + offsets + "}}"),
                      "tensor 'a': invalid data_offsets");
  }
}

TEST_F(SafetensorsTest, RejectsAByteLengthThatDoesNotMatchTheShape) {
  expect_load_error(file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"),
                    "tensor 'a': data_offsets [0, 8] span 8 bytes but F32 of shape [3] needs 12 bytes");
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  std::string header = "{" + kEntryA + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_load_error(file_bytes(header, std::string(12, '\0')),
                    "tensors 'a' [0, 8) and 'b' [4, 12) overlap in the data buffer");
}

TEST_F(SafetensorsTest, RejectsHolesInTheBuffer) {
  std::string gap = "{" + kEntryA + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  expect_load_error(file_bytes(gap, std::string(20, '\0')),
                    "hole in the data buffer: bytes [8, 12) belong to no tensor (before 'b')");
  std::string late_start = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_load_error(file_bytes(late_start, std::string(12, '\0')), "bytes [0, 4) belong to no tensor");
  expect_load_error(file_bytes("{" + kEntryA + "}", std::string(12, '\0')),
                    "bytes [8, 12) at the end of the data buffer belong to no tensor");
}

TEST_F(SafetensorsTest, RejectsATruncatedFile) {
  save_safetensors(path("t.safetensors"), {{"w", pattern_tensor(DType::Float64, {4})}});
  std::string bytes = read_bytes(path("t.safetensors"));
  expect_load_error(bytes.substr(0, bytes.size() - 5),
                    "tensor 'w' ends at byte 32 of the data buffer but the file holds only 27 data bytes "
                    "(truncated file)");
}

TEST_F(SafetensorsTest, RejectsDuplicateNames) {
  expect_load_error(file_bytes("{" + kEntryA + "," + kEntryA + "}"),
                    "duplicate key 'a' at the top level of the header (tensor names must be unique)");
  expect_load_error(file_bytes(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
                    "duplicate key 'dtype' inside the entry of 'a'");
}

TEST_F(SafetensorsTest, RejectsMetadataThatIsNotStrings) {
  expect_load_error(file_bytes(R"({"__metadata__":{"k":1},)" + kEntryA + "}"),
                    "\"__metadata__\" must map strings to strings, but 'k' holds 1");
  expect_load_error(file_bytes(R"({"__metadata__":["k"],)" + kEntryA + "}"),
                    "\"__metadata__\" must be an object of strings");
}

// A flipped bit anywhere in a tensor's bytes is an error naming that tensor
// (the buffer holds the float64 tensor first, the int8 one last).
TEST_F(SafetensorsTest, RejectsAFlippedBitNamingTheTensor) {
  const std::string file = path("flip.safetensors");
  save_safetensors(file, {{"narrow", pattern_tensor(DType::Int8, {5})}, {"wide", pattern_tensor(DType::Float64, {4})}});
  const std::string bytes = read_bytes(file);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const size_t buffer_start = 8 + header_size;
  for (auto [offset, name] : {std::pair<size_t, std::string>{buffer_start + 3, "wide"}, {bytes.size() - 1, "narrow"}}) {
    SCOPED_TRACE(name);
    std::string flipped = bytes;
    flipped[offset] = static_cast<char>(flipped[offset] ^ 0x10);
    expect_load_error(flipped, "tensor '" + name + "' is corrupt: the CRC-32 of its");
    expect_load_error(flipped, "metadata field 'kiln.crc32." + name + "' records");
  }
  EXPECT_EQ(load_safetensors(file).size(), 2u);  // the file itself is intact
}

TEST_F(SafetensorsTest, RejectsMalformedChecksumsNamingTheField) {
  const std::string buffer(8, '\0');
  auto with_metadata = [&](const std::string& metadata) {
    return file_bytes(R"({"__metadata__":)" + metadata + "," + kEntryA + "}", buffer);
  };
  for (std::string bad : {"xyz", "", "0000000g", "ABCDEF01", "123456789", "-1234567"}) {
    SCOPED_TRACE(bad);
    expect_load_error(with_metadata(R"({"kiln.crc32.a":")" + bad + R"("})"),
                      "metadata field 'kiln.crc32.a' is \"" + bad + "\"; expected a CRC-32 as 8 lowercase hex digits");
  }
  const std::string good = crc32_hex(buffer);
  expect_load_error(with_metadata(R"({"kiln.crc32.a":")" + good + R"(","kiln.crc32.z":")" + good + R"("})"),
                    "metadata field 'kiln.crc32.z' is the checksum of a tensor the file does not hold");
  expect_load_error(file_bytes(R"({"__metadata__":{"kiln.crc32.a":")" + good + R"("},)" + kEntryA +
                                   R"(,"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                               buffer),
                    "tensor 'b' has no checksum (metadata field 'kiln.crc32.b') but the file's other tensors do");
  // The right checksum loads, and is not handed back as metadata.
  write_bytes(path("ok.safetensors"), with_metadata(R"({"kiln.crc32.a":")" + good + R"(","k":"v"})"));
  std::map<std::string, std::string> metadata;
  EXPECT_EQ(load_safetensors(path("ok.safetensors"), &metadata).size(), 1u);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"k", "v"}}));
}

TEST_F(SafetensorsTest, RejectsBooleansOtherThanZeroAndOne) {
  expect_load_error(file_bytes(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", {1, 0, 2}),
                    "tensor 'm' (BOOL) holds byte 2 at element 2; booleans must be 0 or 1");
}

TEST_F(SafetensorsTest, RejectsMissingFilesAndDirectories) {
  expect_error([&] { load_safetensors(path("missing.safetensors")); },
               "load_safetensors: cannot open '" + path("missing.safetensors") + "': No such file or directory");
  std::string dir = dir_.string();
  expect_error([&] { load_safetensors(dir); }, "'" + dir + "' is not a regular file");
}

// ---- saving: rejected input and atomicity --------------------------------------------

TEST_F(SafetensorsTest, RejectsUnsavableNamesWithoutTouchingTheDirectory) {
  std::string file = path("x.safetensors");
  expect_error([&] { save_safetensors(file, {{"__metadata__", pattern_tensor(DType::Float32, {1})}}); },
               "a tensor may not be named \"__metadata__\"");
  expect_error([&] { save_safetensors(file, {{"bad\xff", pattern_tensor(DType::Float32, {1})}}); },
               "'" + file + "': a tensor name or metadata string is not valid UTF-8");
  expect_error([&] { save_safetensors(file, {}, {{"k", "\xc3"}}); }, "is not valid UTF-8");
  expect_error([&] { save_safetensors("", {}); }, "save_safetensors: the path is empty");
  expect_error([&] { save_safetensors(file, {}, {{"kiln.crc32.w", "00000000"}}); },
               "metadata key 'kiln.crc32.w' uses the prefix \"kiln.crc32.\", which Kiln reserves");
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, ReportsAMissingDirectory) {
  std::string file = path("no/such/dir/x.safetensors");
  expect_error([&] { save_safetensors(file, {}); },
               "cannot create the temporary file '" + file + ".tmp." + std::to_string(::getpid()) + "' for '" + file +
                   "': No such file or directory");
}

TEST_F(SafetensorsTest, OverwritesAnExistingFile) {
  std::string file = path("w.safetensors");
  save_safetensors(file, {{"old", pattern_tensor(DType::Int32, {3})}});
  save_safetensors(file, {{"new", pattern_tensor(DType::Float64, {2, 2})}});
  TensorDict loaded = load_safetensors(file);
  EXPECT_EQ(loaded.keys(), std::vector<std::string>{"new"});
  expect_same_tensor(loaded.at("new"), pattern_tensor(DType::Float64, {2, 2}), "new");
  EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
}

// The temporary file cannot be created: a directory already has its name.
TEST_F(SafetensorsTest, AFailedCreateLeavesTheOldFileIntact) {
  std::string file = path("w.safetensors");
  save_safetensors(file, {{"old", pattern_tensor(DType::Int32, {3})}});
  std::string old_bytes = read_bytes(file);
  std::string temp_name = "w.safetensors.tmp." + std::to_string(::getpid());
  fs::create_directory(path(temp_name));

  expect_error([&] { save_safetensors(file, {{"new", pattern_tensor(DType::Float32, {64})}}); },
               "cannot create the temporary file '" + path(temp_name) + "' for '" + file + "': Is a directory");
  EXPECT_EQ(read_bytes(file), old_bytes);
  EXPECT_EQ(listing(), (std::vector<std::string>{"w.safetensors", temp_name}));
  EXPECT_TRUE(fs::is_empty(path(temp_name)));
}

// Sets the largest file this process may write, as a full disk would, and
// restores the limit and SIGXFSZ (whose default action kills the process) on exit.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    previous_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &previous_);
    rlimit limit = previous_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &previous_);
    ::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit previous_{};
  sighandler_t previous_handler_;
};

// The write fails after the header and part of the data have gone out.
TEST_F(SafetensorsTest, AFailedWriteLeavesTheOldFileIntactAndNoTemporaryFile) {
  std::string file = path("w.safetensors");
  save_safetensors(file, {{"old", pattern_tensor(DType::Int32, {3})}});
  std::string old_bytes = read_bytes(file);
  {
    FileSizeLimit limit(512);
    expect_error([&] { save_safetensors(file, {{"new", pattern_tensor(DType::Float32, {1024})}}); },
                 "save_safetensors: cannot write '" + file + ".tmp." + std::to_string(::getpid()) +
                     "' (temporary file for '" + file + "') at byte 512: File too large");
  }
  EXPECT_EQ(read_bytes(file), old_bytes);
  EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
}

// ---- PyTorch interop -------------------------------------------------------------------

// Asked once: importing torch takes seconds.
bool have_torch() {
  static const bool available = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  return available;
}

// The repository's scripts/ folder, found from this file's path (CMake
// compiles tests with absolute paths).
fs::path scripts_dir() { return fs::path(__FILE__).parent_path().parent_path().parent_path() / "scripts"; }

// The Python half of the interop tests: the same pattern as pattern_value,
// computed by torch, and the list of expected names.
std::string python_prelude() {
  std::string shapes;
  for (const Shape& shape : kShapes) {
    shapes += "[";
    for (int64_t s : shape) shapes += std::to_string(s) + ",";
    shapes += "],";
  }
  return "import sys, torch\n"
         "sys.path.insert(0, '" + scripts_dir().string() + "')\n"
         "import safetensors_torch as st\n"
         "DTYPES = {'BOOL': torch.bool, 'U8': torch.uint8, 'I8': torch.int8, 'I32': torch.int32,\n"
         "          'I64': torch.int64, 'F16': torch.float16, 'BF16': torch.bfloat16, 'F32': torch.float32,\n"
         "          'F64': torch.float64}\n"
         "SHAPES = [" + shapes + "]\n"
         "METADATA = {'framework': 'kiln', 'note': 'caf\\u00e9 \\u2713'}\n"
         "def pattern(code, shape):\n"
         "    n = 1\n"
         "    for s in shape: n *= s\n"
         "    k = torch.arange(n, dtype=torch.int64)\n"
         "    base = (k * 7) % 23\n"
         "    if code == 'BOOL': v = (k % 3) == 0\n"
         "    elif code == 'U8': v = base * 10\n"
         "    elif code == 'I64': v = (base - 11) * 10**12\n"
         "    elif code in ('I8', 'I32'): v = base - 11\n"
         "    else: v = (base - 11).double() * 0.375\n"
         "    return v.to(DTYPES[code]).reshape(shape)\n"
         "def name(code, shape): return code + ':' + ','.join(str(s) for s in shape)\n";
}

const std::map<std::string, std::string> kInteropMetadata{{"framework", "kiln"}, {"note", "caf\xc3\xa9 \xe2\x9c\x93"}};

// Runs `program` with /usr/bin/python3; returns its exit status and output.
std::pair<int, std::string> run_python(const std::string& program, const fs::path& dir) {
  write_bytes((dir / "check.py").string(), program);
  std::string command =
      "/usr/bin/python3 " + (dir / "check.py").string() + " > " + (dir / "check.log").string() + " 2>&1";
  int status = std::system(command.c_str());
  return {status, read_bytes((dir / "check.log").string())};
}

TEST_F(SafetensorsTest, PyTorchReadsKilnFiles) {
  if (!have_torch()) GTEST_SKIP() << "PyTorch is not importable by /usr/bin/python3 (apt install python3-torch)";
  ASSERT_TRUE(fs::exists(scripts_dir() / "safetensors_torch.py")) << "no safetensors_torch.py in " << scripts_dir();
  TensorDict saved;
  for (const auto& [dtype, code] : kCodes)
    for (const Shape& shape : kShapes) saved.insert(pattern_name(code, shape), pattern_tensor(dtype, shape));
  // A transposed view holding the pattern of shape (3, 4).
  Tensor storage = Tensor::empty({4, 3}, DType::Float32);
  storage.t().copy_(pattern_tensor(DType::Float32, {3, 4}));
  saved.insert("F32:3,4", storage.t());
  save_safetensors(path("kiln.safetensors"), saved, kInteropMetadata);

  std::string program = python_prelude() +
                        "path = '" + path("kiln.safetensors") + "'\n"
                        "tensors = st.load_file(path)\n"
                        "expected = [name(c, s) for c in DTYPES for s in SHAPES] + ['F32:3,4']\n"
                        "assert list(tensors) == expected, list(tensors)\n"
                        "for key, t in tensors.items():\n"
                        "    code, dims = key.split(':')\n"
                        "    shape = [int(d) for d in dims.split(',')] if dims else []\n"
                        "    want = pattern(code, shape)\n"
                        "    assert t.dtype == want.dtype and t.shape == want.shape, (key, t.dtype, t.shape)\n"
                        "    assert torch.equal(t, want), (key, t, want)\n"
                        "meta = st.load_metadata(path)\n"
                        "assert {k: v for k, v in meta.items() if not k.startswith('kiln.crc32.')} == METADATA, meta\n"
                        "import json, struct, zlib\n"
                        "raw = open(path, 'rb').read()\n"
                        "n = struct.unpack('<Q', raw[:8])[0]\n"
                        "for key, entry in json.loads(raw[8:8 + n]).items():\n"
                        "    if key == '__metadata__': continue\n"
                        "    b, e = entry['data_offsets']\n"
                        "    assert meta['kiln.crc32.' + key] == '%08x' % zlib.crc32(raw[8 + n + b:8 + n + e]), key\n"
                        "print('ok')\n";
  auto [status, output] = run_python(program, dir_);
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "ok\n");
}

TEST_F(SafetensorsTest, KilnReadsPyTorchFiles) {
  if (!have_torch()) GTEST_SKIP() << "PyTorch is not importable by /usr/bin/python3 (apt install python3-torch)";
  ASSERT_TRUE(fs::exists(scripts_dir() / "safetensors_torch.py")) << "no safetensors_torch.py in " << scripts_dir();
  std::string program = python_prelude() +
                        "tensors = {name(c, s): pattern(c, s) for c in DTYPES for s in SHAPES}\n"
                        "st.save_file(tensors, '" + path("torch.safetensors") + "', metadata=METADATA)\n"
                        "print('ok')\n";
  auto [status, output] = run_python(program, dir_);
  ASSERT_EQ(status, 0) << output;

  std::map<std::string, std::string> metadata;
  TensorDict loaded = load_safetensors(path("torch.safetensors"), &metadata);
  EXPECT_EQ(metadata, kInteropMetadata);
  EXPECT_EQ(loaded.size(), kCodes.size() * kShapes.size());
  for (const auto& [dtype, code] : kCodes)
    for (const Shape& shape : kShapes) {
      std::string name = pattern_name(code, shape);
      expect_same_tensor(loaded.at(name), pattern_tensor(dtype, shape), name);
    }
}

}  // namespace
}  // namespace kiln
